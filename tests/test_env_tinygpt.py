"""The embedded tinygpt environment: manifest, check mode, training + frozen evaluation from a
directory of frozen files only, the causality guard, the replay file's diffs, and a real trial
through the LocalRunner and trial.sh."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoresearchd.config import RunnerCfg
from autoresearchd.manifest import parse_manifest
from autoresearchd.runners.base import PollState, TrialSpec
from autoresearchd.runners.local import LocalRunner
from autoresearchd.store.gitrepo import GitRepo

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "envs" / "tinygpt"
REPLAY = ROOT / "envs" / "replays" / "tinygpt.jsonl"
PY = sys.executable

# What each special replay record is meant to exercise (titles as in the replay file).
NEEDS_REVISION = {"Rotary position embeddings", "QK-LayerNorm in attention", "Squared ReLU activation"}
NO_PREFIX = {"Remove dropout"}       # `--- train.py` without a/ b/: git apply still places it
BREAKS_CHECK_THEN_FIXED = {"Multi-query attention"}
NEVER_PASSES = {"Auxiliary multi-token prediction head"}


def manifest():
    return parse_manifest((TEMPLATE / ".autoresearch.toml").read_text())


def copy_template(dst: Path) -> Path:
    shutil.copytree(TEMPLATE, dst, ignore=shutil.ignore_patterns("out", "__pycache__"))
    return dst


def frozen_dir(dst: Path) -> Path:
    """A directory holding only the frozen files, like the daemon's eval/ export."""
    dst.mkdir()
    for rel in manifest().frozen + manifest().heldout():
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(TEMPLATE / rel, dst / rel)
    return dst


def run_py(args, cwd, env_extra=None, clean=False, timeout=300):
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")} if clean else dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([PY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def last_block(text: str) -> dict[str, float]:
    from autoresearchd.runners.metrics import parse_block
    return parse_block(text)


def extract_diff(text: str) -> str:
    """The diff inside a ```diff fence if there is one, else the text itself."""
    m = re.search(r"```(?:diff|patch)?\n(.*?)```", text, re.S)
    return m.group(1) if m else text


def git_apply(repo: Path, diff: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "apply", "--recount", "--whitespace=nowarn", *extra, "-"], cwd=repo,
                          input=extract_diff(diff), capture_output=True, text=True)


def replay_records() -> list[dict]:
    return [json.loads(line) for line in REPLAY.read_text().splitlines() if line.strip()]


@pytest.fixture
def template_repo(tmp_path):
    d = copy_template(tmp_path / "repo")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=d, check=True)
    repo = GitRepo(d)
    return repo, repo.commit_all_initial("tinygpt baseline")


# -- (a) manifest -----------------------------------------------------------------------------
def test_manifest_parses_and_names_real_files():
    m = manifest()
    assert (m.name, m.metric, m.goal, m.gpus) == ("tinygpt", "val_loss", "min", 0)
    assert m.evaluate and m.check and m.context.strip()
    # fixed steps; the wall-clock limits are safety nets that fit a loaded machine (a step took 2.4 s
    # instead of 0.22 s at load 7-11: 200 steps ~ 480 s), yet still stop a runaway run
    assert 600 <= m.time_budget_s <= 3600 and 120 <= m.eval_budget_s <= 600
    assert "200" in m.context and str(m.time_budget_s) in m.context
    for rel in m.frozen:
        assert (TEMPLATE / rel).is_file(), rel
    assert m.is_frozen("evaluate.py") and m.is_frozen("data.py") and not m.is_frozen("train.py")
    assert m.artifacts == ["out/model.pt"]
    # the validation split's seed is for the evaluator only: withheld from run and from the LLM
    assert m.heldout() == ["heldout/val_seed"] and (TEMPLATE / "heldout/val_seed").is_file()
    assert m.is_hidden("heldout/val_seed") and m.is_frozen("heldout/val_seed")


def test_validation_split_needs_the_heldout_seed(tmp_path):
    """Without the held-out seed (a trial's code/ has none) the validation split cannot be made."""
    code = copy_template(tmp_path / "code")
    shutil.rmtree(code / "heldout")
    p = run_py(["-c", "import data; data.val_tokens()"], code, clean=True)
    assert p.returncode != 0 and "for evaluate.py only" in p.stderr


