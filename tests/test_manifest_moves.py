"""A commit on the baseline branch that changes or breaks the manifest, while the daemon runs.

The daemon read the manifest once, at start. Walking karpathy/ng-video-lecture, a commit that
dropped `metric` from the baseline's `.autoresearch.toml` was measured at once under the old
manifest (`dispatched baseline-5e8a82ef-s0`), with no word that the baseline's manifest no longer
parsed, and a changed manifest (a raised `time_budget_s`, as docs/env-tinygpt.md advises) was
ignored the same way until a restart. Now the daemon holds new work on such a baseline, says why
in its log and in `status`, and a restart picks up the new manifest. Real git, the real daemon.
"""

from __future__ import annotations

import json
import subprocess
import sys

from autoresearchd.app import build_daemon
from autoresearchd.config import load_config
from autoresearchd.store import gitrepo
from autoresearchd.store.gitrepo import GitRepo

from conftest import TOY_EVAL, TOY_MANIFEST, TOY_RUN, git, run_until_settled, write_config


def _commit_manifest(repo, text: str, message: str) -> str:
    (repo / ".autoresearch.toml").write_text(text)
    git(repo, "commit", "-qam", message)
    return git(repo, "rev-parse", "HEAD").strip()


def test_a_baseline_commit_that_breaks_or_changes_the_manifest_holds_new_work(make_repo, tmp_path):
    repo = make_repo({".autoresearch.toml": TOY_MANIFEST, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL}, "research")
    cfg = write_config(tmp_path, repo)
    d = build_daemon(load_config(cfg))
    seen: dict[str, str] = {}
    phase = {"n": 0, "after": 0}

    def until(pop) -> bool:
        held = (d.last_state or {}).get("held") or ""
        if phase["n"] == 0 and pop.baseline_note is not None and len(pop.baseline_note.values) == 2 \
                and not pop.baseline_leases:
            seen["broken"] = _commit_manifest(repo, TOY_MANIFEST.replace('metric = "score"\n', ""), "drop metric")
            phase["n"] = 1
        elif phase["n"] == 1 and "invalid manifest" in held:
            phase["after"] += 1
            if phase["after"] >= 5:             # a few passes more: still nothing dispatched
                seen["held_broken"] = held
                seen["changed"] = _commit_manifest(repo, TOY_MANIFEST.replace("time_budget_s = 30",
                                                                              "time_budget_s = 31"), "raise budget")
                phase["n"], phase["after"] = 2, 0
        elif phase["n"] == 2 and "changed" in held and seen["changed"][:10] in held:
            phase["after"] += 1
            if phase["after"] >= 5:
                seen["held_changed"] = held
                return True
        return False

    pop = run_until_settled(daemon=d, until=until, timeout=120)
    assert "metric" in seen["held_broken"] and seen["broken"][:10] in seen["held_broken"], seen
    assert "restart" in seen["held_changed"], seen
    # nothing ran on either new baseline commit under the old manifest
    assert pop.baseline_commit == seen["changed"]
    assert pop.baseline_note is None and not pop.baseline_leases, (pop.baseline_note, pop.baseline_leases)
    r = GitRepo(repo)
    assert r.note_read("refs/notes/autoresearch", seen["broken"]) is None
    assert r.note_read("refs/notes/autoresearch-runs", seen["broken"]) is None
    log = (gitrepo.state_dir(r) / "daemon.json").read_text()
    assert "changed" in json.loads(log)["held"]

    # status says so while a daemon holds (its heartbeat names it): a live one, as `status` reads it
    state = json.loads(log) | {"pid": __import__("os").getpid(), "heartbeat": __import__("time").time()}
    (gitrepo.state_dir(r) / "daemon.json").write_text(json.dumps(state))
    out = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "status"],
                         capture_output=True, text=True, timeout=120, env={**__import__("os").environ, "COLUMNS": "300"})
    assert "held: the manifest (.autoresearch.toml) changed" in out.stdout, out.stdout + out.stderr
    (gitrepo.state_dir(r) / "daemon.json").unlink()

    # a restart runs with the new manifest: the moved baseline is measured
    pop = run_until_settled(cfg, timeout=120)
    assert pop.baseline_commit == seen["changed"] and len(pop.baseline_note.values) == 2
