"""What goes into a trial directory and how the host side is scripted: the quoted trial.env, the
single-upload bundle (code/, eval/, trial.sh, trial.env), the host probe, the poll functions, and
the scrubbed environment that keeps secrets away from untrusted code."""

from __future__ import annotations

import io
import os
import re
import shlex
import tarfile
import time
from importlib import resources

from autoresearchd import defaults
from autoresearchd.scrub import SECRET_NAME, scrubbed_env  # noqa: F401  (runners.base re-exports both)

from .isolation import TrialSandbox
from .limits import limits_script
from .prepare import prepare_key, prepare_script
from .protocol import Slot, TrialSpec


# Trials run untrusted code (LLM-written or pushed): variables that look like secrets stay behind.


def trial_script() -> bytes:
    return resources.files("autoresearchd.runners").joinpath("trial.sh").read_bytes()


PROBE = r"""
acc=cpu
if command -v nvidia-smi >/dev/null 2>&1; then
  n=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  c=$(nvidia-smi -L 2>/dev/null | wc -l); [ -n "$n" ] && acc="$c x $n"
fi
py=python; command -v python >/dev/null 2>&1 || py=python3   # the interpreter trials' `python` finds
sw=$(cd / && "$py" -c 'import sys,platform;v="py"+platform.python_version()
try:
  import torch;v+=" torch"+torch.__version__+(" cuda"+torch.version.cuda if torch.version.cuda else "")
except Exception: pass
print(v)' 2>/dev/null || echo unknown)
echo "accelerator: $acc"; echo "software: $sw"
"""


def trial_env(spec: TrialSpec, slot: Slot, path_prefix: str, cfg_head: int, cfg_tail: int,
              data_env: dict[str, str], scheduler_gpus: bool = False, slot_lock: str = "",
              events: str = "", sandbox: TrialSandbox | None = None,
              limits: dict[str, str] | None = None) -> str:
    """The quoted variables file that trial.sh sources. Every value goes through shlex.quote.
    With `scheduler_gpus` (Slurm --gres), CUDA_VISIBLE_DEVICES is left as the job got it.
    `sandbox`: the prefixes that isolate run and evaluate (default: none, a clean environment only)."""
    m = spec.manifest
    q = shlex.quote

    def qpath(v: str) -> str:
        # `$PATH` inside path_prefix (the ssh default) must expand on the host, the rest stays literal
        return '"$PATH"'.join(q(part) for part in v.split("$PATH"))
    lines = {
        "AR_RUN": m.run,
        "AR_EVALUATE": m.evaluate or "",
        "AR_MODEL": m.model or "",           # the split evaluation's model runner (trial.sh: three steps)
        "AR_MODEL_OUTPUT_KB": str(int(m.model_output_mb) * 1024),
        "AR_SETUP": m.setup or "",
        "AR_PREPARE": m.prepare or "",
        # a caller that gives no key (doctor --run) still gets a cache of its own, never the bare dir
        "AR_PREPARE_KEY": spec.prepare_key or (prepare_key(m, []) if m.prepare else ""),
        "AR_PREPARE_BUDGET": str(int(m.prepare_budget_s)),
        "AR_BUDGET": str(int(m.time_budget_s)),
        "AR_EVAL_BUDGET": str(int(m.eval_budget_s)),
        "AR_KILL_GRACE": str(defaults.KILL_GRACE_S),
        "AR_FROZEN_CPU": str(defaults.FROZEN_HASH_CPU_S),   # checksum_frozen's RLIMIT_CPU
        "AR_LOG_HEAD": str(cfg_head),
        "AR_LOG_TAIL": str(cfg_tail),
        "AR_PATH": path_prefix,
        "AR_SLOT_LOCK": slot_lock,     # trial.sh waits for this lock before its clock starts
        "AR_EVENTS": events,           # trial.sh appends a line here when it is done
        "AR_PROGRESS": defaults.PROGRESS_FILE,             # run's learning curve, in code/ (runners/progress.py)
        "AR_PROGRESS_MAX": str(defaults.PROGRESS_MAX_BYTES),
        **(limits or {}),              # runners/limits.sh: the trial's limits (0: derived on the host)
    }
    out = [f"{k}={qpath(v) if k == 'AR_PATH' else q(v)}" for k, v in lines.items()]
    out.append("AR_FROZEN=(" + " ".join(q(p) for p in spec.frozen_paths) + ")")
    out.append("AR_ARTIFACTS=(" + " ".join(q(p) for p in m.artifacts) + ")")
    sb = sandbox or TrialSandbox()
    arrays = {"AR_SB_RUN": sb.run_prefix, "AR_SB_EVAL": sb.eval_prefix, "AR_SB_MODEL": sb.model_prefix,
              "AR_DATA": [f"{k}={v}" for k, v in data_env.items()],
              "AR_EVAL_DATA": [f"{k}={v}" for k, v in sb.eval_env.items()],
              "AR_HELDOUT": m.heldout(),     # never copied where run can read (the prepare step's source)
              # the commit's knob values, for run only (names and values validated by the daemon)
              "AR_KNOBS": [f"{k}={v}" for k, v in spec.knobs.items()],
              "AR_PASS_ENV": [n for n in defaults.SANDBOX_PASS_ENV if not SECRET_NAME.search(n)]}
    out += [f"{k}=(" + " ".join(q(x) for x in v) + ")" for k, v in arrays.items()]
    exports = {"AUTORESEARCH_SEED": str(spec.seed), "AUTORESEARCH_TRIAL": spec.trial_id,
               "AUTORESEARCH_TIME_BUDGET_S": str(int(m.time_budget_s)),
               **({} if scheduler_gpus else {"CUDA_VISIBLE_DEVICES": ",".join(map(str, slot.gpus))}),
               "PATH": path_prefix, **data_env}
    out += [f"export {k}={qpath(v) if k == 'PATH' else q(v)}" for k, v in exports.items()]
    return "\n".join(out) + "\n"