# -- (b) check mode ----------------------------------------------------------------------------
def test_check_mode_runs(tmp_path):
    code = copy_template(tmp_path / "code")
    p = run_py(["train.py", "--check"], code)
    assert p.returncode == 0, p.stderr
    assert "check ok" in p.stdout and (code / "out" / "model.pt").is_file()
    assert last_block(p.stdout)["steps"] == 3


# -- (c) short training, scored by the frozen evaluate.py from a directory of frozen files --------
def test_short_training_beats_untrained_through_frozen_evaluate(tmp_path):
    code = copy_template(tmp_path / "code")
    p = run_py(["train.py"], code, {"TINYGPT_STEPS": "30", "AUTORESEARCH_SEED": "1"})
    assert p.returncode == 0, p.stderr
    assert last_block(p.stdout)["steps"] == 30
    art = tmp_path / "artifacts" / "out"
    art.mkdir(parents=True)
    shutil.copy(code / "out" / "model.pt", art / "model.pt")
    ev = frozen_dir(tmp_path / "eval")
    q = run_py(["evaluate.py"], ev, {"AUTORESEARCH_ARTIFACTS": str(tmp_path / "artifacts"),
                                     "PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1"}, clean=True)
    assert q.returncode == 0, q.stderr
    metrics = last_block(q.stdout)
    assert metrics["val_tokens"] > 60_000
    assert metrics["val_loss"] < math.log(256) - 0.8, metrics   # untrained: ln 256 = 5.55


# -- (d) the causality guard -------------------------------------------------------------------
CHEATS = {
    # reads the next token: logits put all their mass on the true target
    "next_token": "torch.nn.functional.one_hot(torch.roll(x, -1, 1), 256).float() * 20.0",
    # rows see each other (a leak across the batch)
    "cross_row": "torch.nn.functional.one_hot(x, 256).float() + torch.roll(x, 1, 0)[..., None].float()",
    # a permutation-invariant leak: every row sees the batch mean
    "batch_mean": "torch.nn.functional.one_hot(x, 256).float() + x.float().mean(0, keepdim=True)[..., None]",
}


@pytest.mark.parametrize("kind", sorted(CHEATS))
def test_evaluate_rejects_a_cheating_model(tmp_path, kind):
    art = tmp_path / "artifacts"
    script = f"""
import torch
class Cheat(torch.nn.Module):
    def forward(self, x):
        return {CHEATS[kind]}
m = torch.jit.trace(Cheat(), torch.zeros(16, 128, dtype=torch.long))
import os; os.makedirs({str(art / 'out')!r}, exist_ok=True); m.save({str(art / 'out' / 'model.pt')!r})
"""
    assert run_py(["-c", script], tmp_path).returncode == 0
    ev = frozen_dir(tmp_path / "eval")
    q = run_py(["evaluate.py"], ev, {"AUTORESEARCH_ARTIFACTS": str(art), "PYTHONSAFEPATH": "1"}, clean=True)
    assert q.returncode != 0
    assert "val_loss" not in q.stdout
    assert ("not causal" if kind == "next_token" else "not independent") in q.stderr, q.stderr


def test_evaluate_explains_a_missing_artifact(tmp_path):
    ev = frozen_dir(tmp_path / "eval")
    q = run_py(["evaluate.py"], ev, {"AUTORESEARCH_ARTIFACTS": str(tmp_path / "none")}, clean=True)
    assert q.returncode != 0 and "no model artifact" in q.stderr


# -- (e) the replay file ------------------------------------------------------------------------
def test_replay_records_are_well_formed():
    recs = replay_records()
    assert len(recs) >= 14
    titles = [r["title"] for r in recs]
    assert len(set(titles)) == len(titles)
    for r in recs:
        assert set(r) == {"title", "idea", "code_diff", "revisions", "epoch", "result"}, r["title"]
        assert r["idea"].startswith("[Experiment] ") and "\n[Code Changes] " in r["idea"]
        assert isinstance(r["revisions"], list) and isinstance(r["epoch"], int) and r["result"] is None
        assert "--- " in r["code_diff"] and "@@" in r["code_diff"]
    assert {r["epoch"] for r in recs} >= {0, 1}
    for group in (NEEDS_REVISION, NO_PREFIX, BREAKS_CHECK_THEN_FIXED, NEVER_PASSES):
        assert group <= set(titles)


