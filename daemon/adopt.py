"""`autoresearchd adopt [DIR]`: inspect an existing training repo and write what turns it into an
environment: a commented `.autoresearch.toml` with the `run` and `metric` it could guess and, where
the repo prints no metrics block, a starter evaluator and export template for the user to fill in.

It only writes files into the work tree (never over the user's own files), lists what it wrote and
what to check, and commits them only when asked (`--commit`, or a yes at the prompt).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from autoresearchd import adopt_commands as docs
from autoresearchd.adopt_knobs import guesses as knob_guesses, manifest_lines as knob_lines
from autoresearchd.config import ConfigError
from autoresearchd.manifest import EVAL_FILE, EXPORT_FILE, MANIFEST_FILE, MODEL_FILE
from autoresearchd.store.gitrepo import GitError, GitRepo

PROGRESS_FILE = "autoresearch_progress.py"   # learning-curve reports for the training loop (docs/environment.md)
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
    command: docs.Command | None = None      # the documented training command chosen for `run`
    alternatives: list[docs.Command] = field(default_factory=list)   # the others, best first
    cpu_option: str | None = None            # appended to the command: no GPU here, the script defaults to cuda
    seed_option: str | None = None           # appended: the script takes --seed, so trials pass theirs
    branch: str = "main"                     # the branch checked out: the baseline
    python: str | None = None                # `python` on PATH, when it is not the daemon's interpreter
    setup: str | None = None                 # ... then the setup that puts it first for the trials
    gpus: int = 0
    gpus_why: str = ""
    prepare: str | None = None               # the prepare command, when adopt can tell how to run it
    prepare_why: str = ""
    unsure: list[str] = field(default_factory=list)   # what adopt could not tell: said, never guessed

    @property
    def train_cmd(self) -> str:
        """The training command, without the prepared-data links and the export step."""
        base = self.command.cmd if self.command else f"python {shlex.quote(self.train or 'train.py')}"
        return base + "".join(f" {o}" for o in (self.cpu_option, self.seed_option) if o)

    @property
    def prepared_dir(self) -> str:
        """Where the prepare script writes: its own directory when it names __file__, else its cwd."""
        script = next((s for s in self.prepare_scripts if self.prepare and s in self.prepare), None)
        if script is None:
            return ""
        text = (self.root / script).read_text(errors="replace")
        return str(Path(script).parent) if "__file__" in text and str(Path(script).parent) != "." else ""

    @property
    def run(self) -> str:
        """`run` as written into the manifest: link what prepare made (under $AUTORESEARCH_PREPARED)
        into the trial's copy, train, export."""
        link = ""
        if self.prepare:
            d = self.prepared_dir
            src = '"$AUTORESEARCH_PREPARED"' + (f"/{shlex.quote(d)}" if d else "")
            dst = f"{shlex.quote(d)}/" if d else ""
            link = (f'for f in {src}/*; do [ -e {dst}"${{f##*/}}" ] || ln -s "$f" {dst or "."}; done && ')
        return link + self.train_cmd + (f" && python {EXPORT_FILE}" if self.needs_evaluator else "")

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
    f.train, why = docs.train_script(root, list(rel), TRAIN_NAMES)
    f.unsure += [why] if why else []
    _guess_commands(f, rel)
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
    _guess_host(f)
    f.requirements = next((n for n in ("requirements.txt", "pyproject.toml", "environment.yml")
                           if (root / n).is_file()), None)
    return f


def _guess_commands(f: Findings, rel: dict[str, Path]) -> None:
    """The documented training command (README, config directory), ranked for this host's GPUs."""
    f.gpus = docs.host_gpus()
    ranked = docs.run_candidates(f.root, f.train, f.gpus)
    if ranked and ranked[0].script in rel and not ranked[0].missing:
        f.command, f.alternatives = ranked[0], ranked[1:]
        f.train = f.command.script
    else:
        f.alternatives = ranked
        if ranked:
            f.unsure.append(f"no documented training command runs as written here (missing: "
                            f"{', '.join(ranked[0].missing)}): `run` is a plain `python {f.train}`")


