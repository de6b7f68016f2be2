"""Which Python a trial really runs on a host, and what its sandbox must bind for it.

A version manager puts a *shim* first on PATH: pyenv's and asdf's are bash scripts that call the
manager's own directory (~/.pyenv/libexec, ~/.asdf/bin), mise's are links to the `mise` binary, and
each then picks a version from files under $HOME or the working directory. Inside a sandbox none of
that is there (HOME is the trial's directory), so `python` exited 127 with no word why. Binding the
manager's whole root would not make it right either: the shim would then choose a version from the
trial's HOME and cwd (a `.python-version` in the research repo), mise writes to its state directory,
and every installed version would be exposed. So the interpreter is resolved once per host, OUTSIDE
the sandbox, by running the trial PATH's `python` / `python3` (or `runner.python`) through its shim;
it reports `sys.executable`, its prefixes and `sys.path`, and then:

- those directories (and their real paths, as a link may point elsewhere) are bound read-only: the
  executable's directory, `sys.prefix`, `sys.exec_prefix`, `sys.base_prefix` (a venv's
  pyvenv.cfg `home`), the base executable's directory, site-packages and every other `sys.path`
  entry (a .pth file's directory, an editable install), never $HOME itself or a directory above it;
- when the PATH's `python` is not the interpreter itself (a shim, a link to a manager) or the
  interpreter was named in the config, its directory goes first on the trial's PATH, so `python`,
  `python3`, `pip` and the env's console scripts inside are the resolved ones, not the shim.

A venv and a conda env need no shim: their `bin` is on PATH and the same binds make their base
interpreter visible. `doctor --run` runs `check_script` inside the sandbox on every host, and a
trial that exits 127 gets `not_found`'s message (which command, and what to do).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from autoresearchd import defaults

MARK = "AR-INTERP "

# What the interpreter says about itself (Python 2 compatible: `python` may still be one somewhere).
# -s (in the probe) leaves out the user site: inside, HOME is the trial's, so it is not there either.
PYCODE = r"""import sys, os, json
try:
    import site; sp = list(site.getsitepackages())
except Exception:
    sp = []
try:
    import importlib.util as u; torch = u.find_spec("torch") is not None
except Exception:
    torch = False
ex = sys.executable
base = getattr(sys, "_base_executable", ex) or ex
keys = [os.path.dirname(ex), os.path.dirname(base), sys.prefix, sys.exec_prefix,
        getattr(sys, "base_prefix", sys.prefix), getattr(sys, "base_exec_prefix", sys.exec_prefix)]
dirs = []
for d in keys + sp + [p for p in sys.path if p]:
    for x in (d, os.path.realpath(d)):
        if os.path.isabs(x) and os.path.exists(x) and x not in dirs:
            dirs.append(x)
print("AR-INTERP " + json.dumps({"executable": ex, "real": os.path.realpath(ex), "prefix": sys.prefix,
      "base_prefix": getattr(sys, "base_prefix", sys.prefix), "version": "%d.%d.%d" % sys.version_info[:3],
      "path": [p for p in sys.path if p], "dirs": dirs, "torch": torch}))