def test_replay_diffs_apply_as_intended(template_repo):
    repo, _ = template_repo
    for r in replay_records():
        title, diff = r["title"], r["code_diff"]
        if title in NEEDS_REVISION:
            for p in ("-p1", "-p0"):
                assert git_apply(repo.path, diff, "--check", p).returncode != 0, title
            assert git_apply(repo.path, r["revisions"][0], "--check").returncode == 0, title
        elif title in NO_PREFIX:
            assert "--- a/" not in diff and git_apply(repo.path, diff, "--check").returncode == 0, title
        else:
            p = git_apply(repo.path, diff, "--check")
            assert p.returncode == 0, f"{title}: {p.stderr}"
        for rev in r["revisions"]:
            assert git_apply(repo.path, rev, "--check").returncode == 0, f"{title} (revision)"


def _check_with(repo: GitRepo, base: str, diff: str, tmp: Path) -> subprocess.CompletedProcess:
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tmp), base], cwd=repo.path, check=True)
    assert git_apply(tmp, diff).returncode == 0
    p = run_py(["train.py", "--check"], tmp)
    subprocess.run(["git", "worktree", "remove", "--force", str(tmp)], cwd=repo.path, check=True)
    return p


# one case per record (about 20 check runs in all), so the suite's workers share them out
@pytest.mark.parametrize("r", replay_records(), ids=lambda r: r["title"][:40])
def test_replay_check_outcomes(template_repo, tmp_path, r):
    """Every final diff passes `check`, except the ones meant to fail it."""
    repo, base = template_repo
    title = r["title"]
    attempts = [r["code_diff"], *r["revisions"]]
    if title in NEEDS_REVISION:
        attempts = attempts[1:]
    results = [_check_with(repo, base, d, tmp_path / "wt").returncode == 0 for d in attempts]
    if title in NEVER_PASSES:
        assert not any(results), title
    elif title in BREAKS_CHECK_THEN_FIXED:
        assert results[0] is False and results[-1] is True, title
    else:
        assert results[-1], title


# -- (f) a real trial through LocalRunner and trial.sh --------------------------------------------
def _trial(template_repo, tmp_path, data_env: dict[str, str], budget_s: float):
    repo, base = template_repo
    m = manifest().model_copy(update={"data": data_env})
    # the dependencies a worktree's venv shares through a .pth line live outside it: visible read-only
    deps = sorted({p for p in sys.path if p.endswith("site-packages") and not p.startswith(sys.prefix)})
    runner = LocalRunner(RunnerCfg(sandbox_binds=deps), m, tmp_path / "trials")
    spec = TrialSpec(trial_id="t1", commit=base, seed=0, manifest=m, code_tar=repo.archive(base, exclude=m.heldout()),
                     eval_tar=repo.archive(base, m.frozen + m.heldout()), frozen_paths=list(m.frozen),
                     purpose="baseline")
    handle = runner.submit(spec, runner.slots()[0])
    deadline = time.monotonic() + budget_s
    while runner.poll(handle) != PollState.DONE:
        assert time.monotonic() < deadline, "trial did not finish"
        time.sleep(0.5)
    out = runner.fetch(handle)
    eval_files = sorted(p.name for p in (Path(handle["dir"]) / "eval").iterdir())
    assert not (Path(handle["dir"]) / "code" / "heldout").exists()
    return out, eval_files


def test_trial_through_local_runner_short(template_repo, tmp_path):
    out, eval_files = _trial(template_repo, tmp_path, {"TINYGPT_STEPS": "20"}, 240)
    assert out.error is None, out.log.decode(errors="replace")[-2000:]
    assert out.metrics_source == "evaluate" and out.tamper == []
    assert eval_files == sorted(manifest().frozen + ["heldout"])
    assert out.metrics["val_loss"] < math.log(256) - 0.5
    assert "steps: 20" in out.log.decode()


def test_full_baseline_trial_through_local_runner(template_repo, tmp_path):
    out, _ = _trial(template_repo, tmp_path, {}, 600)
    assert out.error is None, out.log.decode(errors="replace")[-2000:]
    assert 2.5 < out.metrics["val_loss"] < 3.6