def _guess_host(f: Findings) -> None:
    """gpus from this host, never from what the script mentions; the CPU option; the prepare step."""
    script = f.command.script if f.command else f.train
    f.gpus, f.unsure = docs.host_gpus(), [u for u in f.unsure if not u.startswith(("prepare:", script or "-"))]
    have = f.gpus
    if have == 0:
        f.gpus_why = "no CUDA device is visible on this host" + (
            f" ({script} mentions cuda; set gpus = N if your runs go to GPU hosts)" if f.cuda else "")
        f.cpu_option = docs.cpu_option(f.root, f.command or docs.Command(f"python {script}", "", script))
        if f.cpu_option:
            f.gpus_why += f"; added {f.cpu_option} to `run`: {script} defaults to cuda"
        elif docs.defaults_to_cuda(f.root, script) and not (f.command and f.command.cpu):
            f.unsure.append(f"{script} defaults to cuda and this host has none: add the option that picks "
                            f"the CPU to `run` (adopt cannot tell how {script} takes it)")
    else:
        want = f.command.nproc if f.command and f.command.nproc > 1 else (1 if f.cuda else 0)
        f.gpus = min(want, have)
        f.gpus_why = (f"{f.gpus} of the {have} CUDA device(s) on this host: "
                      + ("the command launches that many processes" if want > 1 else
                         f"{script} mentions cuda" if f.cuda else f"{script} never mentions cuda"))
    f.prepare, f.prepare_why, _ = docs.prepare_command(f.root, f.prepare_scripts, f.command)
    if f.prepare_scripts and f.prepare is None:
        f.unsure.append(f"prepare: {f.prepare_why}")
    cmd = f.command or docs.Command(f"python {script}", "", script)
    f.seed_option = docs.seed_option(f.root, cmd)
    if (endless := docs.endless(f.root, cmd)) is not None:
        f.unsure.append(f"{script} {endless}: a run may train until time_budget_s kills it; set it in `run`")


def _toml_str(s: str) -> str:
    return json.dumps(s)


def render_manifest(f: Findings) -> str:
    """A commented manifest skeleton: every guess says where it came from and what to check."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", f.root.name).strip("-") or "env"
    train = f.train or "train.py"
    run = f.run
    frozen = ([EVAL_FILE, MODEL_FILE] if f.needs_evaluator else []) + (["data"] if f.data_dir else []) + \
        [d for d in dict.fromkeys((docs.data_files(f.command) if f.command else []) + docs.read_files(f.root, f.train))
         if not (f.data_dir and d.startswith("data/"))]
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
        *([f"baseline = {_toml_str(f.branch)}                 # the branch adopt ran on"] if f.branch != "main" else []),
        (f"# documented at {f.command.where}" if f.command else f"# guessed from {train}")
        + (f", with {f.cpu_option} (no GPU here)" if f.cpu_option else "")
        + (f", with {f.seed_option} (the trial's seed)" if f.seed_option else "")
        + (", after linking in what prepare made" if f.prepare else "")
        + (f", then the export step that writes {EXPORT_DIR}/" if f.needs_evaluator else ""),
        f"run = {_toml_str(run)}",
    ]
    lines += [f"# other training command (edit `run` to use it): {c.cmd}   ({c.where}"
              + (f"; missing: {', '.join(c.missing)}" if c.missing else "") + ")" for c in f.alternatives]
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
        f"gpus = {f.gpus}                             # {f.gpus_why}",
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
        *([f"# {f.prepare_why}; it runs in a copy of the frozen files and writes under $AUTORESEARCH_PREPARED"
           + (f"/{f.prepared_dir}" if f.prepared_dir else ""),
           f"prepare = {_toml_str(f.prepare)}",
           f"prepare_inputs = {json.dumps([s for s in f.prepare_scripts if s in f.prepare])}"] if f.prepare else
          [*([f"# adopt could not tell how: {f.prepare_why}"] if f.prepare_why else []),
           *[f"# prepare = \"python {s}\"" for s in (f.prepare_scripts or [prep])],
           f"# prepare_inputs = [\"{prep}\"]"]),
        "# Before prepare, run and evaluate, on the host (e.g. activate a venv"
        + (f" with the packages of {f.requirements}" if f.requirements else "") + "):",
        *([f"# `python` on your PATH is {f.python}, not the interpreter that runs autoresearchd (the local",
           "# runner puts that one first on the trials' PATH): use yours. Another host: its own venv",
           f"setup = {_toml_str(f.setup)}"] if f.setup else ["# setup = \"source ~/venvs/ml/bin/activate\""]),
        "",
        "context = \"\"\"",
        f"This repo trains a model with `{f.train_cmd}`. The metric is {f.metric} ({'lower' if f.goal == 'min' else 'higher'} "
        "is better)" + (f", measured by the frozen {EVAL_FILE} on held-out data from the model that "
                        f"{EXPORT_FILE} exports." if f.needs_evaluator else "."),
        "TODO: say what may change (architecture, optimizer, schedule, ...) and the rules (fixed compute,",
        "train only on the training split" + (f", keep {EXPORT_FILE} able to rebuild and export the model"
                                              if f.needs_evaluator else "") + ").",
        "\"\"\"",
        *knob_lines(knob_guesses(f.root, f.train)),     # last: a table header captures the keys below it
    ]
    return "\n".join(lines) + "\n"


def template(name: str) -> str:
    return resources.files("autoresearchd").joinpath("templates", name + ".tmpl").read_text()


@dataclass
class Plan:
    findings: Findings
    files: dict[str, str]                    # path relative to root -> content to write
    kept: list[str]                          # files that exist already and are left alone


def plan(root: Path, force: bool = False, ask=None) -> Plan:
    """What adopt would write. `ask(findings)`, given only on a terminal, may return another of the
    training commands found (an index into findings.alternatives) to use for `run`."""
    f = inspect(root)
    f.branch = docs.branch(root)
    f.python, f.setup = docs.user_python()
    pick = ask(f) if ask and f.command and f.alternatives else None
    if pick is not None and 0 <= pick < len(f.alternatives) and not f.alternatives[pick].missing:
        chosen = f.alternatives.pop(pick)
        f.alternatives.insert(0, f.command)
        f.command, f.train, f.cpu_option = chosen, chosen.script, None
        _guess_host(f)
    if f.train is None:
        raise ConfigError(f"{root}: no training script found ({', '.join(TRAIN_NAMES)}, train*.py, or a "
                          f"script with a backward pass and an optimizer step, at the top); "
                          f"write {MANIFEST_FILE} by hand (docs/environment.md)")
    files = {MANIFEST_FILE: render_manifest(f), PROGRESS_FILE: template(PROGRESS_FILE)}
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


def report_lines(f: Findings) -> list[str]:
    """What adopt found, one line each: the run it chose and why, the alternatives, gpus, prepare,
    the literal seeds and what it could not tell."""
    out = []
    if f.command:
        out.append(f"run: {f.train_cmd}   (documented at {f.command.where}"
                   + (f"; {f.cpu_option} added: no GPU here" if f.cpu_option else "") + ")")
    else:
        out.append(f"run: {f.train_cmd}   (no documented training command found: a guess)")
    for c in f.alternatives[:6]:
        out.append(f"  other training command: {c.cmd}   ({c.where}"
                   + (f"; missing: {', '.join(c.missing)}" if c.missing else "") + ")")
    if len(f.alternatives) > 6:
        out.append(f"  ... and {len(f.alternatives) - 6} more, listed in {MANIFEST_FILE}")
    if f.setup:
        out.append(f"setup: {f.setup}   (`python` on your PATH is {f.python}, not autoresearchd's interpreter)")
    if f.seed_option:
        out.append(f"seed: run passes {f.seed_option} ({f.train} takes the option): every trial seeds from its own")
    out.append(f"gpus = {f.gpus}: {f.gpus_why}")
    if f.prepare:
        out.append(f"prepare: {f.prepare}   ({f.prepare_why})")
    for s in f.seeds:
        out.append(f"literal seed (honour $AUTORESEARCH_SEED instead): {s}")
    if gs := knob_guesses(f.root, f.train):
        out.append(f"knobs a tuner could set (commented in {MANIFEST_FILE}): {', '.join(g.name for g in gs)}")
    for u in f.unsure:
        out.append(f"not sure: {u}")
    return out


def hand_test(f: Findings) -> str:
    """The command that runs one trial's steps by hand in the work tree, with every variable a trial
    gets (docs/environment.md, "What a trial sees"), so an evaluator filled in as the docs say runs as
    it will in the daemon. Prepare, when there is one, runs here first: the work tree is then its own
    $AUTORESEARCH_PREPARED, and the run's links find the files in place."""
    env = ["AUTORESEARCH_SEED=0", "AUTORESEARCH_TRIAL=by-hand", "AUTORESEARCH_TIME_BUDGET_S=600",
           'AUTORESEARCH_ARTIFACTS="$PWD"'] + (['AUTORESEARCH_PREPARED="$PWD"'] if f.prepare else [])
    steps = ([f.prepare] if f.prepare else []) + [f.run] + ([f"python {EVAL_FILE}"] if f.needs_evaluator else [])
    if f.setup:         # as a trial does: setup right before each step
        steps = [f"bash -c {shlex.quote(f.setup + ' && ' + s)}" for s in steps]
    else:
        steps = [s if s != f.run else f"bash -c {shlex.quote(s)}" for s in steps]
    return f"(export {' '.join(env)}; {' && '.join(steps)})"


