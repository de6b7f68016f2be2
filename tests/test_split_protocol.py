"""The split evaluation's protocol for an environment of one's own (docs/environment.md, "The model
runner"), with a toy scorer and model runner in plain Python, through trial.sh on the local runner
(bwrap) and over ssh: what trial.sh itself enforces around the model runner, whatever the model is.

  honest   three steps, the scorer's block is the metric, `trust: split`
  state    a file the model runner leaves in /tmp, $HOME or its cwd in group 0 is gone in group 1
  peek     the model runner finds no eval_data variable, no held-out file, no scorer secret
  exit     a model runner that exits non-zero fails the evaluation, with trial.sh's reason
  link     a link in the output is refused
  big      one file over model_output_mb: stopped by the kernel (RLIMIT_FSIZE), the reason says so
  many     many files each under the bound, over it in total: refused after
  slow     a model runner past the evaluation budget: timed out, with the reason
  inputs   a scorer whose inputs phase fails: no model runner runs
"""

import io
import tarfile
import time
import uuid

import pytest
from needs import need, needs

from autoresearchd.config import RunnerCfg
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import sandbox as sandboxes
from autoresearchd.runners.base import PollState, TrialSpec
from autoresearchd.runners.local import LocalRunner

from fixtures_sshd import ssh_fleet, sshd_missing  # noqa: F401  (fixture)

pytestmark = needs("bwrap", sandboxes.get("bwrap").available())

SCORER = r'''import os, sys
phase, io = os.environ.get("AUTORESEARCH_EVAL_PHASE"), os.environ.get("AUTORESEARCH_MODEL_IO")
if phase == "inputs":
    if open(os.path.join(os.environ["AUTORESEARCH_ARTIFACTS"], "model.txt")).read().strip() == "inputs":
        sys.exit(4)
    open("secret.txt", "w").write("scorer-secret-%s" % os.getpid())
    for g in ("0", "1"):
        os.makedirs(os.path.join(io, "in", g))
        open(os.path.join(io, "in", g, "x.txt"), "w").write(str(int(g) + 1))
elif phase == "score":
    assert open("secret.txt").read().startswith("scorer-secret-")
    ys = [open(os.path.join(io, "out", g, "y.txt")).read().split() for g in ("0", "1")]
    print("---")
    print("score: %s" % sum(float(y[0]) for y in ys))
    print("found: %s" % sum(float(y[1]) for y in ys))
'''

MODEL = r'''import glob, os, sys, time
mode = open(os.path.join(os.environ["AUTORESEARCH_ARTIFACTS"], "model.txt")).read().strip()
x = float(open(os.path.join(os.environ["AUTORESEARCH_MODEL_IN"], "x.txt")).read())
out, g = os.environ["AUTORESEARCH_MODEL_OUT"], os.environ["AUTORESEARCH_MODEL_GROUP"]
found = 0
print("---")
print("score: -1000")                      # never parsed
if mode == "state":
    marks = ["/tmp/mark", os.path.expanduser("~/mark"), "mark", "/dev/shm/mark"]
    found = sum(os.path.exists(p) for p in marks)
    for p in marks:
        try:
            open(p, "w").write(g)
        except OSError as e:
            print("state:", e)
if mode == "peek":
    found = sum(1 for k in os.environ if k == "VAL_FILE")
    for p in ["heldout/val.txt", "../eval/secret.txt", "../eval/heldout/val.txt"] + glob.glob(os.path.dirname(os.getcwd()) + "/*/secret.txt") \
            + glob.glob(os.path.dirname(os.getcwd()) + "/*/heldout/val.txt"):
        try:
            print("peek: read", p, open(p).read()); found += 1
        except OSError:
            pass
if mode == "exit":
    sys.exit(5)
if mode == "link":
    os.symlink("/etc/passwd", os.path.join(out, "extra"))
if mode == "big":
    open(os.path.join(out, "big.bin"), "wb").write(b"x" * (3 << 20))
if mode == "many":
    for i in range(8):
        open(os.path.join(out, "part%d.bin" % i), "wb").write(b"x" * (600 << 10))
if mode == "slow":
    time.sleep(60)
open(os.path.join(out, "y.txt"), "w").write("%s %s" % (2 * x, found))
'''

