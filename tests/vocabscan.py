"""The vocabulary scan of tests/test_vocab.py (issue 28): where the project spells a vocabulary word as a
literal string instead of a member of daemon/vocab.py's enums.

It reads the AST of daemon/, policies/ and runners/ and flags a string constant that is a value
of the vocabulary enum its position names. A position names an enum by a *key*: the last name of an
attribute, variable, subscript key, `.get` key, keyword or parameter (`.value` and
`getattr(x, "value", x)` are looked through), one of

    decision -> Decision   status -> Status   origin -> Origin   purpose -> Purpose
    state -> LeaseState, HostState or SlotState (a lease's, a host's, a slot's)

and the positions are (each flagged only where the constant is a value of the key's enum, so the
dashboard's `status="baseline"`, a view's own word, is not flagged):

- a comparison of a keyed expression with a constant or a tuple/list/set of constants:
  `x.decision == "promoted"`, `lz.state in ("done", "stale")`, `i.origin != "human"`;
- an assignment, annotated assignment (a field default), keyword argument or dict entry to a key:
  `lz.state = "done"`, `state: str = "running"`, `Note(origin="human")`, `{"status": "queued"}`;
- a positional argument bound to a parameter named by a key of a project function or dataclass
  (`seeds_needed(note, "baseline", ...)`), `getattr(x, "state", "running")`, `.get("Origin", "seed")`;
- a return from a function named after a key (`decide` -> Decision, `*status*` -> Status, ...);
- a container (tuple, list, set, or a dict's keys) of two or more constants that are all values of one
  enum: `PREFERRED = ("promoted", "confirmed")`, `{"baseline": 0, "confirm": 2, "idea": 3}`.

A constant reaches these positions through conditional expressions (`a if c else "idea"`), `or`/`and`
and tuples, never through calls or subscripts. Strings that merely look alike (a dict key
`"running"`, the runner's own poll states, the failures view's group names) are not in such a
position and are not flagged.

Two more rules catch what a key cannot name:

- a keyed comparison with a word of another vocabulary enum is dead code: `n.decision == "suspicious"`
  (a status, never a decision) is flagged wherever it is;
- in the code that judges and shows ideas (daemon/engine/, daemon/views/, policies/: UNKEYED), a
  status, decision, host or slot state word is flagged in any comparison and any return, whatever the
  name (`st == "duplicate"`, `return "implement_failed"`), and in a container holding two or more of
  them (`GROUPS = ("timed_out", "crashed", "rejected")`). A view's or an event's own word that happens
  to be spelled like one (a CSS class "worse", a screening rule "failed") says so on its line with a
  `# own word: ...` comment, which the scan passes over.
"""

from __future__ import annotations

import ast
from pathlib import Path

from autoresearchd.vocab import Decision, HostState, LeaseState, Origin, Purpose, SlotState, Status

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("daemon", "policies", "runners")
VOCAB_FILE = Path("daemon/vocab.py")

KEY_ENUM = {"decision": (Decision,), "status": (Status,), "state": (LeaseState, HostState, SlotState),
            "origin": (Origin,), "purpose": (Purpose,)}
ENUMS = (Status, Decision, LeaseState, Origin, Purpose, HostState, SlotState)
VALUES = {e: {m.value for m in e} for e in ENUMS}
# a function's name says what it returns: decide() returns a Decision
FUNC_KEY = (("decide", "decision"), ("decision", "decision"), ("status", "status"), ("state", "state"),
            ("origin", "origin"), ("purpose", "purpose"))
# where any comparison or return of these words is flagged, keyed or not (the module docstring)
UNKEYED = ("daemon/engine/", "daemon/views/", "policies/")
UNKEYED_ENUMS = (Status, Decision, HostState, SlotState)
OWN_WORD = "# own word:"

def _key(node: ast.AST) -> str | None:
    """The key an expression names (lower case), looking through `.value`, `getattr(x, "value", ...)`
    and `x or ""`."""
    if isinstance(node, ast.Attribute):
        return _key(node.value) if node.attr == "value" else node.attr.lower()
    if isinstance(node, ast.Name):
        return node.id.lower()
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value.lower()
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and node.args:
        return _key(node.args[0])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args \
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value.lower()           # row.get("state"), as row["state"]
    if isinstance(node, ast.BoolOp):
        return next((k for k in map(_key, node.values) if k in KEY_ENUM), None)
    return None


