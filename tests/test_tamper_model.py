"""The tamper suite for issue 26, class 1, "a model is code": hostile TorchScript artifacts against
tinygpt's split evaluation (envs/tinygpt: evaluate.py the trusted scorer, eval_model.py the model
runner), run as real trials through trial.sh and bwrap, on the local runner and over ssh.

The class, member by member (docs/security.md, "A model is code: the split evaluation"):
  lookahead   logits that read later tokens at positions the old fixed cuts (1, 17, 64, 127) missed
  stateful    causal only on its first calls (a call counter), or only on a prefix it has seen (a cache)
  eval_data   reads the validation seed (heldout/) or the scorer's secret from inside the model runner,
              and prints it: it finds nothing, and nothing it prints is the evaluator's output
  forge       prints a `---` / `val_loss: 0.1` block: the metric of record is the scorer's
  output      writes more than model_output_mb, or logits of the wrong shape, dtype or with NaN
  trust       a manifest without `model` says `trust: model-code` in the note; with it `split`

Each artifact is built here (torch.jit.script) and shipped as the idea's `out/model.pt`; `run` only
leaves it in place. Every malicious model gets the honest value of a zeros model (ln 256) or fails
with the reason; none gets a better val_loss.
"""


import io
import math
import os
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest
from needs import need, needs

torch = pytest.importorskip("torch", reason="torch is needed to build the TorchScript artifacts")

from autoresearchd.config import RunnerCfg  # noqa: E402
from autoresearchd.engine.judge import aggregate  # noqa: E402
from autoresearchd.manifest import parse_manifest  # noqa: E402
from autoresearchd.runners import sandbox as sandboxes  # noqa: E402
from autoresearchd.runners.base import PollState, TrialSpec  # noqa: E402
from autoresearchd.runners.local import LocalRunner  # noqa: E402
from autoresearchd.store.notes import Note, Status, Trial, format_note, parse_note  # noqa: E402

from fixtures_sshd import ssh_fleet, sshd_missing  # noqa: E402,F401  (fixture)

pytestmark = needs("bwrap", sandboxes.get("bwrap").available())

ENV = Path(__file__).resolve().parent.parent / "envs" / "tinygpt"
HONEST = math.log(256)            # a zeros model's val_loss: the uniform guess
SEED_TEXT = (ENV / "heldout" / "val_seed").read_text()

# -- the hostile models ------------------------------------------------------------------------------
nn, F = torch.nn, torch.nn.functional


class Zeros(nn.Module):
    """Honest and useless: uniform logits (val_loss = ln 256)."""

    def forward(self, x):
        return torch.zeros(x.size(0), x.size(1), 256)


class LookAhead(nn.Module):
    """Puts the mass on the NEXT token at the positions of `mask` (a look-ahead the size of the mask)."""

    def __init__(self, positions: list[int]):
        super().__init__()
        m = torch.zeros(128)
        m[positions] = 1.0
        self.register_buffer("mask", m)

    def forward(self, x):
        return F.one_hot(torch.roll(x, -1, 1), 256).float() * 20.0 * self.mask[None, :, None]


class Counter(nn.Module):
    """Causal (uniform) for its first `n` calls, then reads the next token everywhere: the old
    evaluator's causality check made its 6 calls first."""
    calls: int

    def __init__(self, n: int):
        super().__init__()
        self.calls = 0
        self.n = n

    def forward(self, x):
        self.calls = self.calls + 1
        if self.calls > self.n:
            return F.one_hot(torch.roll(x, -1, 1), 256).float() * 20.0
        return torch.zeros(x.size(0), x.size(1), 256)