def next_steps(root: Path, p: Plan, written: list[str]) -> list[str]:
    f = p.findings
    steps = []
    if f.needs_evaluator:
        steps.append(f"fill in the TODOs of {EXPORT_FILE} (rebuild the trained model) and {EVAL_FILE} "
                     f"(the held-out tokens" + (", made by prepare under $AUTORESEARCH_PREPARED" if f.prepare else "")
                     + ")")
    if f.seeds:
        steps.append(f"seed from $AUTORESEARCH_SEED: {len(f.seeds)} literal seed(s) found, listed in {MANIFEST_FILE}")
    if f.prepare:
        steps.append(f"prepare: `{f.prepare}` ({f.prepare_why}) is the manifest's prepare: it runs once per "
                     f"host before the first trial; the hand test below runs it here first")
    for u in f.unsure:
        steps.append(f"adopt could not tell: {u}")
    steps.append(f"check {MANIFEST_FILE}: run, metric, time_budget_s, gpus, frozen, context")
    steps.append(f"try it by hand: {hand_test(f)}   (it must end with '---' and '{f.metric}: ...')")
    steps.append(f"commit: git add {' '.join(written)} && git commit -m 'autoresearchd environment'")
    steps.append("then: autoresearchd doctor && autoresearchd start")
    return steps