def _consts(node: ast.AST):
    """The string constants an expression may evaluate to (through if/else, or/and, tuples)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, ast.IfExp):
        yield from _consts(node.body)
        yield from _consts(node.orelse)
    elif isinstance(node, ast.BoolOp):
        for v in node.values:
            yield from _consts(v)
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for v in node.elts:
            yield from _consts(v)


def _signatures(trees: dict[Path, ast.AST]) -> dict[str, list[str] | None]:
    """Positional parameter names of every project function and dataclass-like class, by name (None
    where two definitions disagree)."""
    sigs: dict[str, list[str] | None] = {}

    def put(name: str, params: list[str]) -> None:
        sigs[name] = params if sigs.get(name, params) == params else None

    for tree in trees.values():
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = [a.arg for a in n.args.posonlyargs + n.args.args]
                put(n.name, params[1:] if params[:1] in (["self"], ["cls"]) else params)
            elif isinstance(n, ast.ClassDef):
                fields = [s.target.id for s in n.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
                if fields:
                    put(n.name, fields)
    return sigs


def _member(value: str, enums) -> str | None:
    """`Enum.MEMBER` for the first of `enums` that has `value`, else None."""
    enum = next((e for e in enums if value in VALUES[e]), None)
    return None if enum is None else f"{enum.__name__}.{enum(value).name}"


def _hits(path: Path, tree: ast.AST, sigs: dict, unkeyed: bool = False) -> list[tuple[int, str, str]]:
    out: list[tuple[int, str, str]] = []

    def flag(key: str | None, value: ast.AST, why: str, compared: bool = False) -> None:
        enums = KEY_ENUM.get(key or "")
        if enums is None:
            return
        for c in _consts(value):
            member = _member(c.value, enums)
            if member:
                out.append((c.lineno, c.value, f"{why} ({key} -> {member})"))
            elif compared and (other := _member(c.value, ENUMS)):
                out.append((c.lineno, c.value, f"{why} as a {key}, but it is {other}: a dead comparison"))

    def any_word(value: ast.AST, why: str) -> None:
        for c in _consts(value):
            member = _member(c.value, UNKEYED_ENUMS)
            if member:
                out.append((c.lineno, c.value, f"{why} ({member})"))

    def container(elts: list[ast.AST], lineno: int, why: str) -> None:
        vals = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if unkeyed and why == "container":           # a dict's keys are a payload's field names
            words = {v for v in vals if _member(v, UNKEYED_ENUMS)}
            if len(words) >= 2:
                out.extend((lineno, v, f"{why} holding {_member(v, UNKEYED_ENUMS)}") for v in sorted(words))
                return
        if len(set(vals)) < 2 or len(vals) != len(elts):     # a (key, word) pair is no vocabulary
            return
        for enum in ENUMS:
            if all(v in VALUES[enum] for v in vals):
                out.extend((lineno, v, f"{why} of {enum.__name__} values") for v in vals)
                return

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for a, b in zip(sides, sides[1:]):
                flag(_key(a), b, "compared", compared=True)
                flag(_key(b), a, "compared", compared=True)
                if unkeyed and not KEY_ENUM.get(_key(a) or "") and not KEY_ENUM.get(_key(b) or ""):
                    any_word(a, "compared")
                    any_word(b, "compared")
        elif unkeyed and isinstance(node, ast.Return) and node.value is not None:
            any_word(node.value, "returned")
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for tt, vv in zip(t.elts, node.value.elts):
                        flag(_key(tt), vv, "assigned")
                else:
                    flag(_key(t), node.value, "assigned")
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            flag(_key(node.target), node.value, "assigned")
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    flag(k.value.lower(), v, "dict entry")
            container(node.keys, node.lineno, "dict keys")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            container(node.elts, node.lineno, "container")
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg:
                    flag(kw.arg.lower(), kw.value, "keyword")
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if fn == "getattr" and len(node.args) == 3 and isinstance(node.args[1], ast.Constant):
                flag(str(node.args[1].value).lower(), node.args[2], "getattr default")
            elif fn == "get" and len(node.args) == 2 and isinstance(node.args[0], ast.Constant):
                flag(str(node.args[0].value).lower(), node.args[1], ".get default")
            elif fn in sigs and sigs[fn]:
                for p, a in zip(sigs[fn], node.args):
                    flag(p.lower(), a, f"argument to {fn}()")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            key = next((k for word, k in FUNC_KEY if word in node.name.lower()), None)
            if key is not None:
                for r in ast.walk(node):
                    if isinstance(r, ast.Return) and r.value is not None:
                        flag(key, r.value, f"returned by {node.name}()")
    return sorted(set(out))


def scan(root: Path = ROOT) -> list[str]:
    """Every literal spelling of a vocabulary value in a vocabulary position, as `file:line: ...`."""
    files = sorted(p for d in SCANNED for p in (root / d).rglob("*.py") if p.relative_to(root) != VOCAB_FILE)
    trees = {p: ast.parse(p.read_text(), str(p)) for p in files}
    sigs = _signatures(trees)
    found = []
    for p, tree in trees.items():
        rel = p.relative_to(root).as_posix()
        lines = p.read_text().splitlines()
        for line, value, why in _hits(p, tree, sigs, unkeyed=rel.startswith(UNKEYED)):
            if OWN_WORD in lines[line - 1]:
                continue
            found.append(f"{rel}:{line}: {value!r} {why}: {lines[line - 1].strip()}")
    return found