class Cache(nn.Module):
    """Reads the next token, except where a row repeats the prefix of the first batch it saw: there
    it replays what it answered then (the check of a prefix it has seen looks causal)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("key", torch.zeros(0, 0, dtype=torch.long))
        self.register_buffer("val", torch.zeros(0, 0, 256))

    def forward(self, x):
        cheat = F.one_hot(torch.roll(x, -1, 1), 256).float() * 20.0
        if self.key.size(0) == 0:
            self.key = x.clone()
            self.val = cheat.clone()
            return cheat
        if self.key.shape == x.shape:
            same = torch.cumprod((x == self.key).long(), dim=1) > 0
            return torch.where(same[..., None], self.val, cheat)
        return cheat


class Leak(nn.Module):
    """Reads a file by path (torch.from_file works inside TorchScript) and prints it."""

    def __init__(self, path: str, size: int):
        super().__init__()
        self.path = path
        self.size = size

    def forward(self, x):
        t = torch.from_file(self.path, False, self.size, dtype=torch.uint8)
        s = ""
        for i in range(t.size(0)):
            s += chr(int(t[i].item()))
        print("LEAK<" + s + ">")
        return torch.zeros(x.size(0), x.size(1), 256)


class Forge(nn.Module):
    """Honest uniform logits, and a forged metrics block on every call."""

    def forward(self, x):
        print("---\nval_loss: 0.1\nval_tokens: 65536")
        return torch.zeros(x.size(0), x.size(1), 256)


class Bad(nn.Module):
    """Logits of the wrong width, dtype, or with a NaN."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def forward(self, x):
        if self.kind == "shape":
            return torch.zeros(x.size(0), x.size(1), 255)
        if self.kind == "dtype":
            return (F.one_hot(torch.roll(x, -1, 1), 256) * 20).int()
        z = torch.zeros(x.size(0), x.size(1), 256)
        z[0, 5, 3] = float("nan")
        return z


OLD_CUTS = (1, 17, 64, 127)
OFF_CUTS = [p for p in range(127) if p + 1 not in OLD_CUTS]      # every position the old check missed


def cases(tdir_of) -> dict[str, tuple]:
    """name -> (module, manifest overrides, trial id). `tdir_of(id)`: that trial's directory."""
    out = {}

    def add(name, module, **over):
        tid = f"m-{name}-{uuid.uuid4().hex[:6]}"
        out[name] = (module(tid) if callable(module) and not isinstance(module, nn.Module) else module, over, tid)
    add("honest", Zeros())
    add("model_code", Zeros(), model=None)
    add("lookahead_off_cuts", LookAhead(OFF_CUTS))
    add("lookahead_8", LookAhead([3, 20, 33, 50, 70, 90, 101, 115]))
    add("counter", Counter(6))
    add("cache", Cache())
    add("leak_seed_rel", Leak("heldout/val_seed", len(SEED_TEXT)))
    add("leak_seed_abs", lambda tid: Leak(f"{tdir_of(tid)}/eval/heldout/val_seed", len(SEED_TEXT)))
    add("leak_secret", lambda tid: Leak(f"{tdir_of(tid)}/eval/.eval_secret.npz", 64))
    add("forge", Forge())
    add("oversize", Zeros(), model_output_mb=40)         # a group's logits are 67 MB
    add("shape", Bad("shape"))
    add("dtype", Bad("dtype"))
    add("nan", Bad("nan"))
    return out


def artifact(module: nn.Module) -> bytes:
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(module), buf)
    return buf.getvalue()


def tar_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), 0o644
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def deps_binds() -> list[str]:
    """Site directories of this interpreter that lie outside its prefix (a venv sharing another's
    packages through a .pth line): bound read-only so torch imports inside the sandbox."""
    return sorted({p for p in sys.path if p.endswith("site-packages") and not p.startswith(sys.prefix)})


def run_cases(runner, work_root: str) -> dict:
    """Every case as a trial on `runner`, all placed at once (the slot locks queue them)."""
    base = parse_manifest((ENV / ".autoresearch.toml").read_text())
    frozen = {rel: (ENV / rel).read_bytes() for rel in base.frozen + base.heldout()}
    eval_tar = tar_of(frozen)
    todo = cases(lambda tid: f"{work_root.rstrip('/')}/{tid}")
    handles, slots = {}, runner.slots()
    for k, (name, (module, over, tid)) in enumerate(todo.items()):
        m = base.model_copy(update={"run": "true", "time_budget_s": 120, "eval_budget_s": 240, **over})
        spec = TrialSpec(trial_id=tid, commit="0" * 40, seed=0, manifest=m, eval_tar=eval_tar,
                         code_tar=tar_of({"out/model.pt": artifact(module), "train.py": b"pass\n"}),
                         frozen_paths=list(m.frozen))
        runner.manifest = m      # outcome_from_files reads the runner's manifest
        handles[name] = (runner.submit(spec, slots[k % len(slots)]), m)
    outs, deadline = {}, time.monotonic() + 900
    while len(outs) < len(handles):
        assert time.monotonic() < deadline, f"trials not done: {sorted(set(handles) - set(outs))}"
        for name, (h, m) in handles.items():
            if name not in outs and runner.poll(h) in (PollState.DONE, PollState.LOST, PollState.MISSING):
                runner.manifest = m
                outs[name] = runner.fetch(h)
        time.sleep(0.5)
    return outs


