"""The population's parse caches kept on disk, so a daemon that starts on 100k ideas does not parse
100k commits and 100k notes again (most of a cold read: 8 of its 13 s of CPU at 100k ideas).

What is kept: for each commit and note blob the process parsed (population._IDEAS, _NOTES), the plain
data of its parse, keyed by object id, in one `marshal` file under the daemon's state dir (marshal
holds only plain data: loading it runs no code, unlike pickle). An object never changes, so an entry
is right as long as the code that parsed it is the same; the file is therefore:
- invalidated by a code change: its header names a hash of the parsing modules' source, the pydantic
  and Python versions; another hash and the file is ignored;
- verified when loaded: a sample of its entries (defaults.PARSE_CACHE_CHECKS) is parsed again from
  git and must equal what the file holds, or the whole file is ignored;
- ignored when unreadable (truncated, another format); written whole to a temporary file then
  renamed, so a crash leaves the old file or the new one, never half of one.
Only the daemon writes it (at its full reads); any reader may load it.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import random
import sys
import typing
from enum import Enum
from pathlib import Path
from types import MappingProxyType

import pydantic

from autoresearchd import defaults
from autoresearchd.store import frozen, ideas, notes, population, trailers
from autoresearchd.store.frozen import _EMPTY_DICT, _EMPTY_LIST, _LEAF, FrozenDict, FrozenList, FrozenNote, FrozenTrial
from autoresearchd.store.gitrepo import GitRepo, state_dir
from autoresearchd.store.trailers import Trailers
from autoresearchd.vocab import Origin, known

FILE = "parsed.marshal"
_TRIAL = "\0trial"              # marks a nested Trial in the plain form (no note field holds it)
_ENUMS = {cls.__name__: cls for cls in (notes.Status, notes.Decision, notes.Origin, notes.DeltaKind)}  # a note's enums


def code_hash() -> str:
    """What an entry depends on besides its object: the parsers' source and the libraries."""
    h = hashlib.sha256(f"{sys.version}\0{pydantic.VERSION}".encode())
    for mod in (frozen, ideas, notes, population, trailers, sys.modules[__name__]):
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()


def _plain(v):
    """A value's plain form (scalars are taken as they are by the callers: a call per field was most of
    a save, 8.7 s of CPU at 100k ideas)."""
    if isinstance(v, FrozenTrial):
        return (_TRIAL, *_compact(v))
    if isinstance(v, Enum):
        return (type(v).__name__, v.value)
    if isinstance(v, list):
        return [x if type(x) in _LEAF else _plain(x) for x in v]
    if isinstance(v, dict):
        return _fields(v)
    if type(v) in _LEAF:
        return v
    raise TypeError(type(v))        # a type this file cannot hold: not saved (save() says why)


def _fields(d: dict) -> dict:
    return {k: x if type(x) in _LEAF else _plain(x) for k, x in d.items()}


class _Shape:
    """What a frozen model of one class is rebuilt from besides its own data: the defaults of its
    fields (a template copied whole: its empty lists and dicts are the shared frozen ones, and a
    required field's place is held by None so the fields keep the model's order), the fields that may
    hold a list, a dict or a model (built from their plain form), and its enum fields (saved as their
    word, found again in the enum's value map)."""

    def __init__(self, model):
        self.template = {name: (None if f.is_required() else _EMPTY_LIST if f.default_factory is list
                                else _EMPTY_DICT if f.default_factory is dict else f.default)
                         for name, f in model.model_fields.items()}
        self.nested = frozenset(frozen._mutable_fields(model))
        self.enums = tuple((name, a) for name, f in model.model_fields.items()
                           for a in (f.annotation, *typing.get_args(f.annotation))
                           if isinstance(a, type) and issubclass(a, Enum))


_SHAPES = {FrozenNote: _Shape(notes.Note), FrozenTrial: _Shape(notes.Trial)}


def _compact(m) -> tuple:
    """(the fields that differ from the defaults, the extras, the fields set) of a frozen model, each
    value plain; an enum field's member as its word. Rebuilding it (`_model`) is one dict merge and a
    few look-ups instead of a call per field: 3.9 s of a restart's 9.2 at 100k ideas went to
    rebuilding the notes field by field (docs/benchmarks.md)."""
    tmpl = _SHAPES[type(m)].template
    d = {}
    for k, v in m.__dict__.items():
        if v is tmpl.get(k, _TRIAL):
            continue
        d[k] = v if type(v) in _LEAF else v.value if isinstance(v, Enum) else _plain(v)
    extra = m.__pydantic_extra__
    return d, _fields(extra) if extra is not None else None, sorted(m.__pydantic_fields_set__)


