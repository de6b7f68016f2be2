"""What `run` leaves at a frozen file's path is read by trial.sh itself, outside every sandbox and
every budget (the frozen files' checksum after run, docs/security.md "Tamper evidence is read
safely"): real trials on the local runner with bwrap, whose run replaces the frozen `evaluate.py`
in its own code/ with something that is no plain small file.

  fifo     a named pipe: `sha256sum` opened it and waited for a writer forever, holding the slot
  zero     a link to /dev/zero: read forever (the host's /dev/zero, the link resolved outside)
  sparse   a sparse file of 1 TiB: no disk, but hours of hashing (a hole reads as zeros)

Each must end the trial promptly (the wrapper writes `done`) and be recorded as tamper.
"""

from __future__ import annotations

import uuid

import pytest
from fixtures_slurm import fetch_when_ended, tar_of     # the runner tests' shared in-memory tar
from needs import needs

from autoresearchd.config import RunnerCfg
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import sandbox as sandboxes
from autoresearchd.runners.base import PollState, TrialSpec
from autoresearchd.runners.local import LocalRunner

pytestmark = needs("bwrap", sandboxes.get("bwrap").available())

RUN = r'''import os, sys
mode = sys.argv[1]
os.unlink("evaluate.py")
if mode == "fifo":
    os.mkfifo("evaluate.py")
elif mode == "zero":
    os.symlink("/dev/zero", "evaluate.py")
elif mode == "sparse":
    with open("evaluate.py", "wb") as f:
        f.truncate(1 << 40)
print("---")
print("score: 1")
'''

MODES = ["fifo", "zero", "sparse"]
DEADLINE_S = 120      # the frozen check's CPU bound (defaults.FROZEN_HASH_CPU_S) is far below this



@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    work = tmp_path_factory.mktemp("odd") / "work"
    base = EnvManifest(run="true", metric="score", time_budget_s=60, frozen=["evaluate.py"])
    runner = LocalRunner(RunnerCfg(kind="local", slots=len(MODES), sandbox="bwrap"), base, str(work))
    handles, outs = {}, {}
    try:
        for slot, mode in zip(runner.slots(), MODES):
            m = EnvManifest(run=f"python3 run.py {mode}", metric="score", time_budget_s=60, frozen=["evaluate.py"])
            spec = TrialSpec(trial_id=f"o-{mode}-{uuid.uuid4().hex[:6]}", commit="0" * 40, seed=0, manifest=m,
                             code_tar=tar_of({"run.py": RUN, "evaluate.py": "print('frozen')\n"}), eval_tar=b"",
                             frozen_paths=["evaluate.py"])
            handles[mode] = (runner.submit(spec, slot), m)
        outs = fetch_when_ended(runner, handles, DEADLINE_S, (PollState.DONE,))
        yield outs
    finally:
        for mode, (h, _) in handles.items():
            if mode not in outs:
                runner.cancel(h)          # a wrapper still hashing: its whole process group goes
        runner.close()


@pytest.mark.parametrize("mode", MODES)
def test_an_odd_file_at_a_frozen_path_ends_the_trial_and_is_tamper(outcomes, mode):
    assert mode in outcomes, f"the trial's wrapper did not finish within {DEADLINE_S}s ({mode})"
    out = outcomes[mode]
    assert out.exit_code == 0 and out.tamper, (out.error, out.tamper)
