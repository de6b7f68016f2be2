"""The kernel's key retention service is state outside every sandbox's namespaces (docs/security.md,
"Kernel state the namespaces do not cover"): real trials through trial.sh on the local runner with
bwrap, whose code calls add_key/keyctl (ctypes, no keyutils needed) the way a hostile idea would.

  groups   a split evaluation's model runner plants a key in group 0 (in its session keyring and in
           every keyring /proc/keys shows it may write: the user's own `_uid.N`, `_uid_ses.N`) and
           looks for it in group 1: with it, a model remembers every row across the fresh sandboxes
           and passes the causality check while it looks ahead (docs/security.md, the split evaluation)
  trials   a run plants a key; a later trial's run looks for it (a memory across trials: the
           validation rows one model runner saw, for the next idea's)
  secret   the daemon runs under a session keyring (systemd's default KeyringMode=private for a
           service, pam_keyinit for an ssh login) holding a key: a run must not read it

The host side of the test keeps the daemon user's keyrings as a login would (a session keyring, the
user keyring created), so that the sandbox's keyring calls have something to reach.
"""

from __future__ import annotations

import ctypes
import platform
import uuid

import pytest
from fixtures_slurm import fetch_when_ended, tar_of     # the runner tests' shared in-memory tar
from needs import needs, not_here

from autoresearchd.config import RunnerCfg
from autoresearchd.manifest import EnvManifest
from autoresearchd.runners import sandbox as sandboxes
from autoresearchd.runners.base import PollState, TrialSpec
from autoresearchd.runners.local import LocalRunner

pytestmark = needs("bwrap", sandboxes.get("bwrap").available())

# (add_key, keyctl) on the architectures a test host may be (libseccomp's tables)
NR = {"x86_64": (248, 250), "aarch64": (217, 219), "riscv64": (217, 219), "ppc64le": (269, 271),
      "s390x": (278, 280)}.get(platform.machine())
KEYCTL_GET_KEYRING_ID, KEYCTL_SETPERM, KEYCTL_LINK, KEYCTL_READ, KEYCTL_JOIN, KEYCTL_INVALIDATE = 0, 5, 8, 11, 1, 21
SESSION, USER, USER_SESSION = -3, -4, -5
TAG = "arkeytest-"

# the sandbox's side: plant(tag) links one world-readable key into every keyring it may write;
# seen(tag) counts the keys of that name it can read; secret() the payloads of the daemon's key
KEYS = r'''import ctypes, os
ADD, KEYCTL = %r
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = lambda x: ctypes.c_long(x) if isinstance(x, int) else x
def keyctl(*a):
    return libc.syscall(L(KEYCTL), *map(L, a))
def listed():
    try:
        rows = [ln.split() for ln in open("/proc/keys")]
        return [(int(f[0], 16), f[7], f[8].rstrip(":")) for f in rows if len(f) > 8]
    except OSError:
        return []
def plant(tag, data=b"planted"):
    k = libc.syscall(L(ADD), b"user", tag.encode(), data, ctypes.c_size_t(len(data)), L(-3))
    if k < 0:
        return 0
    keyctl(5, k, 0x3f3f3f3f)
    return sum(keyctl(8, k, r) == 0 for r in [-4, -5] + [i for i, t, _ in listed() if t == "keyring"])
def payloads(name):
    out = []
    for i, t, d in listed():
        buf = ctypes.create_string_buffer(4096)
        if t == "user" and d.startswith(name) and (n := keyctl(11, i, buf, 4096)) >= 0:
            out.append(buf.raw[:n].decode(errors="replace"))
    for ring in (-3, -4, -5):
        k = keyctl(10, ring, b"user", name.encode(), 0)
        buf = ctypes.create_string_buffer(4096)
        if k >= 0 and (n := keyctl(11, k, buf, 4096)) >= 0:
            out.append(buf.raw[:n].decode(errors="replace"))
    return out
'''

SCORER = r'''import os
phase, io = os.environ.get("AUTORESEARCH_EVAL_PHASE"), os.environ.get("AUTORESEARCH_MODEL_IO")
if phase == "inputs":
    for g in ("0", "1"):
        os.makedirs(os.path.join(io, "in", g))
elif phase == "score":
    print("---")
    print("found: %s" % sum(float(open(os.path.join(io, "out", g, "y.txt")).read()) for g in ("0", "1")))
'''

MODEL = r'''import os
exec(open(os.path.join(os.environ["AUTORESEARCH_ARTIFACTS"], "keys.py")).read())
tag = "''' + TAG + r'''group-" + os.environ["AUTORESEARCH_TRIAL"]
found = 0
if os.environ["AUTORESEARCH_MODEL_GROUP"] == "0":
    print("planted in", plant(tag), "keyrings")
else:
    found = len(payloads(tag))
open(os.path.join(os.environ["AUTORESEARCH_MODEL_OUT"], "y.txt"), "w").write(str(found))
'''