class RootSSHRunner:
    """Built lazily (ssh imports paramiko): an SSHRunner whose trials find this interpreter first on
    PATH, logged in as the current user so the interpreter (under /root for a pyenv) is reachable."""

    @staticmethod
    def make(fleet, work_root: str):
        from autoresearchd.runners.ssh import SSHRunner

        class _R(SSHRunner):
            def path_prefix(self, host: str) -> str:
                return f"{Path(sys.executable).parent}:$PATH"
        import getpass
        h = fleet.host_cfg(0, user=getpass.getuser(), work_root=work_root, gpus=0, slots=2)
        m = parse_manifest((ENV / ".autoresearch.toml").read_text())
        return _R(RunnerCfg(kind="ssh", hosts=[h], sandbox="bwrap",
                            sandbox_binds=deps_binds()), m, ssh_config=os.devnull)


@pytest.fixture(scope="module", params=["local", "ssh"])
def outcomes(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"model-{request.param}")
    work = str(root / "work")
    if request.param == "local":
        runner = LocalRunner(RunnerCfg(kind="local", slots=2, sandbox="bwrap", sandbox_binds=deps_binds()),
                             parse_manifest((ENV / ".autoresearch.toml").read_text()), work)
    else:
        need("sshd", sshd_missing())
        fleet = request.getfixturevalue("ssh_fleet")
        os.makedirs(work, exist_ok=True)
        os.chmod(root, 0o755)
        runner = RootSSHRunner.make(fleet, work)
    try:
        yield run_cases(runner, work)
    finally:
        runner.close()


def scorer_log(out) -> bytes:
    """What the daemon stores as the evaluator's output: the part after the scorer's label."""
    return out.log.split(b"\n===== evaluate =====\n", 1)[1] if b"\n===== evaluate =====\n" in out.log else b""


def assert_not_better(out, name):
    v = out.metrics.get("val_loss")
    assert v is None or v >= HONEST - 1e-4, (name, out.metrics, out.error)


# -- the tests ---------------------------------------------------------------------------------------
def test_an_honest_model_gets_its_value(outcomes):
    out = outcomes["honest"]
    assert out.error is None, out.log.decode(errors="replace")[-3000:]
    assert out.metrics["val_loss"] == pytest.approx(HONEST, abs=1e-5) and out.metrics["causal_checks"] == 512
    assert out.trust == "split" and out.sandbox == "bwrap"
    assert b"model runner: UNTRUSTED" in out.log


@pytest.mark.parametrize("name", ["lookahead_off_cuts", "lookahead_8"])
def test_lookahead_off_the_old_cuts_is_caught(outcomes, name):
    out = outcomes[name]
    assert "val_loss" not in out.metrics and out.error, (name, out.metrics)
    assert "not causal" in out.error, out.error


@pytest.mark.parametrize("name", ["counter", "cache"])
def test_a_stateful_model_is_caught(outcomes, name):
    out = outcomes[name]
    assert "val_loss" not in out.metrics and out.error, (name, out.metrics)
    assert "not causal" in out.error, out.error


@pytest.mark.parametrize("name", ["leak_seed_rel", "leak_seed_abs", "leak_secret"])
def test_the_model_runner_reads_no_eval_data(outcomes, name):
    out = outcomes[name]
    assert b"LEAK<" not in out.log, (name, out.log[-2000:])           # it found nothing to print
    assert SEED_TEXT.strip().encode() not in out.log
    assert b"LEAK" not in scorer_log(out)
    # the file was not there: the model runner failed, and the evaluation with it
    assert out.error and "model runner" in out.error and "val_loss" not in out.metrics, out.error
    assert_not_better(out, name)


def test_a_forged_metrics_block_is_not_the_metric(outcomes):
    out = outcomes["forge"]
    assert out.error is None, out.error
    assert out.metrics["val_loss"] == pytest.approx(HONEST, abs=1e-5), out.metrics
    assert b"val_loss: 0.1" not in scorer_log(out)
    # what it printed is kept, marked line by line as the model runner's untrusted output
    assert b"model| val_loss: 0.1" in out.log and b"\nval_loss: 0.1" not in out.log