def _model(cls, d: dict, extra: dict | None, fields_set: list):
    """A frozen model from its plain data, built frozen (no validation: it was validated when parsed)."""
    shape = _SHAPES[cls]
    full = {**shape.template, **d}
    for k in shape.nested.intersection(d):
        v = full[k]
        if type(v) not in _LEAF:
            full[k] = _build(v)
    for k, enum in shape.enums:
        v = full.get(k)
        if type(v) is str:          # a word the enum knows was read as its member when parsed
            full[k] = enum._value2member_map_.get(v, v)
    m = object.__new__(cls)
    object.__setattr__(m, "__dict__", full)
    object.__setattr__(m, "__pydantic_extra__", {k: x if type(x) in _LEAF else _build(x) for k, x in extra.items()}
                       if extra is not None else None)
    object.__setattr__(m, "__pydantic_fields_set__", set(fields_set))
    object.__setattr__(m, "__pydantic_private__", None)
    return m


def _build(v):
    t = type(v)
    if t is tuple:     # a nested trial, or an enum member (found in its value map: calling the enum is slow)
        return _model(FrozenTrial, *v[1:]) if v[0] == _TRIAL else _ENUMS[v[0]]._value2member_map_[v[1]]
    if t is list:
        return FrozenList([x if type(x) in _LEAF else _build(x) for x in v]) if v else _EMPTY_LIST
    if t is dict:
        return FrozenDict({k: x if type(x) in _LEAF else _build(x) for k, x in v.items()}) if v else _EMPTY_DICT
    return v


def note_plain(n: FrozenNote) -> tuple:
    return _compact(n)


def note_from(p: tuple) -> FrozenNote:
    return _model(FrozenNote, *p)


def idea_plain(fields) -> dict:
    tr = fields["trailers"]
    return dict(fields, trailers=(dict(tr.__dict__), sorted(tr.__pydantic_fields_set__)))


def idea_from(p: dict) -> MappingProxyType:
    tr = object.__new__(Trailers)
    object.__setattr__(tr, "__dict__", dict(p["trailers"][0]))
    object.__setattr__(tr, "__pydantic_extra__", None)
    object.__setattr__(tr, "__pydantic_fields_set__", set(p["trailers"][1]))
    object.__setattr__(tr, "__pydantic_private__", None)
    return MappingProxyType(dict(p, trailers=tr))


def size() -> int:
    """Entries the process's parse caches hold now."""
    return len(population._NOTES) + len(population._IDEAS)


def save(repo: GitRepo) -> int:
    """Write the process's parse caches to the state dir; returns the number of entries."""
    with population.bulk():
        return _save(repo)


def _save(repo: GitRepo) -> int:
    body = {"code": code_hash(),
            "notes": {k: note_plain(v) for k, v in population._NOTES.items() if v is not None},
            "ideas": {k: idea_plain(v) for k, v in population._IDEAS.items()}}
    path = state_dir(repo) / FILE
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(marshal.dumps(body))
    os.replace(tmp, path)
    return len(body["notes"]) + len(body["ideas"])


def load(repo: GitRepo, checks: int = defaults.PARSE_CACHE_CHECKS) -> int:
    """Fill the process's parse caches from the state dir's file, if it is this code's and a sample
    of it parses the same from git again; returns the number of entries taken (0: none)."""
    with population.bulk():
        return _load(repo, checks)


def _load(repo: GitRepo, checks: int) -> int:
    path = state_dir(repo, create=False) / FILE
    try:
        body = marshal.loads(path.read_bytes())
        if body.get("code") != code_hash():
            return 0
        pn, pi = body["notes"], body["ideas"]
    except (OSError, ValueError, EOFError, TypeError, AttributeError, KeyError):
        return 0
    rng = random.Random()
    sample_n = rng.sample(sorted(pn), min(checks, len(pn)))
    sample_i = rng.sample(sorted(pi), min(checks, len(pi)))
    objs = repo.cat_file_batch(sample_n + sample_i)
    try:
        for k in sample_n:
            if k not in objs or notes.parse_note(objs[k].decode(errors="replace")) != note_from(pn[k]):
                return 0
        for k in sample_i:
            if k not in objs or dict(population._parse_idea(k, objs[k])) != dict(idea_from(pi[k])):
                return 0
        for k, p in pn.items():
            population._NOTES.get_or(k, lambda p=p: note_from(p))
        for k, p in pi.items():
            population._IDEAS.get_or(k, lambda p=p: idea_from(p))
    except (TypeError, ValueError, KeyError, IndexError):
        return 0
    return len(pn) + len(pi)
