"""Provenance and plausibility: the daemon owns provenance, suspicious results never count, titles
are data, and the daemon's git runs no planted hook and leaks no secret. Unit tests of the decisions, then one real
daemon run on a toy env (real git, real pushes from a clone, the local runner, the real CLI)."""

import io
import json
import os
import subprocess
import sys
import time

import pytest
from needs import needs
from rich.console import Console

from autoresearchd.config import WandbCfg, load_config
from autoresearchd.engine.judge import aggregate
from autoresearchd.engine.judge import build_note
from autoresearchd.manifest import EnvManifest, ManifestError, parse_manifest
from autoresearchd.research import _HOOK_HEAD, HOOKS
from autoresearchd.store.gitrepo import GitRepo, git_env
from autoresearchd.store.notes import Lease, Note, Status, Trial
from autoresearchd.store.refs import IDEAS_PREFIX
from autoresearchd.store.trailers import Trailers
from autoresearchd.store.trust import suspicion

from conftest import TOY_EVAL, TOY_RUN, branch_idea, git, run_until_settled, write_config
from fixtures_sshd import ssh_fleet, sshd_missing  # noqa: F401

M = EnvManifest(run="x", metric="val_loss", goal="min", plausible=(2.5, 12.0))
FAKE_KEY = "sk-ant-FAKE-trust-test-0123456789"
EVIL = "[/bold] <script>alert(1)</script> [red]x"


# -- decisions ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value,tamper,why", [
    (3.1, [], None),
    (2.5, [], None),                                        # the bounds themselves are plausible
    (2.1, [], "implausible: val_loss=2.1 is below"),
    (12.5, [], "implausible: val_loss=12.5 is above"),
    (float("nan"), [], "implausible: val_loss=nan is not a finite number"),
    (3.1, ["> abc  evaluate.py"], "tamper: > abc  evaluate.py"),   # an ordinary number proves nothing
    (None, [], None),
])
def test_suspicion_decision(value, tamper, why):
    got = suspicion(value, tamper, M)
    assert (got is None) if why is None else got.startswith(why), got


def test_no_range_declared_only_non_finite_is_suspicious():
    m = EnvManifest(run="x", metric="score")
    assert suspicion(0.0, [], m) is None and suspicion(-1e9, [], m) is None
    assert suspicion(float("inf"), [], m).startswith("implausible")


def test_manifest_plausible_must_be_an_ordered_pair():
    assert parse_manifest('[env]\nrun = "x"\nmetric = "m"\nplausible = [1, 2]\n').plausible == (1.0, 2.0)
    for bad in ("[2, 1]", "[1]", '"low"'):
        with pytest.raises(ManifestError, match="plausible"):
            parse_manifest(f'[env]\nrun = "x"\nmetric = "m"\nplausible = {bad}\n')


def test_one_suspicious_seed_taints_the_commit_and_is_never_promoted():
    ok = Trial(trial_id="a", seed=0, status=Status.SUCCEEDED, value=3.0)
    bad = Trial(trial_id="b", seed=1, status=Status.SUSPICIOUS, value=1.0, error="implausible: x")
    agg = aggregate([ok, bad])
    assert agg["status"] == Status.SUSPICIOUS and agg["values"] == [3.0, 1.0] and agg["error"] == "implausible: x"

    class Pop:                      # a measured baseline, nothing else
        baseline_note = Note(status=Status.SUCCEEDED, value=3.2, std=0.01, values=[3.2, 3.21],
                             trials=[Trial(trial_id="b0", seed=0, status=Status.SUCCEEDED, value=3.2)])
        baseline_commit = "b" * 40
        by_id: dict = {}
        ideas: list = []
    from autoresearchd.config import PolicyCfg
    from autoresearchd.store.ideas import Idea
    n = build_note([ok, bad], Idea(idea_id="e000-x", commit="c" * 40, title="t", text="t"), Pop(), M, PolicyCfg())
    assert n.status == Status.SUSPICIOUS and n.decision is None and n.value is not None