"""

# Variables of the caller's login that a trial never gets (trial.sh starts it with `env -i`).
_UNSET = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONSTARTUP", "PYTHONSAFEPATH", "PYTHONNOUSERSITE")


def probe_script(python: str | None) -> str:
    """Bash (PATH already set to the trial's) printing one `interp NAME\\tCOMMAND\\tREAL\\tOUTPUT`
    line per interpreter: `python` and `python3` on PATH, or only `python` (a path, `~/x`, or a name
    on PATH). OUTPUT is what it printed, newlines as \\x1f. Run from $HOME, where the trials' work
    root is by default, so a `.python-version` there counts as it would for the user."""
    unset = " ".join(f"-u {v}" for v in _UNSET)
    if python:
        pick = (f"p={shlex.quote(python)}; case $p in '~/'*) p=$HOME/${{p#'~/'}};; esac; "
                'case $p in /*) ;; *) p=$(command -v -- "$p") || p=$p;; esac; set -- "python=$p"')
    else:
        pick = 'set --; for n in python python3; do p=$(command -v -- "$n") && set -- "$@" "$n=$p"; done'
    return (pick + "\nfor x in \"$@\"; do n=${x%%=*} p=${x#*=}\n"
            "  o=$( (cd ~ 2>/dev/null || cd /; exec env " + unset + " \"$p\" -s -c " + shlex.quote(PYCODE) +
            ") 2>&1 < /dev/null | tail -n 20 | tr '\\n' '\\037')\n"
            "  printf 'interp %s\\t%s\\t%s\\t%s\\n' \"$n\" \"$p\" \"$(readlink -f -- \"$p\" 2>/dev/null)\" \"$o\"\n"
            "done")


@dataclass
class Interp:
    """One interpreter as found on a host's trial PATH and as it describes itself."""
    name: str                      # python | python3
    command: str                   # what PATH (or runner.python) gave: maybe a shim
    real_command: str              # its real path (a shim's own file, or a link's target)
    info: dict = field(default_factory=dict)   # PYCODE's report; empty when it did not start
    error: str = ""                # its output when it did not report

    @property
    def executable(self) -> str:
        return self.info.get("executable", "")

    @property
    def bin_dir(self) -> str:
        return self.executable.rsplit("/", 1)[0] if self.executable else ""

    @property
    def shim(self) -> bool:
        """The command is not the interpreter (a version manager's shim or wrapper)."""
        return bool(self.info) and self.real_command != self.info.get("real")


@dataclass
class Python:
    """The interpreters trials run on one host, resolved outside the sandbox."""
    found: list[Interp]
    explicit: str | None = None    # runner.python / the host's `python`, when set

    @property
    def ok(self) -> list[Interp]:
        return [i for i in self.found if i.info]

    def error(self) -> str | None:
        """Why the named interpreter cannot be used (None when it can, or none was named)."""
        if self.explicit and not self.ok:
            i = self.found[0] if self.found else None
            why = i.error.replace("\x1f", " ").strip() if i else "not found"
            return f"python = {self.explicit!r} did not start: {why or 'no output'}"
        return None

    def binds(self, home: str) -> list[str]:
        """Directories to bind read-only: each interpreter's, less $HOME, anything above it, and
        defaults.SANDBOX_NEVER_BIND."""
        home = home.rstrip("/")
        out: list[str] = []
        for i in self.ok:
            for d in i.info.get("dirs", []):
                d = d.rstrip("/")
                if not d.startswith("/") or (home and (home == d or home.startswith(d + "/"))) or d in out \
                        or (d or "/") in defaults.SANDBOX_NEVER_BIND:
                    continue
                if any(d == s or d.startswith(s + "/") for s in defaults.SANDBOX_SYSTEM_DIRS):
                    continue
                out.append(d)
        # a directory inside another bound one is covered by it
        return [d for d in out if not any(d.startswith(o + "/") for o in out)]

    def front(self) -> list[str]:
        """Directories to put first on the trial's PATH: the resolved interpreters' own, when PATH
        would otherwise find a shim (or runner.python named one)."""
        out: list[str] = []
        for i in self.ok:
            if (i.shim or self.explicit) and i.bin_dir and i.bin_dir not in out:
                out.append(i.bin_dir)
        return out

    def path(self, prefix: str) -> str:
        """The trial's PATH: `prefix` (the runner's, `$PATH` possibly inside) after front()."""
        return ":".join(self.front() + [prefix]) if self.front() else prefix

    def describe(self) -> str:
        """One line for doctor: what `python` is on this host and how it was found."""
        if not self.found:
            return "no python or python3 on the trials' PATH"
        parts = []
        for i in self.found:
            if not i.info:
                parts.append(f"{i.name} = {i.command} does not start ({i.error.replace(chr(31), ' ').strip()[-200:]})")
            else:
                how = f" (via {i.command})" if i.shim else ""
                torch = ", torch" if i.info.get("torch") else ""
                parts.append(f"{i.name} = {i.executable}{how}: Python {i.info.get('version')}{torch}")
        return "; ".join(parts)


def parse(lines: list[str], explicit: str | None = None) -> Python:
    """The `interp ...` lines of probe_script's output."""
    found = []
    for ln in lines:
        if not ln.startswith("interp "):
            continue
        parts = ln[7:].split("\t", 3)
        if len(parts) < 4:
            continue
        name, cmd, real, out = parts
        info, err = {}, out
        for chunk in out.split("\x1f"):
            if chunk.startswith(MARK):
                try:
                    info, err = json.loads(chunk[len(MARK):]), ""
                except ValueError:
                    pass
        found.append(Interp(name, cmd, real or cmd, info, err))
    return Python(found, explicit)


# -- exit 127 --------------------------------------------------------------------------------------
# bash, dash and env say which command they could not find; the last such line is the one that ended
# the step (a shim's own failure names the file it called: pyenv's libexec, asdf's bin, mise).
_NOT_FOUND = re.compile(
    r"^(?P<who>[^\n:]+): (?:line \d+: |\d+: )?(?:(?P<script>[^\n:]+): (?P<interp>[^\n:]+): bad interpreter: "
    r"No such file or directory|'?(?P<what>[^\n:']+)'?: (?:command not found|not found|No such file or directory))$",
    re.M)

HINT_127 = ("inside the sandbox only the system directories, the resolved Python environment, the data and "
            "runner.sandbox_binds exist (docs/operations.md, \"Exit 127\"): set `python` (runner.python, or the "
            "host's in [[runner.hosts]]) to the interpreter the trials need, add the command's directory to "
            "runner.sandbox_binds, or install it in env.setup; `autoresearchd doctor --run` checks each host")


def not_found(log: str, step: str = "run") -> str:
    """The error for a step that exited 127: which command was not found, by whom, and what to do."""
    hits = list(_NOT_FOUND.finditer(log))
    if not hits:
        return f"{step} exited 127 (a command was not found); {HINT_127}"
    h = hits[-1]
    what = (h.group("interp") or h.group("what")).strip()
    who = (h.group("script") or h.group("who")).strip()
    by = f" (called by {who})" if who.startswith(("/", "./")) and who != what else ""
    if h.group("interp"):
        by = f" (the interpreter of {who})"
    return f"{step} exited 127: `{what}` was not found where the trial runs{by}; {HINT_127}"


# -- doctor --run: the interpreter inside the sandbox -------------------------------------------------
def first_words(*commands: str | None) -> list[str]:
    """The command each shell line starts with (after VAR=value assignments), when it is a name to
    look up on PATH (a path such as ./train.sh is the repo's own)."""
    out: list[str] = []
    for cmd in commands:
        if not cmd:
            continue
        try:
            words = shlex.split(cmd)
        except ValueError:
            words = cmd.split()
        w = next((x for x in words if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", x)), "")
        w = re.split(r"[;&|()<>]", w)[0]
        if w and "/" not in w and w not in out:
            out.append(w)
    return out


def inside_script(names: list[str], torch: list[str], words: list[str]) -> str:
    """Bash run inside the sandbox: each interpreter's report (as probe_script's), `torch NAME ok|...`
    for those whose outside twin has torch, `nocmd W` for each first word that does not resolve."""
    q = shlex.quote
    s = "set -o pipefail\n"      # a step's status, not that of the `tail` after it
    for n in names:
        s += (f"if p=$(command -v -- {q(n)}); then o=$({q(n)} -s -c {q(PYCODE)} 2>&1 < /dev/null | tail -n 20 | "
              f"tr '\\n' '\\037'); printf 'interp %s\\t%s\\t%s\\t%s\\n' {q(n)} \"$p\" \"$(readlink -f -- \"$p\")\" \"$o\"; "
              f"else echo missing {q(n)}; fi\n")
    for n in torch:
        s += (f"o=$({q(n)} -c 'import torch; print(torch.__version__)' 2>&1 < /dev/null | tail -n 1 | tr '\\n' ' ') "
              f"&& echo torch {q(n)} ok || printf 'torch %s %s\\n' {q(n)} \"$o\"\n")
    for w in words:
        s += f"command -v -- {q(w)} > /dev/null || echo nocmd {q(w)}\n"
    return s