# Is process $2 this trial's ($1)? PIDs wrap quickly on a busy host, so a pid file alone can name a
# stranger. The wrapper and its groups work in the trial dir, code/, eval/ or model/ (test builtins, no fork).
MINE_FN = r"""mine() {
  [ -d /proc/1 ] || return 0
  [ /proc/$2/cwd -ef "$1" ] || [ /proc/$2/cwd -ef "$1/code" ] || [ /proc/$2/cwd -ef "$1/eval" ] ||
  [ /proc/$2/cwd -ef "$1/model" ] ||
    { tr '\0' '\n' < /proc/$2/environ | grep -qF "=$1/"; } 2>/dev/null
}
"""
POLL_FN = MINE_FN + r"""st() {
  if [ -e "$1/done" ]; then echo done; return; fi
  if [ ! -d "$1" ]; then echo missing; return; fi
  p=$2; [ -n "$p" ] || { read -r p < "$1/pgid"; } 2>/dev/null || p=
  case $p in ''|*[!0-9]*) echo nopid; return;; esac
  s=; if [ -d /proc/1 ]; then { read -r s < "/proc/$p/stat"; } 2>/dev/null; s=${s##*) }; s=${s%% *}
    mine "$1" "$p" || s=
  else s=$(ps -o stat= -p "$p" 2>/dev/null); fi
  if [ -e "$1/done" ]; then echo done; elif [ -z "$s" ] || [ "${s#Z}" != "$s" ]; then echo dead
  else t=; { read -r t < "$1/started"; } 2>/dev/null; case $t in ''|*[!0-9.]*) echo running;; *) echo "running@$t";; esac; fi
}
"""
# "running@T": the run started at T (epoch seconds, the wrapper's `started` stamp); plain "running": it
# is placed on the host and still waits for its slot (pre-staging), so its budget clock has not started.


def slot_file(slot: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.,-]", "_", slot) or "_"


def bundle(spec: TrialSpec, env_text: str) -> bytes:
    """One tar holding code/ (the commit), an empty artifacts/ (trial.sh moves the declared artifacts
    there once run is over), eval.tar (the harness: trial.sh unpacks it only after run
    is gone), trial.sh, prepare.sh, limits.sh and trial.env, so a trial directory is placed with a single upload."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for prefix, data in (("code", spec.code_tar),):
            d = tarfile.TarInfo(prefix)
            d.type, d.mode = tarfile.DIRTYPE, 0o755
            out.addfile(d)
            if not data:
                continue
            with tarfile.open(fileobj=io.BytesIO(data)) as src:
                for m in src:
                    m.name = f"{prefix}/{m.name}"
                    if m.islnk():        # hard links name a member of the same archive
                        m.linkname = f"{prefix}/{m.linkname}"
                    out.addfile(m, src.extractfile(m) if m.isreg() else None)
        d = tarfile.TarInfo("artifacts")     # there before the wrapper starts: one mkdir less a trial
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        out.addfile(d)
        for name, data, mode in (("trial.sh", trial_script(), 0o755), ("prepare.sh", prepare_script(), 0o755),
                                 ("limits.sh", limits_script(), 0o644),
                                 ("trial.env", env_text.encode(), 0o644), ("eval.tar", spec.eval_tar or b"", 0o644)):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), mode, int(time.time())
            out.addfile(ti, io.BytesIO(data))
    return buf.getvalue()
