"""Immutable forms of parsed git objects, for the process-wide caches in population.py.

A parsed note is shared by every population read while its blob is cached (and by every idea object
the live dashboard reuses), so a caller that changed one in place would change what every other
reader sees. The caches therefore hold frozen forms: a `FrozenNote` (and its `FrozenTrial`s) refuses
attribute assignment, and its lists and dicts refuse every in-place change. A caller that needs to
change a note calls `model_copy()`, which returns an ordinary, mutable `Note`. A frozen note equals
the mutable note with the same fields, serialises the same, and `copy.deepcopy` returns it as is.
"""

from __future__ import annotations

import types
import typing
from enum import Enum
from typing import ClassVar

from pydantic import ConfigDict

from autoresearchd.store.notes import Note, Trial


def _refuse(self, *args, **kwargs):
    raise TypeError(f"a cached {type(self).__name__} is immutable: copy it first")


class _Shared:
    """Immutable, so a copy may be the object itself; pickled as its plain form's content."""
    _plain: ClassVar[type]          # the plain type it is pickled as: each subclass names its own

    def __copy__(self):
        return self

    def __deepcopy__(self, memo=None):
        return self

    def __reduce_ex__(self, protocol):
        return (type(self), (self._plain(self),))


class FrozenList(_Shared, list):
    """A list that refuses in-place changes (a list still: JSON, pydantic and == treat it as one)."""
    _plain = list
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse


class FrozenDict(_Shared, dict):
    """A dict that refuses in-place changes."""
    _plain = dict
    __setitem__ = __delitem__ = __ior__ = _refuse
    pop = popitem = clear = update = setdefault = _refuse


_EMPTY_LIST, _EMPTY_DICT = FrozenList(), FrozenDict()     # immutable: one of each serves every note
_LEAF = frozenset({str, int, float, bool, type(None)})     # immutable already: taken as they are


def _thaw(v):
    if isinstance(v, FrozenTrial):
        return _construct(Trial, v, _thaw)
    if isinstance(v, list):
        return [_thaw(x) for x in v]
    if isinstance(v, dict):
        return {k: _thaw(x) for k, x in v.items()}
    return v


def _construct(cls, model, conv):
    """`model`'s fields and extras as a `cls`, each value that is not a plain scalar passed through
    `conv`.

    No validation (the values were validated when the note was parsed) and no `model_construct`:
    this runs once per note of a cold population read (10k notes), where model_construct and a call
    per field doubled the read. The attributes set here are the ones model_construct sets."""
    m = object.__new__(cls)
    extra = model.__pydantic_extra__
    object.__setattr__(m, "__dict__", {k: v if type(v) in _LEAF else conv(v) for k, v in model.__dict__.items()})
    object.__setattr__(m, "__pydantic_extra__", {k: v if type(v) in _LEAF else conv(v) for k, v in extra.items()}
                       if extra is not None else None)
    object.__setattr__(m, "__pydantic_fields_set__", set(model.__pydantic_fields_set__))
    private = model.__pydantic_private__
    object.__setattr__(m, "__pydantic_private__", dict(private) if private is not None else None)
    return m


class _Frozen:
    """What a frozen model adds: equality with its mutable form, model_copy() that is mutable, and
    copy/deepcopy that return the object itself."""
    _mutable: ClassVar[type]        # the mutable model it equals and copies to: each subclass names its own

    def __eq__(self, other):
        if not isinstance(other, self._mutable):
            return NotImplemented
        return self.__dict__ == other.__dict__ and (self.__pydantic_extra__ or {}) == (other.__pydantic_extra__ or {})

    __hash__ = None

    def model_copy(self, *, update=None, deep: bool = False):
        """A mutable copy (deep whatever `deep` says: nothing of the cached note may be shared)."""
        out = _construct(self._mutable, self, _thaw)
        return out.model_copy(update=update) if update else out

    __copy__, __deepcopy__ = _Shared.__copy__, _Shared.__deepcopy__


class FrozenTrial(_Frozen, Trial):
    model_config = ConfigDict(frozen=True)
    _mutable: ClassVar[type] = Trial


class FrozenNote(_Frozen, Note):
    model_config = ConfigDict(frozen=True)
    _mutable: ClassVar[type] = Note


def _own(v):
    """A parsed value made immutable: lists and dicts wrapped, a Trial turned into a FrozenTrial in
    place (nobody else holds a value just parsed, so nothing is copied)."""
    t = type(v)
    if t is list:
        return FrozenList([x if type(x) in _LEAF else _own(x) for x in v]) if v else _EMPTY_LIST
    if t is dict:
        return FrozenDict({k: x if type(x) in _LEAF else _own(x) for k, x in v.items()}) if v else _EMPTY_DICT
    if t is Trial:
        return _in_place(v, FrozenTrial)
    return v


def _immutable(ann) -> bool:
    """An annotation whose validated values are all immutable scalars (str, numbers, None, enums)."""
    if isinstance(ann, type):
        return ann in _LEAF or issubclass(ann, Enum)
    return typing.get_origin(ann) in (typing.Union, types.UnionType) and all(map(_immutable, typing.get_args(ann)))


_MUTABLE: dict[type, tuple[str, ...]] = {}


def _mutable_fields(model: type) -> tuple[str, ...]:
    """The fields of a model that may hold a list, a dict or a model once validated: only these need
    freezing (a note's 10 of 46, a trial's 4 of 25: 5.2 instead of 7.5 µs to freeze a note)."""
    if model not in _MUTABLE:
        _MUTABLE[model] = tuple(k for k, f in model.model_fields.items() if not _immutable(f.annotation))
    return _MUTABLE[model]


def _in_place(model, cls):
    d, extra = model.__dict__, model.__pydantic_extra__
    for k in _mutable_fields(type(model)):
        d[k] = _own(d[k])
    if extra:
        for k, v in extra.items():
            if type(v) not in _LEAF:
                extra[k] = _own(v)
    object.__setattr__(model, "__class__", cls)     # same layout: FrozenNote adds no slot to Note
    return model


def freeze_parsed(note: Note | None) -> FrozenNote | None:
    """The immutable form of a note just parsed, that nobody else holds: frozen in place, not copied (a
    cold read of 100k notes spent 3.6 s CPU copying each into its frozen form)."""
    if note is None or isinstance(note, FrozenNote):
        return note
    return _in_place(note, FrozenNote)
