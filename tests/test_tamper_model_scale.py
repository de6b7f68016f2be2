"""tinygpt's causality check against a model that chooses the scale it is compared at (issue 26,
class 1, "a model is code"; the rest of the class is tests/test_tamper_model.py, whose helpers
build and ship the artifacts here): real trials through trial.sh and bwrap on the local runner.

  scale    reads the next token at every position, and puts one logit of -1e30 at position 0 on a
           token the validation text never holds (2): the scorer's tolerance was relative to the
           largest logit of the compared prefix (1e-4 x 1e30), so every look-ahead passed, and the
           loss was untouched (that token has probability 0 either way)
  shift    the same look-ahead with every logit shifted by +1e6 (softmax does not see a constant
           shift): a tolerance relative to each logit's own size is as blind

Both must fail the check: the scorer's bound on the logits' difference is absolute (1e-3).
"""

import uuid

import pytest
from fixtures_slurm import fetch_when_ended
from needs import needs

torch = pytest.importorskip("torch", reason="torch is needed to build the TorchScript artifacts")

from autoresearchd.config import RunnerCfg  # noqa: E402
from autoresearchd.manifest import parse_manifest  # noqa: E402
from autoresearchd.runners import sandbox as sandboxes  # noqa: E402
from autoresearchd.runners.base import PollState, TrialSpec  # noqa: E402
from autoresearchd.runners.local import LocalRunner  # noqa: E402

from test_tamper_model import ENV, HONEST, artifact, deps_binds, tar_of  # noqa: E402

pytestmark = needs("bwrap", sandboxes.get("bwrap").available())
nn, F = torch.nn, torch.nn.functional


class Scaled(nn.Module):
    """The next token's logit +8 everywhere (a look-ahead at every position, val_loss ~ 0.1 here);
    `kind` hides it from a scale-relative tolerance."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def forward(self, x):
        out = F.one_hot(torch.roll(x, -1, 1), 256).float() * 8.0
        if self.kind == "scale":
            out[:, 0, 2] = -1e30
        else:
            out = out + 1e6
        return out


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("scale") / "work")
    base = parse_manifest((ENV / ".autoresearch.toml").read_text())
    runner = LocalRunner(RunnerCfg(kind="local", slots=2, sandbox="bwrap", sandbox_binds=deps_binds()), base, work)
    eval_tar = tar_of({rel: (ENV / rel).read_bytes() for rel in base.frozen + base.heldout()})
    handles = {}
    try:
        for slot, kind in zip(runner.slots(), ("scale", "shift")):
            m = base.model_copy(update={"run": "true", "time_budget_s": 120, "eval_budget_s": 240})
            spec = TrialSpec(trial_id=f"s-{kind}-{uuid.uuid4().hex[:6]}", commit="0" * 40, seed=0, manifest=m,
                             eval_tar=eval_tar, frozen_paths=list(m.frozen),
                             code_tar=tar_of({"out/model.pt": artifact(Scaled(kind)), "train.py": b"pass\n"}))
            runner.manifest = m
            handles[kind] = (runner.submit(spec, slot), m)
        outs = fetch_when_ended(runner, handles, 600, (PollState.DONE, PollState.LOST, PollState.MISSING))
        assert len(outs) == len(handles), sorted(set(handles) - set(outs))
        yield outs
    finally:
        runner.close()


@pytest.mark.parametrize("kind", ["scale", "shift"])
def test_a_lookahead_at_a_chosen_scale_is_caught(outcomes, kind):
    out = outcomes[kind]
    v = out.metrics.get("val_loss")
    assert v is None and out.error and "not causal" in out.error, (kind, out.metrics, out.error, HONEST)