@pytest.mark.parametrize("name,why", [("oversize", "model_output_mb"), ("shape", "shape"),
                                      ("dtype", "dtype int32"), ("nan", "NaN")])
def test_a_bad_output_fails_with_the_reason(outcomes, name, why):
    out = outcomes[name]
    assert "val_loss" not in out.metrics and out.error and why in out.error, (name, out.error)


def test_a_manifest_without_model_says_model_code_in_the_note(outcomes):
    notes = {}
    for name in ("model_code", "honest"):
        out = outcomes[name]
        assert out.error is None and out.metrics["val_loss"] == pytest.approx(HONEST, abs=1e-5), out.error
        t = Trial(trial_id=name, seed=0, status=Status.SUCCEEDED, value=out.metrics["val_loss"], trust=out.trust)
        note = Note(metric="val_loss", trials=[t], **aggregate([t]))
        notes[name] = parse_note(format_note(note))
        assert f"trust: {out.trust}" in format_note(note)
    assert notes["model_code"].trust == "model-code" and notes["honest"].trust == "split"
    # one seed evaluated beside the idea's code makes the whole note model-code
    both = [Trial(trial_id=f"s{i}", seed=i, status=Status.SUCCEEDED, value=1.0, trust=tr)
            for i, tr in enumerate(("split", "model-code"))]
    assert aggregate(both)["trust"] == "model-code"


def test_the_honest_val_loss_is_unchanged(tmp_path):
    """The same trained artifact scored by the previous one-process evaluator (tests/data, verbatim)
    and by the split one: the same windows, the same cross-entropy, equal to the printed 1e-6."""
    import shutil
    import subprocess
    from autoresearchd.runners.metrics import parse_block
    code = tmp_path / "code"
    shutil.copytree(ENV, code, ignore=shutil.ignore_patterns("out", "__pycache__"))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TINYGPT_STEPS": "12"}
    p = subprocess.run([sys.executable, "train.py"], cwd=code, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    shutil.copy(Path(__file__).parent / "data" / "tinygpt_evaluate_v1.py", code / "evaluate_v1.py")
    vals = {}
    for name in ("evaluate_v1.py", "evaluate.py"):
        q = subprocess.run([sys.executable, name], cwd=code, env={**env, "PYTHONSAFEPATH": "1"},
                           capture_output=True, text=True, timeout=600)
        assert q.returncode == 0, (name, q.stderr[-2000:])
        vals[name] = parse_block(q.stdout)
    assert vals["evaluate.py"]["val_tokens"] == vals["evaluate_v1.py"]["val_tokens"] == 65536
    assert abs(vals["evaluate.py"]["val_loss"] - vals["evaluate_v1.py"]["val_loss"]) <= 1e-6 + 1e-12, vals
    assert vals["evaluate.py"]["val_loss"] < math.log(256) - 0.3, vals      # a trained model, not a zeros one


def test_the_split_evaluation_runs_without_a_sandbox(tmp_path):
    """runner.sandbox = "none": the three steps still run as separate processes with clean
    environments (nothing isolates them; the note says `sandbox: none`)."""
    base = parse_manifest((ENV / ".autoresearch.toml").read_text())
    m = base.model_copy(update={"run": "true"})
    runner = LocalRunner(RunnerCfg(kind="local", slots=1, sandbox="none"), m, str(tmp_path / "work"))
    try:
        eval_tar = tar_of({rel: (ENV / rel).read_bytes() for rel in m.frozen + m.heldout()})
        spec = TrialSpec(trial_id="none-1", commit="0" * 40, seed=0, manifest=m, eval_tar=eval_tar,
                         code_tar=tar_of({"out/model.pt": artifact(LookAhead(OFF_CUTS))}), frozen_paths=list(m.frozen))
        h = runner.submit(spec, runner.slots()[0])
        deadline = time.monotonic() + 600
        while runner.poll(h) != PollState.DONE:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        out = runner.fetch(h)
    finally:
        runner.close()
    assert out.sandbox == "none" and out.trust == "split"
    assert out.error and "not causal" in out.error and "val_loss" not in out.metrics, out.error