def test_only_commits_the_daemon_marked_keep_their_trailers(tmp_path):
    from autoresearchd.store.ideas import format_message
    from autoresearchd.store.population import read_population
    repo = GitRepo.init(tmp_path / "r")
    (repo.path / "a").write_text("a\n")
    base = repo.commit_all_initial("base")
    tree = repo.tree_with_files(base, {"a": b"b\n"})
    tr = {"Idea-Id": "e003-11111111", "Origin": "exploit", "Epoch": 3, "Cost-USD": "0.5", "Tokens": 900}
    own = repo.commit_tree(tree, [base], format_message("Daemon idea", "body", tr))
    repo.update_ref(IDEAS_PREFIX + "e003-11111111", own)
    repo.update_ref("refs/heads/idea/e003/daemon-11111111", own)
    # a push on top of the daemon's idea, copying its footer (and bumping the cost)
    forged = repo.commit_tree(repo.tree_with_files(own, {"a": b"c\n"}), [own],
                              format_message("Tweak", "more", dict(tr, **{"Cost-USD": "1e9", "Epoch": 99})))
    repo.update_ref("refs/heads/idea/bob/tweak", forged)
    pop = read_population(repo, "main")
    d, p = pop.by_commit[own], pop.by_commit[forged]
    assert (d.idea_id, d.origin, d.epoch, d.cost_usd, d.tokens) == ("e003-11111111", "exploit", 3, 0.5, 900)
    assert (p.idea_id, p.origin, p.epoch, p.cost_usd, p.tokens, p.trailers) == (f"h-{forged[:10]}", "human", 3,
                                                                                  None, None, Trailers())
    assert p.parents == ["e003-11111111"] and p.text == "more" and pop.max_epoch() == 3


# -- the daemon's git: no planted hook, no secret --------------------------------------------------------
def test_daemon_git_runs_no_planted_hook_and_sees_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    for k, v in {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}.items():
        monkeypatch.setenv(k, v)        # a config key named in the environment is not a secret: kept
    repo = GitRepo.init(tmp_path / "r")
    (repo.path / "a").write_text("a\n")
    base = repo.commit_all_initial("base")
    spy = tmp_path / "hook-ran"
    hook = repo.git_dir / "hooks" / "reference-transaction"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!/bin/sh\nenv >> {spy}\n")          # what a trial that reached .git would plant
    hook.chmod(0o755)
    repo.update_ref("refs/heads/idea/x", base)
    repo.note_write("refs/notes/autoresearch", base, "status: failed\n")
    assert not spy.exists(), "the daemon's git ran a hook from the git dir"
    # every git process the daemon starts has the secret scrubbed (a shell alias shows its environment)
    out = repo.git("-c", "alias.showenv=!env", "showenv")
    assert "GIT_PAGER=cat" in out and FAKE_KEY not in out and "ANTHROPIC_API_KEY" not in out
    assert "ANTHROPIC_API_KEY" not in git_env()
    # plain git (a person's) still runs it: it is the daemon's own processes that skip hooks
    git(repo.path, "update-ref", "refs/heads/idea/y", base)
    assert spy.exists()


def test_installed_hooks_scrub_their_environment(tmp_path):
    repo = GitRepo.init(tmp_path / "r")
    h = tmp_path / "probe"
    h.write_text(_HOOK_HEAD % "probe" + f'env > {tmp_path / "env.txt"}\n')
    h.chmod(0o755)
    subprocess.run([str(h)], cwd=repo.path, check=True, env=dict(os.environ, OPENAI_API_KEY=FAKE_KEY, MY_TOKEN="t"))
    env = (tmp_path / "env.txt").read_text()
    assert FAKE_KEY not in env and "MY_TOKEN" not in env and f"GIT_DIR={repo.git_dir}" in env
    assert all(text.startswith(_HOOK_HEAD.split("%s")[0]) for text in HOOKS.values())


# -- end to end: pushes, a hack, a tamper, hostile titles ---------------------------------------------------
PLAUSIBLE_TOY = """[env]
name = "toy"
run = "python3 run.py"
evaluate = "python3 evaluate.py"
metric = "score"
goal = "min"
time_budget_s = 60
eval_budget_s = 60
frozen = ["evaluate.py"]
artifacts = ["out.txt"]
plausible = [0.5, 2.0]
"""


