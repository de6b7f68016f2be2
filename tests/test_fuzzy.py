"""implement/fuzzy.py, directly: hunks are placed exactly, then with whitespace forgiven, and refused
(with the kind of failure) when a removed line is absent or when two places fit equally well."""

from __future__ import annotations

import pytest

from autoresearchd.implement.diffparse import Hunk
from autoresearchd.implement.fuzzy import HunkError, apply_hunks

TEXT = "def f(x):\n    y = x + 1\n    return y\n\ndef g(x):\n    y = x + 1\n    return y\n"
G_ONLY = "def f(x):\n    y = x + 1\n    return y\n\ndef g(x):\n    y = x + {}\n    return y\n"


def test_context_picks_the_one_place():
    h = Hunk(0, [(" ", "def g(x):"), ("-", "    y = x + 1"), ("+", "    y = x + 2"), (" ", "    return y")])
    assert apply_hunks(TEXT, [h]) == (G_ONLY.format(2), ["exact"])


def test_two_equal_places_are_refused_unless_the_line_number_names_one():
    lines = [("-", "    y = x + 1"), ("+", "    y = x + 3"), (" ", "    return y")]
    with pytest.raises(HunkError) as e:
        apply_hunks(TEXT, [Hunk(0, lines)])
    assert e.value.kind == "ambiguous" and "2 places" in str(e.value)
    assert apply_hunks(TEXT, [Hunk(6, lines)])[0] == G_ONLY.format(3)


def test_whitespace_slips_are_forgiven_and_the_file_keeps_its_indentation():
    trailing = Hunk(0, [(" ", "def g(x):  "), ("-", "    y = x + 1"), ("+", "    y = x + 4")])
    assert apply_hunks(TEXT, [trailing]) == (G_ONLY.format(4), ["rstrip"])
    tabs = Hunk(0, [(" ", "def g(x):"), ("-", "\ty = x + 1"), ("+", "\ty = x + 5"), (" ", "\treturn y")])
    assert apply_hunks(TEXT, [tabs]) == (G_ONLY.format(5), ["whitespace"])     # spaces, as in the file


def test_a_removed_line_that_is_not_in_the_file_is_never_applied():
    h = Hunk(0, [(" ", "def g(x):"), ("-", "    y = x * 7"), ("+", "    y = 0")])
    with pytest.raises(HunkError) as e:
        apply_hunks(TEXT, [h])
    assert e.value.kind == "removed_missing"


def test_crlf_file_stays_crlf():
    text = TEXT.replace("\n", "\r\n")
    h = Hunk(0, [(" ", "def g(x):"), ("-", "    y = x + 1"), ("+", "    y = x + 2"), (" ", "    return y")])
    out, _ = apply_hunks(text, [h])
    assert out == G_ONLY.format(2).replace("\n", "\r\n")
