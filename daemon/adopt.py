"""`autoresearchd adopt [DIR]`: inspect an existing training repo and write what turns it into an
environment: a commented `.autoresearch.toml` with the `run` and `metric` it could guess and, where
the repo prints no metrics block, a starter evaluator and export template for the user to fill in.

It only writes files into the work tree (never over the user's own files), lists what it wrote and
what to check, and commits them only when asked (`--commit`, or a yes at the prompt).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from autoresearchd.config import ConfigError
from autoresearchd.manifest import MANIFEST_FILE
from autoresearchd.store.gitrepo import GitError, GitRepo

EVAL_FILE = "autoresearch_eval.py"       # the trusted scorer (the manifest's `evaluate`)
MODEL_FILE = "autoresearch_model.py"     # the model runner: the only process that loads the model (`model`)
EXPORT_FILE = "autoresearch_export.py"
EXPORT_DIR = "autoresearch_out"
TRAIN_NAMES = ("train.py", "train_gpt.py", "train_gpt2.py", "main.py", "run.py")
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", EXPORT_DIR}
# a literal seed: torch.manual_seed(1337), np.random.seed(0), random.seed(42), set_seed(3), seed = 1337
_SEED = re.compile(r"(?:manual_seed|random\.seed|set_seed|seed_everything|seed_all)\(\s*(?:\d+\s*[+)]|\d+\s*$)"
                   r"|^\s*seed\s*=\s*\d+\b")
_BLOCK_PRINT = re.compile(r"""print\(\s*(?:f?["']---["'])\s*\)""")
_KEY_PRINT = re.compile(r"""print\(\s*f?["']([A-Za-z_][\w.]*)\s*[:=]""")
_LOSS_WORDS = re.compile(r"\bval(?:idation)?[ _]?loss\b", re.I)
_ACC_WORDS = re.compile(r"\b(?:val(?:idation)?[ _]?)?acc(?:uracy)?\b", re.I)


@dataclass
class Findings:
    root: Path
    train: str | None = None                 # the training script, relative to root
    prints_block: bool = False               # it already ends stdout with a '---' metrics block
    block_keys: list[str] = field(default_factory=list)
    metric: str = "val_loss"
    goal: str = "min"
    metric_why: str = ""
    seeds: list[str] = field(default_factory=list)    # "train.py:83: torch.manual_seed(1337)"
    cuda: bool = False
    data_dir: bool = False
    prepare_scripts: list[str] = field(default_factory=list)
    requirements: str | None = None

    @property
    def needs_evaluator(self) -> bool:
        return not self.prints_block


def _py_files(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*.py")):
        if not any(part in _SKIP_DIRS or part.startswith(".") for part in p.relative_to(root).parts[:-1]):
            out.append(p)
    return out


def inspect(root: Path) -> Findings:
    """What the repo looks like: its training script, what it prints, its seeds, data and GPUs."""
    f = Findings(root)
    files = _py_files(root)
    rel = {p.relative_to(root).as_posix(): p for p in files}
    f.train = next((n for n in TRAIN_NAMES if n in rel), None) or \
        next((n for n in rel if "/" not in n and n.startswith("train")), None)
    text = rel[f.train].read_text(errors="replace") if f.train else ""
    f.prints_block = bool(_BLOCK_PRINT.search(text))
    if f.prints_block:
        after = text[_BLOCK_PRINT.search(text).end():]
        f.block_keys = list(dict.fromkeys(_KEY_PRINT.findall(after)))
        keys = f.block_keys
        pick = next((k for k in keys if _LOSS_WORDS.search(k.replace("_", " "))), None) or \
            next((k for k in keys if "loss" in k), None) or next(iter(keys), "val_loss")
        f.metric = pick
        f.goal = "max" if _ACC_WORDS.search(pick.replace("_", " ")) and "loss" not in pick else "min"
        f.metric_why = f"{f.train} prints a metrics block with: {', '.join(keys) or '(no keys found)'}"
    elif _LOSS_WORDS.search(text):
        f.metric_why = (f"{f.train} prints validation losses but no metrics block: the starter evaluator "
                        f"measures val_loss itself")
    else:
        f.metric_why = "no metric found in the training script: the starter evaluator measures val_loss"
    for name, p in rel.items():
        if name.startswith(EXPORT_FILE.removesuffix(".py")) or name == EVAL_FILE:
            continue
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if _SEED.search(line) and "AUTORESEARCH_SEED" not in line:
                f.seeds.append(f"{name}:{i}: {line.strip()[:80]}")
    f.cuda = "cuda" in text
    f.data_dir = (root / "data").is_dir()
    f.prepare_scripts = sorted(n for n in rel if re.search(r"(^|/)prepare[\w]*\.py$", n))
    f.requirements = next((n for n in ("requirements.txt", "pyproject.toml", "environment.yml")
                           if (root / n).is_file()), None)
    return f


def _toml_str(s: str) -> str:
    return json.dumps(s)


def render_manifest(f: Findings) -> str:
    """A commented manifest skeleton: every guess says where it came from and what to check."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", f.root.name).strip("-") or "env"
    train = f.train or "train.py"
    run = f"python {train}" + (f" && python {EXPORT_FILE}" if f.needs_evaluator else "")
    frozen = ([EVAL_FILE, MODEL_FILE] if f.needs_evaluator else []) + (["data"] if f.data_dir else [])
    seed_lines = "".join(f"#   {s}\n" for s in f.seeds[:8]) or "#   (none found)\n"
    prep = f.prepare_scripts[0] if f.prepare_scripts else "data/prepare.py"
    lines = [
        "# Written by `autoresearchd adopt`: check every line, then commit this file (and the files it",
        "# names) on your baseline branch. Reference: docs/environment.md, docs/bring-your-own-repo.md.",
        "",
        "# The daemon config may live here too: the research repo is this repo. Add [llm], [runner] ...",
        "# (docs/config.md). The [env] table below is read from the committed baseline, not from disk.",
        "[research]",
        'repo = "."',
        "",
        "[env]",
        f"name = {_toml_str(name)}",
        f"# guessed from {train}" + (f", then the export step that writes {EXPORT_DIR}/" if f.needs_evaluator else ""),
        f"run = {_toml_str(run)}",
    ]
    if f.needs_evaluator:
        lines += [f"# the metric of record: fill in val_tokens() in {EVAL_FILE} (frozen, trusted)",
                  f"evaluate = {_toml_str('python ' + EVAL_FILE)}",
                  "# the model runner: runs the exported model in a sandbox of its own, apart from the held-out",
                  "# data. If your evaluator must run the model itself, delete this line: notes then say",
                  "# `trust: model-code` (docs/security.md, \"A model is code\")",
                  f"model = {_toml_str('python ' + MODEL_FILE)}",
                  f'artifacts = ["{EXPORT_DIR}"]          # all that leaves the run for the evaluator']
    lines += [
        f"# {f.metric_why}",
        f"metric = {_toml_str(f.metric)}",
        f'goal = "{f.goal}"',
        "# measure one run, then set about 1.5x its wall time: runs over budget are killed",
        "time_budget_s = 600",
        "eval_budget_s = 300",
        f"gpus = {1 if f.cuda else 0}" + ("                             # the training script mentions cuda"
                                          if f.cuda else "                             # CPU only"),
        f"frozen = {json.dumps(frozen)}   # ideas may not touch these (the manifest is always frozen)",
        "# check = \"python " + train + " --check\"   # optional: seconds on a CPU, before any GPU time",
        "",
        "# Seeds: `run` gets $AUTORESEARCH_SEED (baseline seeds 0, 1, 2) and must seed every RNG from it,",
        "# or all baseline seeds give one identical value and no idea can be promoted. Literal seeds found:",
        seed_lines.rstrip("\n"),
        "# Replace each with int(os.environ.get(\"AUTORESEARCH_SEED\", <old value>)), or, if runs are",
        "# really deterministic, declare it (one baseline seed):",
        "# deterministic = true",
        "",
        "# Once per host, cached by the hash of its command and inputs (data download, tokenisation);",
        "# its output directory is $AUTORESEARCH_PREPARED for setup, run, evaluate and check:",
        f"# prepare = \"python {prep}\"",
        f"# prepare_inputs = [\"{prep}\"]",
        "# Before prepare, run and evaluate, on the host (e.g. activate a venv"
        + (f" with the packages of {f.requirements}" if f.requirements else "") + "):",
        "# setup = \"source ~/venvs/ml/bin/activate\"",
        "",
        "context = \"\"\"",
        f"This repo trains a model with `{run}`. The metric is {f.metric} ({'lower' if f.goal == 'min' else 'higher'} "
        "is better)" + (f", measured by the frozen {EVAL_FILE} on held-out data from the model that "
                        f"{EXPORT_FILE} exports." if f.needs_evaluator else "."),
        "TODO: say what may change (architecture, optimizer, schedule, ...) and the rules (fixed compute,",
        "train only on the training split" + (f", keep {EXPORT_FILE} able to rebuild and export the model"
                                              if f.needs_evaluator else "") + ").",
        "\"\"\"",
    ]
    return "\n".join(lines) + "\n"


def template(name: str) -> str:
    return resources.files("autoresearchd").joinpath("templates", name + ".tmpl").read_text()


@dataclass
class Plan:
    findings: Findings
    files: dict[str, str]                    # path relative to root -> content to write
    kept: list[str]                          # files that exist already and are left alone


def plan(root: Path, force: bool = False) -> Plan:
    f = inspect(root)
    if f.train is None:
        raise ConfigError(f"{root}: no training script found ({', '.join(TRAIN_NAMES)} or train*.py at the top); "
                          f"write {MANIFEST_FILE} by hand (docs/environment.md)")
    files = {MANIFEST_FILE: render_manifest(f)}
    if f.needs_evaluator:
        files[EVAL_FILE] = template(EVAL_FILE)
        files[MODEL_FILE] = template(MODEL_FILE)
        files[EXPORT_FILE] = template(EXPORT_FILE)
    kept = [p for p in files if (root / p).exists() and not force]
    if MANIFEST_FILE in kept:
        raise ConfigError(f"{root / MANIFEST_FILE} exists already; move it away or pass --force to overwrite it")
    return Plan(f, {p: t for p, t in files.items() if p not in kept}, kept)


def write(root: Path, p: Plan) -> list[str]:
    """Write the planned files, and ignore the export directory in .gitignore. Returns what changed."""
    written = []
    for rel, text in p.files.items():
        (root / rel).write_text(text)
        written.append(rel)
    if p.findings.needs_evaluator:     # the exported model is an output, never a file to commit
        gi = root / ".gitignore"
        old = gi.read_text() if gi.exists() else ""
        if EXPORT_DIR + "/" not in old.split("\n"):
            gi.write_text(old + ("" if not old or old.endswith("\n") else "\n") + EXPORT_DIR + "/\n")
        written.append(".gitignore")
    return written


def commit(root: Path, paths: list[str]) -> str:
    repo = GitRepo(root)
    try:
        return repo.commit_paths(paths, "Add the autoresearchd environment manifest\n\nWritten by "
                                        "`autoresearchd adopt` and filled in by hand.")
    except GitError as e:
        raise ConfigError(f"commit failed: {str(e).strip().splitlines()[-1]}") from None


def next_steps(root: Path, p: Plan, written: list[str]) -> list[str]:
    f = p.findings
    steps = []
    if f.needs_evaluator:
        steps.append(f"fill in the TODOs of {EXPORT_FILE} (rebuild the trained model) and {EVAL_FILE} "
                     f"(the held-out tokens)")
    if f.seeds:
        steps.append(f"seed from $AUTORESEARCH_SEED: {len(f.seeds)} literal seed(s) found, listed in {MANIFEST_FILE}")
    steps.append(f"check {MANIFEST_FILE}: run, metric, time_budget_s, gpus, frozen, context")
    run = f"python {f.train}" + (f" && python {EXPORT_FILE}" if f.needs_evaluator else "")
    try_it = f"AUTORESEARCH_SEED=0 sh -c '{run}'"
    if f.needs_evaluator:
        try_it += f" && AUTORESEARCH_ARTIFACTS=. python {EVAL_FILE}"
    steps.append(f"try it by hand: {try_it}   (it must end with '---' and '{f.metric}: ...')")
    steps.append(f"commit: git add {' '.join(written)} && git commit -m 'autoresearchd environment'")
    steps.append("then: autoresearchd doctor && autoresearchd start")
    return steps
