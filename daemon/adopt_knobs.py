"""`adopt`'s knob guesses: the numbers of an adopted repo a tuner could set, read (never run) from the
training script's argparse defaults and from simple top-level assignments in it or in a config file.

Each guess becomes a commented `[[env.knobs]]` table at the end of the generated manifest, with a range
around its default (docs/bring-your-own-repo.md, "Knobs adopt guesses"):
- a float whose name says rate/decay (lr, learning_rate, weight_decay, eps, ...) and is > 0: log scale,
  default / 10 .. default x 10;
- another float in (0, 1) (dropout, betas): linear, default / 2 .. min(default x 2, 1);
- another float > 0: linear, default / 2 .. default x 2; a float 0.0: linear 0 .. 1;
- an int > 0: linear, max(1, default // 2) .. default x 2;
- a string option with `choices=[...]`: categorical over the choices.
Booleans, negatives, int 0 and names that are not hyperparameters (seed, steps, iterations, epochs,
logging, evaluation and save intervals, devices, ranks) are left out. Nothing is enabled: a person reads
the guesses, uncomments the ones worth tuning and passes each value to the code (an argparse option by
appending the shown `${AUTORESEARCH_KNOB_X:+--opt "$AUTORESEARCH_KNOB_X"}` to `run`; an assignment by
reading the variable in code).
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from autoresearchd.manifest import KNOB_ENV_PREFIX

MAX_GUESSES = 12                     # a manifest comment block a person still reads through
_RATE = re.compile(r"(^|_)(lr|learning_rate|rate|decay|wd|eps|epsilon|lambda|alpha)(_|$)")
_NOT_KNOB = re.compile(r"(^|_)(seed|steps?|iters?|iterations?|epochs?|workers|interval|every|log|eval|save|print|"
                       r"verbose|debug|device|gpus?|rank|world|port|local|compile|out|dir|path|wandb)(_|$)")
_NAME_OK = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


@dataclass
class Guess:
    name: str
    type: str                        # float | int | categorical
    baseline: float | int | str
    where: str                       # "train.py:12 --lr" / "config.py:3 lr = ..."
    option: str | None = None        # the argparse option that sets it
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    choices: list = field(default_factory=list)

    def lines(self) -> list[str]:
        """The commented [[env.knobs]] table, with how the value reaches the code."""
        env = KNOB_ENV_PREFIX + self.name.upper()
        how = (f'append to run: ${{{env}:+{self.option} "${env}"}}' if self.option
               else f"read {env} in the code (default {self.baseline!r})")
        out = [f"# [[env.knobs]]      # {self.where}; {how}", f"# name = {json.dumps(self.name)}",
               f'# type = "{self.type}"']
        if self.type == "categorical":
            out.append(f"# choices = {json.dumps(self.choices)}")
        else:
            out += [f"# low = {self.low!r}", f"# high = {self.high!r}"] + (["# log = true"] if self.log else [])
        return out + [f"# baseline = {json.dumps(self.baseline)}"]


def _r(v: float) -> float:
    return float(f"{v:.6g}")


def guess(name: str, value, where: str, option: str | None = None, choices=None) -> Guess | None:
    """The knob for one default, or None when it is not one (see the module's rules)."""
    name = name.lower().replace("-", "_")
    if not _NAME_OK.match(name) or _NOT_KNOB.search(name) or isinstance(value, bool):
        return None
    if choices:
        if value in choices and len(choices) >= 2 and all(isinstance(c, (str, int, float)) for c in choices):
            return Guess(name, "categorical", value, where, option, choices=list(choices))
        return None
    if isinstance(value, float):
        if value < 0 or not math.isfinite(value):
            return None
        if value > 0 and _RATE.search(name):
            return Guess(name, "float", value, where, option, _r(value / 10), _r(value * 10), log=True)
        if value == 0:
            return Guess(name, "float", value, where, option, 0.0, 1.0)
        if value < 1:
            return Guess(name, "float", value, where, option, _r(value / 2), min(_r(value * 2), 1.0))
        return Guess(name, "float", value, where, option, _r(value / 2), _r(value * 2))
    if isinstance(value, int) and value > 0:
        return Guess(name, "int", value, where, option, max(1, value // 2), value * 2)
    return None


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def from_source(text: str, rel: str) -> list[Guess]:
    """The guesses in one Python file: `add_argument("--x", ..., default=<literal>)` calls anywhere,
    and `name = <number>` assignments at the top level."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out: list[Guess] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        opts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        long = next((o for o in opts if o.startswith("--")), None)
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        if long is None or "default" not in kw:
            continue
        value = _literal(kw["default"])
        typ = kw.get("type")
        if isinstance(typ, ast.Name) and typ.id == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)                  # default=1 with type=float is the float 1.0
        choices = _literal(kw["choices"]) if "choices" in kw else None
        g = guess(long[2:], value, f"{rel}:{node.lineno} {long}", long, choices if isinstance(choices, (list, tuple))
                  else None)
        if g is not None:
            out.append(g)
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _literal(node.value)
            if isinstance(value, (int, float)):
                g = guess(node.targets[0].id, value, f"{rel}:{node.lineno} {node.targets[0].id} = {value!r}")
                if g is not None:
                    out.append(g)
    return out


def guesses(root: Path, train: str | None) -> list[Guess]:
    """The guesses of the training script, then of config files (`*config*.py` at the top or in
    config/), one per name (the first wins), at most MAX_GUESSES."""
    files = [train] if train else []
    files += sorted(p.relative_to(root).as_posix() for pat in ("*config*.py", "config/*.py") for p in root.glob(pat)
                    if p.is_file())
    seen: dict[str, Guess] = {}
    for rel in dict.fromkeys(files):
        try:
            text = (root / rel).read_text(errors="replace")
        except OSError:
            continue
        for g in from_source(text, rel):
            seen.setdefault(g.name, g)
    return list(seen.values())[:MAX_GUESSES]


def manifest_lines(gs: list[Guess]) -> list[str]:
    """The block at the end of the generated manifest (after every [env] key: a table header there
    would capture the keys below it)."""
    if not gs:
        return []
    out = ["", "# Knobs a tuner may set ([tune], docs/policies.md), guessed from argparse defaults and top-level",
           "# assignments; each range surrounds the default (docs/bring-your-own-repo.md, \"Knobs adopt guesses\").",
           "# Uncomment the tables worth tuning, and pass each value to the code as its line says."]
    for g in gs:
        out += [""] + g.lines()
    return out
