"""What `adopt` reads besides the code: the commands a repo documents (its README's code blocks and
inline code) and its config directory, ranked into the `run` it writes and the alternatives it lists,
plus the `prepare` command, and what it reads of this host: the GPU count, the branch checked out and
the `python` on PATH.

The ranking, best first (docs/bring-your-own-repo.md, step 1):
1. every file the command names exists (a config named in the README but missing is demoted);
2. documented in the README, over a command built from a config file the README does not name;
3. fits this host: without a CUDA device, a command that asks for the CPU (`--device=cpu`, `--cpu`,
   `--no-cuda`, ...) or names a small config (char, tiny, small, mini, debug, cpu, toy); a multi-GPU
   launch (`torchrun --nproc_per_node=8`) only where the host has that many GPUs;
4. the order of the README.
Commands that only sample, evaluate, benchmark or prepare are never a `run`; a prepare script's
documented command becomes `prepare`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from autoresearchd.runners.local import local_gpu_count
from autoresearchd.store.gitrepo import GitError, GitRepo

# a training loop: a backward pass and an optimizer step (`loss.backward()`, `optimizer.step()`)
_BACKWARD = re.compile(r"\.backward\(")
_OPT_STEP = re.compile(r"\b\w*(?:optim|opt)\w*\.step\(", re.I)


def loop_scripts(root: Path, names: list[str]) -> list[str]:
    """Top-level scripts that hold a training loop, largest first: a repo whose training script has
    no conventional name (karpathy/ng-video-lecture's gpt.py and bigram.py) still gets a `run`."""
    found = []
    for n in names:
        if "/" in n:
            continue
        text = (root / n).read_text(errors="replace")
        if _BACKWARD.search(text) and _OPT_STEP.search(text):
            found.append((-len(text), n))
    return [n for _, n in sorted(found)]


def train_script(root: Path, names: list[str], usual: tuple[str, ...]) -> tuple[str | None, str | None]:
    """The training script (a usual name, then train*.py at the top, then the largest top-level script
    with a training loop) and, where several scripts have a loop, what to say about the choice."""
    got = next((n for n in usual if n in names), None) or next((n for n in names if "/" not in n and
                                                                n.startswith("train")), None)
    if got is not None or not (loops := loop_scripts(root, names)):
        return got, None
    return loops[0], (f"training script: {loops[0]} of {', '.join(loops)} (each has a training loop; the largest "
                      f"was taken): edit `run` to train another") if loops[1:] else None


README_NAMES = ("README.md", "README.rst", "README.txt", "README", "readme.md", "Readme.md")
CONFIG_DIRS = ("config", "configs", "conf", "cfg")
CONFIG_EXTS = (".py", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini")
# file arguments whose absence makes a documented command fail as written
_FILE_EXTS = CONFIG_EXTS + (".txt", ".csv", ".jsonl", ".bin", ".npy", ".npz", ".pt", ".pkl")
_LAUNCHER = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*"
                       r"(?:(?:uv|poetry|pipenv|conda)\s+run\s+(?:-n\s+\S+\s+)?)?"
                       r"(python[0-9.]*|torchrun|accelerate\s+launch|deepspeed)\s")
_PROMPT = re.compile(r"^\s*(?:[$%>]|!|\(\w[\w.-]*\)\s*\$)\s*")
_INLINE = re.compile(r"`([^`\n]+)`")
# scripts and flags that do something other than train
_NOT_TRAINING = re.compile(r"(^|/)(sample|generate|gen|eval|evaluate|test|bench|benchmark|infer|inference|predict|"
                           r"prepare|preprocess|download|setup|demo|export|convert|plot|serve|app)[\w-]*\.py$")
_NOT_TRAINING_FLAGS = re.compile(r"^--?(sample|sample[-_]only|eval[-_]only|evaluate|eval|test|test[-_]only|"
                                 r"predict|inference|generate|export|resume)(=|$)")
_NOT_TRAINING_CONFIG = re.compile(r"(^|/)(eval|sample|test|bench)[\w-]*\.\w+$")
_CPU_FLAGS = re.compile(r"--device[= ](?:'|\")?cpu\b|--cpu\b|--no[-_]cuda\b|--accelerator[= ]cpu\b|"
                        r"--use[-_]cuda[= ](?:0|false|False)\b|CUDA_VISIBLE_DEVICES=(?:''|\"\"|-1)?(?:\s|$)")
_SMALL = re.compile(r"char|tiny|small|mini|debug|cpu|toy|nano", re.I)
_NPROC = re.compile(r"--nproc[-_]per[-_]node[= ](\d+)|--num[-_]processes[= ](\d+)|--num[-_]gpus[= ](\d+)")
_LAUNCH_WORD = re.compile(r"python[0-9.]*|torchrun|accelerate|deepspeed")
# `device = "cuda"`, not `device = "cuda" if torch.cuda.is_available() else "cpu"` (that one falls back)
_DEVICE_DEFAULT = re.compile(r"""^device\s*=\s*["']cuda[^"'\n]*["'](?![^\n#]*\bif\b)""", re.M)


@dataclass
class Command:
    cmd: str                       # as documented: prompt stripped, continuation lines joined
    where: str                     # "README.md:42", or "config/x.py (not in the README)"
    script: str | None = None      # the Python script it runs, relative to the repo root
    files: list[str] = field(default_factory=list)     # files it names (configs, data)
    missing: list[str] = field(default_factory=list)   # ... that are not in the repo
    documented: bool = True
    cpu: bool = False              # asks for the CPU explicitly
    nproc: int = 1                 # processes (GPUs) a launcher asks for

    @property
    def config(self) -> str | None:
        return next((f for f in self.files if f.endswith(CONFIG_EXTS) and f != self.script), None)


def readme_lines(root: Path) -> list[tuple[str, str]]:
    """(where, text) of every code-block line and inline code span of the README, continuation
    lines (a trailing backslash) joined."""
    readme = next((root / n for n in README_NAMES if (root / n).is_file()), None)
    if readme is None:
        return []
    out: list[tuple[str, str]] = []
    in_block, pending, start = False, "", 0
    for i, line in enumerate(readme.read_text(errors="replace").splitlines(), 1):
        if line.strip().startswith(("```", "~~~")):
            in_block, pending = not in_block, ""
            continue
        if in_block or line.startswith(("    ", "\t")):
            text = line.strip()
            if pending:
                text, i = pending + " " + text, start
            if text.endswith("\\"):
                pending, start = text[:-1].strip(), i
                continue
            pending = ""
            out.append((f"{readme.name}:{i}", text))
        else:
            out += [(f"{readme.name}:{i}", m) for m in _INLINE.findall(line)]
    return out


def _parse(root: Path, where: str, text: str, documented: bool = True) -> Command | None:
    text = _PROMPT.sub("", text, count=1).strip()
    m = _LAUNCHER.match(text + " ")
    if not m:
        return None
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return None
    at = next((i for i, w in enumerate(words) if _LAUNCH_WORD.fullmatch(w)), None)
    if at is None:
        return None
    c = Command(shlex.join(words), where, documented=documented)
    args = words[at + 1:]
    if words[at] == "accelerate" and args[:1] == ["launch"]:
        args = args[1:]
    if "-m" in args[:2] and len(args) > args.index("-m") + 1:     # python -m pkg.train
        mod = args[args.index("-m") + 1].replace(".", "/")
        c.script = next((p for p in (mod + ".py", mod + "/__main__.py") if (root / p).is_file()), mod + ".py")
    for w in args:
        for v in ([w.split("=", 1)[1]] if w.startswith("-") and "=" in w else [] if w.startswith("-") else [w]):
            if c.script is None and v.endswith(".py"):
                c.script = v.removeprefix("./")
            elif v.endswith(_FILE_EXTS) and "$" not in v and not v.startswith(("/", "~")):
                c.files.append(v.removeprefix("./"))
    if c.script is None:
        return None
    c.missing = [f for f in [c.script, *c.files] if not (root / f).is_file()]
    c.cpu = bool(_CPU_FLAGS.search(text))
    n = _NPROC.search(text)
    c.nproc = int(next(g for g in n.groups() if g)) if n else 1
    return c


def documented(root: Path) -> list[Command]:
    """Every Python command the README documents, in its order, each once."""
    seen, out = set(), []
    for where, text in readme_lines(root):
        c = _parse(root, where, text)
        if c and c.cmd not in seen:
            seen.add(c.cmd)
            out.append(c)
    return out


def is_training(c: Command) -> bool:
    if c.script is None or _NOT_TRAINING.search(c.script):
        return False
    if any(_NOT_TRAINING_FLAGS.match(w) for w in c.cmd.split()):
        return False
    return not (c.config and _NOT_TRAINING_CONFIG.search(c.config))


def config_files(root: Path) -> list[str]:
    """Config files in the repo's config directory (config/, configs/, conf/, cfg/), one level deep."""
    out = []
    for d in CONFIG_DIRS:
        if (root / d).is_dir():
            out += sorted(p.relative_to(root).as_posix() for p in (root / d).iterdir()
                          if p.is_file() and p.suffix in CONFIG_EXTS and not p.name.startswith(("_", ".")))
    return out


def from_configs(root: Path, train: str, named: set[str]) -> list[Command]:
    """A command for each config file no documented command names, in the form the training script
    takes it (`--config PATH` when it mentions --config, else the path as its first argument when it
    reads sys.argv), as undocumented alternatives."""
    text = (root / train).read_text(errors="replace") if (root / train).is_file() else ""
    if "--config" in text:
        form = "python {train} --config {cfg}"
    elif "sys.argv" in text or "configurator" in text:
        form = "python {train} {cfg}"
    else:
        return []
    out = []
    for cfg in config_files(root):
        if cfg not in named and not _NOT_TRAINING_CONFIG.search(cfg):
            c = _parse(root, f"{cfg} (not in the README: the form is a guess)",
                       form.format(train=shlex.quote(train), cfg=shlex.quote(cfg)), documented=False)
            if c:
                out.append(c)
    return out


def host_gpus() -> int:
    """CUDA devices visible here: none when CUDA_VISIBLE_DEVICES hides them all."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return 0
    return local_gpu_count()


def rank(cands: list[Command], gpus: int) -> list[Command]:
    def key(ic: tuple[int, Command]):
        i, c = ic
        if gpus == 0:
            fits = (c.nproc <= 1) + c.cpu + bool(c.config and _SMALL.search(Path(c.config).name))
        else:
            fits = (c.nproc <= gpus) + (not c.cpu)
        return (not c.missing, c.documented, fits, -i)
    return [c for _, c in sorted(enumerate(cands), key=key, reverse=True)]


def run_candidates(root: Path, train: str | None, gpus: int) -> list[Command]:
    """The ranked training commands: the README's, then one per undocumented config file."""
    docs = [c for c in documented(root) if is_training(c)]
    named = {f for c in docs for f in c.files}
    train = train or (docs[0].script if docs else None)
    extra = from_configs(root, train, named) if train else []
    return rank(docs + extra, gpus)


def prepare_command(root: Path, scripts: list[str], run: Command | None) -> tuple[str | None, str, list[str]]:
    """(the prepare command or None, why, the scripts it could be). The README's command for a
    prepare script wins; else the one script whose directory the run or its config names, run plainly
    when it takes no arguments. None when it cannot tell (then `why` says so)."""
    if not scripts:
        return None, "", []
    docs = {c.script: c for c in documented(root) if c.script in scripts}
    hay = run.cmd if run else ""
    if run and run.config and (root / run.config).is_file():
        hay += "\n" + (root / run.config).read_text(errors="replace")
    named = [s for s in scripts if Path(s).parent.name
             and re.search(rf"(?<![\w/-]){re.escape(Path(s).parent.name)}(?![\w-])", hay)]
    pick = named[0] if len(named) == 1 else (scripts[0] if len(scripts) == 1 else None)
    if pick is None and len(docs) == 1:
        pick = next(iter(docs))
    if pick is None:
        return None, (f"{len(scripts)} prepare scripts and nothing says which the run needs: "
                      f"uncomment the one it needs"), scripts
    if pick in docs:
        return docs[pick].cmd, f"documented at {docs[pick].where}", scripts
    text = (root / pick).read_text(errors="replace")
    if re.search(r"required\s*=\s*True|sys\.argv\[1\]|add_argument\(\s*['\"][^-]", text):
        return None, f"{pick} takes arguments that adopt cannot guess: fill in its command", scripts
    return f"python {shlex.quote(pick)}", f"{pick} takes no arguments", scripts


def cpu_option(root: Path, c: Command) -> str | None:
    """The option that puts a training script that defaults to CUDA on the CPU, when adopt can tell
    how the script takes it: `--device=cpu` for a nanoGPT-style configurator (`--key=value` overrides
    of its globals), `--device cpu` for argparse. None when it cannot tell."""
    text = (root / c.script).read_text(errors="replace") if c.script and (root / c.script).is_file() else ""
    if c.cpu or not _DEVICE_DEFAULT.search(text):
        return None
    if re.search(r"add_argument\(\s*['\"]--device['\"]", text):
        return "--device cpu"
    if "configurator" in text or re.search(r"exec\(open\(", text):
        return "--device=cpu"
    return None


_SEED_OPTION = re.compile(r"""add_argument\(\s*(?:['"]-\w['"]\s*,\s*)?['"](--(?:random[-_])?seed)['"]""")
_ENDLESS = re.compile(r"""add_argument\(\s*(?:['"]-\w['"]\s*,\s*)?['"](--(?:max|num|n|total)?[-_]?"""
                      r"""(?:steps|iters|iterations|epochs|train[-_]steps))['"][^\n]*default\s*=\s*(-1|None)\b""")


def seed_option(root: Path, c: Command) -> str | None:
    """`--seed "$AUTORESEARCH_SEED"` when the script takes a --seed option (argparse) that the command
    does not set: every trial then seeds from its own seed without a code change."""
    text = (root / c.script).read_text(errors="replace") if c.script and (root / c.script).is_file() else ""
    m = _SEED_OPTION.search(text)
    if not m or re.search(rf"(^|\s){re.escape(m.group(1))}(=|\s|$)", c.cmd):
        return None
    return f'{m.group(1)} "$AUTORESEARCH_SEED"'


def endless(root: Path, c: Command) -> str | None:
    """A length option (--max-steps, --epochs, ...) that defaults to -1 or None, when the command does
    not set it: such a run may train until its time budget kills it."""
    text = (root / c.script).read_text(errors="replace") if c.script and (root / c.script).is_file() else ""
    for m in _ENDLESS.finditer(text):
        if not re.search(rf"(^|\s){re.escape(m.group(1))}(=|\s|$)", c.cmd):
            return f"{m.group(1)} (default {m.group(2)})"
    return None


def data_files(c: Command) -> list[str]:
    """The data files a command names (not scripts, not configs): frozen, so ideas cannot edit the data
    and the evaluator finds it beside itself."""
    return [f for f in c.files if not f.endswith(CONFIG_EXTS) and f not in c.missing]


_OPEN_LITERAL = re.compile(r"""\bopen\(\s*["']([^"'\n]+)["']""")


def read_files(root: Path, script: str | None) -> list[str]:
    """The repo's data files the training script opens by a literal name (`open('input.txt')`):
    frozen like the files a command names, so the evaluator finds the held-out text beside itself."""
    if not script or not (root / script).is_file():
        return []
    names = _OPEN_LITERAL.findall((root / script).read_text(errors="replace"))
    return sorted({n.removeprefix("./") for n in names if n.endswith(_FILE_EXTS) and not n.endswith(CONFIG_EXTS)
                   and not n.startswith(("/", "..")) and (root / n).is_file()})


def defaults_to_cuda(root: Path, script: str | None) -> bool:
    return bool(script and (root / script).is_file() and _DEVICE_DEFAULT.search((root / script).read_text(errors="replace")))


def user_python() -> tuple[str | None, str | None]:
    """(`python` on PATH, the setup that activates it) when it lives in another environment than the
    interpreter running adopt: the local runner puts the daemon's interpreter first on the trials'
    PATH, so without this setup trials would run without the packages the user installed."""
    exe = shutil.which("python") or shutil.which("python3")
    if exe is None:
        return None, None
    mine, theirs = Path(sys.executable).parent, Path(exe).parent
    # a pyenv/asdf shim is no environment of its own: nothing to activate
    if mine == theirs or mine.resolve() == theirs.resolve() or not (theirs.parent / "pyvenv.cfg").is_file() \
            and not (theirs.parent / "conda-meta").is_dir():
        return None, None
    act = theirs / "activate"
    return exe, (f"source {shlex.quote(str(act))}" if act.is_file() else f'export PATH={shlex.quote(str(theirs))}:"$PATH"')


def branch(root: Path) -> str:
    """The branch checked out in the repo adopt reads: the baseline."""
    try:
        return GitRepo(root).git("symbolic-ref", "-q", "--short", "HEAD", check=False).strip() or "main"
    except GitError:
        return "main"
