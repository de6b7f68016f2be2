"""implement/diffextract.py and diffparse.py, directly: the diff is found in an answer, the slips
models make are repaired, and what cannot be repaired safely is named as a problem, never guessed."""

from __future__ import annotations

from autoresearchd.implement.diffextract import extract_diff
from autoresearchd.implement.diffparse import parse_diff

SRC = {"train.py": "import os\n\nlr = 0.1\nsteps = 10\nprint(lr, steps)\n"}
CLEAN = ("diff --git a/train.py b/train.py\n--- a/train.py\n+++ b/train.py\n@@ -3,2 +3,2 @@\n"
         "-lr = 0.1\n+lr = 0.2\n steps = 10\n")


def parse(text):
    return parse_diff(text, set(SRC), SRC.get)


def test_extract_finds_fenced_bare_and_cut_off_diffs():
    diff = "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n"
    assert extract_diff(f"Here it is:\n```diff\n{diff}```\nHope it helps.") == diff
    assert extract_diff(f"Some prose first.\n{diff}") == diff
    # an unclosed fence: the answer was cut off, so no final newline (parse_diff reads it as truncated)
    assert extract_diff(f"```diff\n{diff}") == diff.rstrip("\n")
    assert extract_diff("no diff in this answer") is None and extract_diff("") is None


def test_missing_prefixes_lost_context_space_and_line_numbers_are_repaired():
    bare = "--- train.py\n+++ train.py\n@@ -3,2 +3,2 @@\n-lr = 0.1\n+lr = 0.2\nsteps = 10\n"
    numbered = "--- a/train.py\n+++ b/train.py\n@@ -3,2 +3,2 @@\n-3| lr = 0.1\n+3| lr = 0.2\n 4| steps = 10\n"
    for text in (bare, numbered):
        p = parse(text)
        assert p.problems == [] and p.clean == CLEAN
        (f,) = p.files
        assert (f.old, f.new, f.hunks[0].old_start) == ("train.py", "train.py", 3)
        assert f.hunks[0].lines == [("-", "lr = 0.1"), ("+", "lr = 0.2"), (" ", "steps = 10")]


def test_wrong_hunk_counts_are_recounted():
    p = parse("--- a/train.py\n+++ b/train.py\n@@ -3,7 +3,9 @@\n-lr = 0.1\n+lr = 0.2\n steps = 10\n")
    assert p.problems == [] and p.clean == CLEAN


def test_truncation_and_elided_lines_are_problems_not_guesses():
    cut = parse("--- a/train.py\n+++ b/train.py\n@@ -3,3 +3,3 @@\n-lr = 0.1\n+lr = 0.2\n steps = 10")
    assert len(cut.problems) == 1 and "truncated" in cut.problems[0]
    elided = parse("--- a/train.py\n+++ b/train.py\n@@ -1,5 +1,5 @@\n import os\n ...\n-lr = 0.1\n+lr = 0.2\n")
    assert len(elided.problems) == 1 and "elides lines" in elided.problems[0]


def test_new_file_and_paths_as_written_are_kept_for_the_safety_checks():
    p = parse("--- /dev/null\n+++ b/sub/new.py\n@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n")
    assert p.problems == [] and [(f.old, f.new) for f in p.files] == [(None, "sub/new.py")]
    assert "sub/new.py" in p.raw_paths and not p.binary