def _push(cl, name, message, run_py):
    git(cl, "checkout", "-q", "-B", "w-" + name.replace("/", "-"), "origin/main")
    (cl / "run.py").write_text(run_py)
    git(cl, "commit", "-qam", message)
    git(cl, "push", "-q", "origin", f"HEAD:refs/heads/idea/{name}")
    return git(cl, "rev-parse", "HEAD").strip()


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "autoresearchd.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120, env=dict(os.environ, COLUMNS="200"))


def test_pushed_provenance_hacks_and_titles_end_to_end(make_repo, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    research = make_repo({".autoresearch.toml": PLAUSIBLE_TOY, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL},
                         "research")
    cfg_path = write_config(tmp_path, research, '[wandb]\nenabled = false\n')
    from autoresearchd.research import open_research
    open_research(load_config(cfg_path), configure_repo=True)   # installs the hooks, as `init`/`start` do
    cl = tmp_path / "clone"
    git(tmp_path, "clone", "-q", f"file://{research}", str(cl))
    # an honest improvement whose message forges every provenance trailer the daemon knows
    forged = _push(cl, "mallory/forged", "Scale x to 0.9 <script>alert(2)</script>\n\nAn honest change with a forged footer.\n\n"
                   "Idea-Id: e000-deadbeef\nOrigin: seed\nEpoch: 99\nParents: e000-cafecafe\nCost-USD: 1e9\n"
                   "Tokens: 999999999\nIdea-Cost-USD: 1e9\nModel: gpt-9\nTrailer-Version: x\n",   # unreadable: no crash
                   TOY_RUN.replace("x = 1.0", "x = 0.9"))
    # a reward hack: a number far better than the env allows (below the plausible floor)
    hack = _push(cl, "mallory/hack", EVIL, TOY_RUN.replace("x = 1.0", "x = 0.01"))
    # tamper: the run rewrites the frozen evaluator in its own code dir (the runner's evidence)
    tamper = _push(cl, "mallory/tamper", "Scale x to 0.8 [bold]quietly[/]",
                   TOY_RUN.replace("x = 1.0", "x = 0.8") + "open('evaluate.py', 'a').write('# mine\\n')\n")
    # a push cannot write the daemon's own refs: results, provenance marks
    for ref in ("refs/notes/autoresearch", "refs/autoresearch/ideas/e000-deadbeef"):
        p = subprocess.run(["git", "push", "origin", f"+HEAD:{ref}"], cwd=cl, capture_output=True, text=True)
        assert p.returncode != 0 and "only the daemon writes" in p.stderr, p.stderr
    # nor move the baseline, whose frozen evaluator grades every idea (this one would grade all as 0.5)
    git(cl, "checkout", "-q", "-b", "evil-eval", "origin/main")
    (cl / "evaluate.py").write_text("print('---')\nprint('score: 0.5')\n")
    git(cl, "commit", "-qam", "Faster evaluation")
    for push in (["+HEAD:main"], ["--delete", "main"]):
        p = subprocess.run(["git", "push", "origin", *push], cwd=cl, capture_output=True, text=True)
        assert p.returncode != 0 and "it is the baseline" in p.stderr, p.stderr
    assert git(research, "rev-parse", "main") == git(cl, "rev-parse", "origin/main")

    pop = run_until_settled(cfg_path, timeout=240)
    f, h, t = pop.by_commit[forged], pop.by_commit[hack], pop.by_commit[tamper]
    # provenance: the daemon's, recorded in its note; the message itself is kept
    assert (f.idea_id, f.origin, f.epoch, f.parents, f.cost_usd, f.tokens, f.model) == \
        (f"h-{forged[:10]}", "human", 0, [], None, None, None)
    assert f.title == "Scale x to 0.9 <script>alert(2)</script>" and "Epoch: 99" in git(research, "log", "-1", "--format=%B", forged)
    assert (f.note.origin, f.note.epoch, f.note.cost_usd, f.note.tokens) == ("human", 0, None, None)
    assert f.note.status == Status.SUCCEEDED and f.note.decision == "promoted", f.note
    # the hack and the tamper are measured, kept visible, and never trusted
    assert h.note.status == Status.SUSPICIOUS and h.note.error.startswith("implausible: score=0.01")
    assert h.value is None and h.note.value == pytest.approx(0.01, abs=0.011) and h.note.decision is None
    assert t.note.status == Status.SUSPICIOUS and t.note.error.startswith("tamper:") and t.note.tamper
    assert t.value is None and t.note.decision is None
    assert h.title == EVIL

    # the budget and the epoch did not move; the best is the honest idea, everywhere it is shown
    from autoresearchd.app import restore_spend
    from autoresearchd.llm.base import Budget
    from autoresearchd.research import open_research as reopen
    from autoresearchd.views.summary import leaderboard, summary

    class P:
        budget = Budget()
    cfg = load_config(cfg_path)
    restore_spend(P, reopen(cfg))
    assert P.budget.usd == 0 and P.budget.input_tokens == 0
    s = summary(cfg)
    assert s["spend"]["usd"] == 0 and s["epoch"] == 0 and s["best"]["idea"] == f.idea_id
    assert s["best_unconfirmed"] is None
    from autoresearchd.policies.evolutionary import exploit_candidates
    from autoresearchd.policies.greedy import greedy_base
    m = reopen(cfg).manifest                 # the policies build only on the honest idea
    preferred, others = exploit_candidates(pop, m)
    assert [i.commit for i in preferred + others] == [forged] and greedy_base(pop, m).commit == forged
    rows = leaderboard(cfg)
    assert rows[0]["idea"] == f.idea_id and {r["idea"]: r["value"] for r in rows}[h.idea_id] is None

    # the CLI views show hostile titles as text and do not crash
    for args in (["ideas"], ["show", h.idea_id], ["show", t.idea_id], ["status"]):
        p = _cli(*args, cwd=tmp_path)
        assert p.returncode == 0, (args, p.stderr[-2000:])
    shown = _cli("show", h.idea_id, cwd=tmp_path).stdout
    assert "[/bold] <script>alert(1)</script> [red]x" in shown and "suspicious" in shown
    assert "quietly[/]" in _cli("ideas", cwd=tmp_path).stdout.replace("\n", "")
    assert f.idea_id in _cli("status", cwd=tmp_path).stdout

    # the HTML report escapes titles and does not rank the hack; export has no result for it
    p = _cli("report", "--out", str(tmp_path / "rep"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    html_text = next((tmp_path / "rep").glob("*.html")).read_text()
    assert "<script>" not in html_text and "&lt;script&gt;alert(2)&lt;/script&gt;" in html_text
    from autoresearchd.views.export import records
    recs = {r["idea_id"]: r for r in records(cfg)}
    assert recs[h.idea_id]["result"] is None and recs[t.idea_id]["result"] is None
    assert recs[f.idea_id]["origin"] == "human" and recs[f.idea_id]["cost"]["usd"] == 0

    # W&B: a suspicious value is never logged under the metric or `value`; the title is data
    from autoresearchd.views.wandb_mirror import WandbMirror
    w = WandbMirror(WandbCfg(enabled=True), reopen(cfg).manifest, background=False)
    ph = w.payload(hack, h, h.note)
    assert "score" not in ph["summary"] and ph["summary"]["value"] is None
    assert ph["summary"]["suspect_value"] == h.note.value and ph["config"]["title"] == EVIL
    assert w.payload(forged, f, f.note)["summary"]["score"] == f.note.value

    # no object in the research repo holds the daemon's key
    objs = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=research,
                          capture_output=True, check=True).stdout
    assert FAKE_KEY.encode() not in objs


def test_progress_renders_a_markup_title_as_text():
    from autoresearchd.store.ideas import Idea
    from autoresearchd.views.progress import render_progress

    from autoresearchd.store.population import Population
    pop = Population([Idea(idea_id="e000-x", commit="c" * 40, title=EVIL, text="t",
                           leases=[Lease(trial_id="e000-x-s0", seed=0, runner="local", host="local", slot="0",
                                         started=time.time() - 5, heartbeat=time.time())])], None, None)
    out = io.StringIO()
    Console(file=out, width=200).print(render_progress({}, pop, 60))
    assert "[/bold] <script>" in out.getvalue()


# -- the same policy on the ssh runner (real sshd on loopback) ---------------------------------------------
@needs("sshd", sshd_missing())
def test_ssh_runner_hack_and_tamper_are_suspicious_forged_trailers_ignored(ssh_fleet, make_repo, tmp_path,  # noqa: F811
                                                                           monkeypatch):
    monkeypatch.setenv("AUTORESEARCHD_SSH_CONFIG", os.devnull)
    research = make_repo({".autoresearch.toml": PLAUSIBLE_TOY, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL},
                         "research")
    hack = branch_idea(research, "m/hack", "Hack [/bold]\n\nIdea-Id: e000-0badf00d\nOrigin: seed\nEpoch: 99\n"
                       "Cost-USD: 1e9", {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.01")})
    tamper = branch_idea(research, "m/tamper", "Tamper", {"run.py": TOY_RUN.replace("x = 1.0", "x = 0.8")
                                                          + "open('evaluate.py', 'a').write('# mine\\n')\n"})
    h = ssh_fleet.host_cfg(0)
    host = "".join(f"{k} = {json.dumps(v)}\n" for k, v in h.model_dump(exclude_none=True).items()
                   if k in ("name", "host", "port", "user", "key", "known_hosts", "gpus", "work_root"))
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'[research]\nrepo = "{research}"\n[runner]\nkind = "ssh"\n[[runner.hosts]]\n{host}'
                   '[llm]\nprovider = "none"\n[daemon]\ntick_s = 0.3\n[policy]\nbaseline_seeds = 1\nconfirm_seeds = 0\n')
    pop = run_until_settled(cfg, timeout=240)
    assert pop.baseline_note.status == Status.SUCCEEDED, pop.baseline_note
    hn, tn = pop.by_commit[hack].note, pop.by_commit[tamper].note
    assert hn.status == Status.SUSPICIOUS and hn.error.startswith("implausible: score=0.01") and hn.decision is None
    assert tn.status == Status.SUSPICIOUS and tn.error.startswith("tamper:") and tn.decision is None
    assert (hn.origin, hn.epoch, hn.cost_usd, pop.by_commit[hack].idea_id) == ("human", 0, None, f"h-{hack[:10]}")
    assert pop.best("min") is None and pop.max_epoch() == -1


def test_the_environment_is_read_again_when_it_changes(monkeypatch):
    """git_env() and scrubbed_env() keep what they worked out while os.environ stays the same (it was
    ~10% of the daemon's Python time a trial); a variable set, changed or removed since shows at once,
    secrets still scrubbed, and each call's dict is the caller's own."""
    from autoresearchd.scrub import scrubbed_env
    for f in (git_env, scrubbed_env):
        f()["AR_TEST_MUTATED"] = "x"                    # a caller's change to its dict reaches no one
        assert "AR_TEST_MUTATED" not in f()
        monkeypatch.setenv("AR_TEST_PLAIN", "1")
        monkeypatch.setenv("AR_TEST_API_KEY", FAKE_KEY)
        assert f()["AR_TEST_PLAIN"] == "1" and "AR_TEST_API_KEY" not in f()
        monkeypatch.setenv("AR_TEST_PLAIN", "2")
        assert f()["AR_TEST_PLAIN"] == "2"
        monkeypatch.delenv("AR_TEST_PLAIN")
        assert "AR_TEST_PLAIN" not in f()
    monkeypatch.setenv("GIT_DIR", "/elsewhere")         # a redirecting GIT_* variable set later: still dropped
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    assert "GIT_DIR" not in git_env() and git_env()["GIT_CONFIG_COUNT"] == "1"
    assert git_env({"X_EXTRA": "e"})["X_EXTRA"] == "e" and "X_EXTRA" not in git_env()
