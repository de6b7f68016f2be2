"""`ideas` at 80 columns after the baseline moved: a result measured against the old baseline has the
longest delta cell (`-0.3824 mean, old 3.0385@fed95d4`), and on a terminal that wide it left the
status column no width at all (the word vanished) and cut the old baseline's commit. The delta now
wraps and the status keeps its word. Real git, the real daemon, the real view."""

from __future__ import annotations

import io

from rich.console import Console

from autoresearchd.config import load_config
from autoresearchd.views.observe import ideas_table

from conftest import TOY_EVAL, TOY_MANIFEST, TOY_RUN, branch_idea, git, run_until_settled, write_config


def test_ideas_at_80_columns_shows_a_stale_rows_status_and_old_baseline(make_repo, tmp_path):
    repo = make_repo({".autoresearch.toml": TOY_MANIFEST, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL}, "research")
    branch_idea(repo, "alice/a-long-branch-name", "Lower x a little, a title long enough to wrap at 80",
                {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.99")})
    cfg = write_config(tmp_path, repo)
    pop = run_until_settled(cfg, timeout=120)
    old_base = pop.baseline_commit
    git(repo, "commit", "-q", "--allow-empty", "-m", "the baseline moves")
    pop = run_until_settled(cfg, timeout=120)
    alice = next(i for i in pop.ideas if "alice" in (i.branch or ""))
    assert pop.baseline_commit != old_base and pop.stale(alice)
    buf = io.StringIO()
    assert ideas_table(load_config(cfg), Console(file=buf, width=80, force_terminal=True, color_system=None)) == 0
    out = buf.getvalue()
    assert all(len(ln) <= 80 for ln in out.splitlines()), out
    header = next(ln for ln in out.splitlines() if "Δ baseline" in ln)
    assert "status" in header, out
    row = "\n".join(ln for ln in out.splitlines() if alice.status.value in ln)
    assert alice.status.value in row and alice.idea_id in row, out     # on the idea's own line
    assert f"@{old_base[:7]}" in out, out      # the old baseline whole, on one line