# run-only trials: the run's own report is the metric (no evaluator), enough to say what it found
RUN = r'''import os, sys
exec(open("keys.py").read())
mode, tag = sys.argv[1], "''' + TAG + r'''" + sys.argv[2]
n = plant(tag) if mode == "plant" else 0
got = payloads(tag)
print("---")
print("planted: %s" % n)
print("found: %s" % len(got))
print("secret: %s" % sum("daemon-secret" in p for p in got))
'''



def _keyctl(*a) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(ctypes.c_long(NR[1]), *[ctypes.c_long(x) if isinstance(x, int) else x for x in a])


def _forget_planted() -> None:
    """Invalidate what a sandbox planted (only before the fix could it plant anything)."""
    try:
        lines = open("/proc/keys").read().splitlines()
    except OSError:
        return
    for f in (ln.split() for ln in lines):
        if len(f) > 8 and f[7] == "user" and f[8].startswith(TAG):
            _keyctl(KEYCTL_INVALIDATE, int(f[0], 16))


def _run(runner: LocalRunner, m: EnvManifest, code: dict[str, str], eval_files: dict[str, str] | None = None):
    spec = TrialSpec(trial_id=f"k-{uuid.uuid4().hex[:8]}", commit="0" * 40, seed=0, manifest=m,
                     code_tar=tar_of(code), eval_tar=tar_of(eval_files or {}), frozen_paths=list(m.frozen))
    outs = fetch_when_ended(runner, {"one": (runner.submit(spec, runner.slots()[0]), m)}, 300, (PollState.DONE,))
    assert outs, "trial did not finish"
    return outs["one"]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if NR is None:
        not_here(f"no key syscall numbers for {platform.machine()} in this test")
    if _keyctl(KEYCTL_GET_KEYRING_ID, USER, 1) < 0:        # a kernel without keys: nothing to reach
        not_here("this kernel has no key retention service (CONFIG_KEYS)")
    # the daemon's own session keyring, with a key in it, as a service or login session has one
    assert _keyctl(KEYCTL_JOIN, b"ar-test-daemon-session") >= 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    secret = b"daemon-secret-" + uuid.uuid4().hex.encode()
    assert libc.syscall(ctypes.c_long(NR[0]), b"user", (TAG + "daemon").encode(), secret,
                        ctypes.c_size_t(len(secret)), ctypes.c_long(SESSION)) >= 0
    work = tmp_path_factory.mktemp("keyring") / "work"
    m = EnvManifest(run="python3 run.py x y", metric="found", time_budget_s=60)
    runner = LocalRunner(RunnerCfg(kind="local", slots=1, sandbox="bwrap"), m, str(work))
    try:
        yield runner
    finally:
        runner.close()
        _forget_planted()


def test_no_key_survives_from_one_model_runner_group_to_the_next(host):
    m = EnvManifest(run="true", evaluate="python3 score.py", model="python3 model.py", model_output_mb=1,
                    metric="found", time_budget_s=60, eval_budget_s=60, frozen=["score.py", "model.py"],
                    artifacts=["keys.py"])
    out = _run(host, m, {"keys.py": KEYS % (NR,)}, {"score.py": SCORER, "model.py": MODEL})
    assert out.error is None and out.trust == "split", (out.error, out.log[-2000:])
    assert out.metrics["found"] == 0.0, out.log[-2000:]


def test_no_key_a_trial_planted_reaches_a_later_trial(host):
    tag = uuid.uuid4().hex[:8]
    m = EnvManifest(run=f"python3 run.py plant {tag}", metric="found", time_budget_s=60)
    first = _run(host, m, {"run.py": RUN, "keys.py": KEYS % (NR,)})
    assert first.error is None, (first.error, first.log[-1500:])
    m = EnvManifest(run=f"python3 run.py look {tag}", metric="found", time_budget_s=60)
    later = _run(host, m, {"run.py": RUN, "keys.py": KEYS % (NR,)})
    assert later.error is None and later.metrics["found"] == 0.0, (first.metrics, later.metrics)


def test_a_run_reads_no_key_of_the_daemons_session(host):
    m = EnvManifest(run="python3 run.py look daemon", metric="found", time_budget_s=60)
    out = _run(host, m, {"run.py": RUN, "keys.py": KEYS % (NR,)})
    assert out.error is None and out.metrics["secret"] == 0.0, (out.metrics, out.log[-1500:])
