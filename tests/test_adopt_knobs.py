"""`adopt`'s knob guesses on a small argparse training script and a config file: each rule of
daemon/adopt_knobs.py (log range for rate-like floats, linear for other floats and ints, categorical
for choices; seeds, step counts, booleans and negatives left out), the commented tables in the
generated manifest parse as valid `[[env.knobs]]` once uncommented, and the `run` suffix each argparse
guess shows passes the variable to the script only when it is set."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import git

from autoresearchd.adopt import plan, report_lines
from autoresearchd.manifest import MANIFEST_FILE, parse_manifest

# the training script's options, one add_argument call each (written out below)
OPTIONS = [
    '"--lr", type=float, default=3e-4',
    '"--weight-decay", type=float, default=0.1',
    '"--dropout", type=float, default=0.2',
    '"--grad_clip", type=float, default=2.0',
    '"--label_smoothing", type=float, default=0.0',
    '"--warmup_frac", type=float, default=1',
    '"--n_embd", type=int, default=128',
    '"--act", choices=["gelu", "relu"], default="gelu"',
    '"--seed", type=int, default=1337',
    '"--max_iters", type=int, default=1000',
    '"--eval_interval", type=int, default=100',
    '"--compile", action="store_true"',
    '"--flag", type=bool, default=False',
    '"--shift", type=float, default=-1.0',
    '"--name", default="run"',
]
TRAIN = "import argparse\np = argparse.ArgumentParser()\n" + "".join(f"p.add_argument({o})\n" for o in OPTIONS) + """args = p.parse_args()
print("---")
print(f"val_loss: {args.lr}")
"""
CONFIG = 'batch_size = 32\nbeta2 = 0.99\nout_dir = "out"\nbias = False\nlr = 1.0\n'

# name -> (type, low, high, log, baseline) as each rule gives it
EXPECTED = {
    "lr": ("float", 3e-5, 3e-3, True, 3e-4),                       # rate-like: log, /10 .. x10
    "weight_decay": ("float", 0.01, 1.0, True, 0.1),              # rate-like ("decay")
    "dropout": ("float", 0.1, 0.4, False, 0.2),                   # in (0, 1): /2 .. min(x2, 1)
    "grad_clip": ("float", 1.0, 4.0, False, 2.0),                 # > 1: /2 .. x2
    "label_smoothing": ("float", 0.0, 1.0, False, 0.0),           # 0.0: 0 .. 1
    "warmup_frac": ("float", 0.5, 2.0, False, 1.0),               # default=1 with type=float: a float
    "n_embd": ("int", 64, 256, False, 128),                       # int: max(1, //2) .. x2
    "batch_size": ("int", 16, 64, False, 32),                     # config.py's top-level assignment
    "beta2": ("float", 0.495, 1.0, False, 0.99),
}


def adopted(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "train.py").write_text(TRAIN)
    (root / "config.py").write_text(CONFIG)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root, plan(root)


def uncommented(manifest: str) -> str:
    """The manifest with the knob tables uncommented, as a person who keeps them all would."""
    head, mark, block = manifest.partition("# Knobs a tuner may set")
    return head + mark + "\n".join(re.sub(r"^# ", "", ln) if re.match(r"^# (\[\[env\.knobs]]|\w+ = )", ln) else ln
                            for ln in block.splitlines()) + "\n"


def test_adopt_guesses_knobs_from_argparse_defaults_and_a_config_file(tmp_path):
    root, p = adopted(tmp_path)
    text = p.files[MANIFEST_FILE]
    # commented: the manifest as written declares no knob
    assert parse_manifest(text).knobs == []
    m = parse_manifest(uncommented(text))
    got = {k.name: (k.type.value, k.low, k.high, k.log, k.baseline) for k in m.knobs if k.type.value != "categorical"}
    assert got == EXPECTED
    act = m.knob("act")
    assert act.type.value == "categorical" and act.choices == ["gelu", "relu"] and act.baseline == "gelu"
    # left out: seed, step counts and intervals, booleans, negatives, strings without choices
    assert not {"seed", "max_iters", "eval_interval", "compile", "flag", "shift", "name", "out_dir", "bias"} \
        & {k.name for k in m.knobs}
    # the script's own guess wins over the config file's (lr = 1.0 there)
    assert "train.py:3 --lr" in text and m.knob("lr").baseline == 3e-4
    assert any(ln.startswith("knobs a tuner could set") and "lr" in ln for ln in report_lines(p.findings))


def test_the_run_suffix_passes_the_knob_only_when_it_is_set(tmp_path):
    root, p = adopted(tmp_path)
    line = next(ln for ln in p.files[MANIFEST_FILE].splitlines() if "--lr" in ln and "append to run:" in ln)
    suffix = line.split("append to run: ", 1)[1]
    assert suffix == '${AUTORESEARCH_KNOB_LR:+--lr "$AUTORESEARCH_KNOB_LR"}'
    cmd = f"{sys.executable} train.py {suffix}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTORESEARCH_")}
    unset = subprocess.run(["sh", "-c", cmd], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert unset.stdout.splitlines()[-1] == "val_loss: 0.0003"        # the script's default holds
    env["AUTORESEARCH_KNOB_LR"] = "0.0123"
    given = subprocess.run(["sh", "-c", cmd], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert given.stdout.splitlines()[-1] == "val_loss: 0.0123"