MODES = ["honest", "state", "peek", "exit", "link", "big", "many", "slow", "inputs"]


def tar_of(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, text in files.items():
            data = text.encode()
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), 0o644
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def manifest(model: bool = True) -> EnvManifest:
    return EnvManifest(run="true", evaluate="python3 score.py", model="python3 model.py" if model else None,
                       model_output_mb=2, metric="score", time_budget_s=60, eval_budget_s=20,
                       frozen=["score.py", "model.py"], artifacts=["model.txt"],
                       eval_data={"VAL_FILE": "heldout/val.txt"})


@pytest.fixture(scope="module", params=["local", "ssh"])
def outcomes(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"split-{request.param}") / "work"
    m = manifest()
    if request.param == "local":
        runner = LocalRunner(RunnerCfg(kind="local", slots=2, sandbox="bwrap"), m, str(work))
    else:
        need("sshd", sshd_missing())
        import os
        from autoresearchd.runners.ssh import SSHRunner
        fleet = request.getfixturevalue("ssh_fleet")
        runner = SSHRunner(RunnerCfg(kind="ssh", sandbox="bwrap", hosts=[fleet.host_cfg(0, gpus=0, slots=2)]), m,
                           ssh_config=os.devnull)
    eval_tar = tar_of({"score.py": SCORER, "model.py": MODEL, "heldout/val.txt": "held-out-validation"})
    handles, slots = {}, runner.slots()
    try:
        for k, mode in enumerate(MODES + ["no_model"]):
            mm = manifest(model=mode != "no_model")
            spec = TrialSpec(trial_id=f"p-{mode}-{uuid.uuid4().hex[:6]}", commit="0" * 40, seed=0, manifest=mm,
                             code_tar=tar_of({"model.txt": "honest" if mode == "no_model" else mode}),
                             eval_tar=eval_tar, frozen_paths=list(mm.frozen))
            handles[mode] = (runner.submit(spec, slots[k % len(slots)]), mm)
        outs, deadline = {}, time.monotonic() + 600
        while len(outs) < len(handles):
            assert time.monotonic() < deadline, sorted(set(handles) - set(outs))
            for mode, (h, mm) in handles.items():
                if mode not in outs and runner.poll(h) == PollState.DONE:
                    runner.manifest = mm
                    outs[mode] = runner.fetch(h)
            time.sleep(0.3)
        yield outs
    finally:
        runner.close()


def test_honest_three_steps(outcomes):
    out = outcomes["honest"]
    assert out.error is None and out.metrics == {"score": 6.0, "found": 0.0}, (out.error, out.log[-1500:])
    assert out.trust == "split" and b"model| score: -1000" in out.log


def test_no_state_survives_from_one_group_to_the_next(outcomes):
    out = outcomes["state"]
    assert out.error is None and out.metrics["found"] == 0.0, (out.error, out.log[-1500:])


def test_the_model_runner_sees_no_eval_data_and_no_scorer_secret(outcomes):
    out = outcomes["peek"]
    assert out.error is None and out.metrics["found"] == 0.0, out.log[-2000:]
    assert b"held-out-validation" not in out.log and b"scorer-secret-" not in out.log


@pytest.mark.parametrize("mode,why", [("exit", "model runner (group 0) exited 5"),
                                      ("link", "other than a plain file"),
                                      ("big", "over the bound model_output_mb = 2"),
                                      ("many", "over the bound model_output_mb = 2"),
                                      ("slow", "ran past the evaluation budget"),
                                      ("inputs", "inputs phase exited 4")])
def test_a_failed_step_fails_the_evaluation_with_the_reason(outcomes, mode, why):
    out = outcomes[mode]
    assert out.metrics == {} and out.error and why in out.error, (mode, out.error)


def test_without_model_one_step_and_trust_model_code(outcomes):
    out = outcomes["no_model"]
    # the scorer run as a one-step evaluator (no phase): it prints nothing, so no metric
    assert out.trust == "model-code" and b"model runner" not in out.log
