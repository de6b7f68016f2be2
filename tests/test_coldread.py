"""What a cold population read builds, checked against the slow, obvious way of building it (issue 28,
the cold read at 100k ideas; docs/architecture.md, "The population read by its changes"):
- a note is frozen by its container fields only: the result equals the parsed note, and every list,
  dict and trial in it is frozen, for a varied set of notes (old schema versions, a newer daemon's
  fields and words, damaged values, hostile strings);
- the objects a read built are left in the cycle collector's oldest generation, not walked again by
  the young collections after it, and a cycle among them is still collected;
- a commit message's trailers read by the key before the first ": " equal what the pattern match
  per line read, for a varied set of messages;
- a note saved for the next start (store/parsecache.py, the fields that differ from its defaults) is
  rebuilt as the object its parse made, for the same varied notes;
- an idea built by copying its parsed fields equals the dataclass built from its commit, for commits
  of every message above, marked and pushed, on every kind of ref."""

from __future__ import annotations

import dataclasses
import gc
import json
import marshal
import re
import weakref

import pytest

from autoresearchd.store import parsecache, population
from autoresearchd.store.frozen import FrozenDict, FrozenList, FrozenNote, FrozenTrial, freeze_parsed
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import Idea, as_pushed, format_message, idea_from_commit, parse_message
from autoresearchd.store.notes import Note, Status, Trial, format_note, parse_note
from autoresearchd.store.population import bulk, read_population
from autoresearchd.store.refs import (ARCHIVE_PREFIX, IDEA_BRANCHES, IDEAS_PREFIX, NOTES_REF, PROPOSALS_PREFIX,
                                      RECORDS_PREFIX)
from autoresearchd.store.trailers import TRAILER_KEYS

from popbuilder import build_population

MAIN = "refs/heads/main"


def _rich() -> Note:
    t = Trial(trial_id="e001-aa-s0", seed=0, status=Status.SUCCEEDED, value=3.21, metrics={"val_loss": 3.21},
              wall_s=12.5, faults=["gpu-a: lost"], tamper=["x"], run_metrics={"tokens": 1e6})
    return Note(status=Status.SUCCEEDED, idea_id="e001-aa", origin="explore", epoch=1, metric="val_loss",
                goal="min", value=3.21, std=0.01, seeds=[0, 1], values=[3.2, 3.22], baseline=3.3, delta=-0.09,
                decision="promoted", budget={"limit": {"wall_s": 600}, "over": ["wall"]}, flags=["cross_accelerator"],
                cost={"llm": 0.02}, trials=[t, t.model_copy(update={"seed": 1, "trial_id": "e001-aa-s1"})],
                tune={"study": "s", "knobs": {"lr": 0.001, "sizes": [1, 2]}}, superseded=["old-s0"])


NOTES = {
    "rich": format_note(_rich()),
    "no schema line (before versions)": "succeeded val_loss=3.3\n\nstatus: succeeded\nvalue: 3.3\nseeds: [0]\n",
    "a newer daemon: schema 7, unknown fields and words": format_note(_rich()).replace("schema: 1", "schema: 7")
    + 'future_field: {"a": [1, {"b": 2}]}\nfuture_list: [1, 2]\nfuture_text: hello\ndecision: super-promoted\n'
    + "origin: alien\n",
    "a trial with fields of a newer daemon": "x\n\nschema: 1\nstatus: failed\ntrials: " + json.dumps(
        [{"trial_id": "t", "seed": 0, "status": "failed", "zz_new": {"k": [1, 2]}, "metrics": {}}]) + "\n",
    "damaged values (dropped, the rest kept)": "x\n\nstatus: succeeded\nvalue: abc\nseeds: [0, \"x\"]\n"
    "cost: {\"llm\": \"free\"}\nflags: [\"a\"]\nepoch: 3\n",
    "hostile strings": "x\n\nstatus: timed_out\nerror: \"\\u001b[31mred\\u0007 \\u2028 line\"\nhost: [not json\n"
    "metric: {\"looks\": \"like json\"}\nidea_id: \u202eevil\u202c\nlog: \"\"\n",
    "unicode line breaks in values": "x\n\nstatus: failed\nerror: a\u2028b: c\nhost: h\x1cd: e\n",
    "no status": "x\n\nvalue: 3.3\n",
    "empty": "",
}


def _every_container(v, path="note"):
    """(path, value) of every list, dict and model reachable from a parsed value."""
    if isinstance(v, (Note, Trial)):
        yield path, v
        for k, x in {**v.__dict__, **(v.__pydantic_extra__ or {})}.items():
            yield from _every_container(x, f"{path}.{k}")
    elif isinstance(v, list):
        yield path, v
        for k, x in enumerate(v):
            yield from _every_container(x, f"{path}[{k}]")
    elif isinstance(v, dict):
        yield path, v
        for k, x in v.items():
            yield from _every_container(x, f"{path}[{k!r}]")


@pytest.mark.parametrize("name", list(NOTES))
def test_a_frozen_note_equals_its_parse_and_nothing_in_it_can_change(name):
    text = NOTES[name]
    plain, frozen = parse_note(text), freeze_parsed(parse_note(text))
    if plain is None:
        assert frozen is None
        return
    assert isinstance(frozen, FrozenNote) and frozen == plain
    assert frozen.__pydantic_fields_set__ == plain.__pydantic_fields_set__
    assert format_note(frozen.model_copy()) == format_note(plain)
    for path, v in _every_container(frozen):
        assert isinstance(v, (FrozenNote, FrozenTrial, FrozenList, FrozenDict)), (path, type(v))


def test_the_varied_notes_are_varied():
    """The set above reaches what it is meant to: extras (note and trial), a dropped field, unknown words."""
    newer = parse_note(NOTES["a newer daemon: schema 7, unknown fields and words"])
    assert newer.decision == "super-promoted" and newer.origin == "alien"
    assert newer.__pydantic_extra__["future_field"] == {"a": [1, {"b": 2}]}
    trial = parse_note(NOTES["a trial with fields of a newer daemon"]).trials[0]
    assert trial.__pydantic_extra__ == {"zz_new": {"k": [1, 2]}}
    damaged = parse_note(NOTES["damaged values (dropped, the rest kept)"])
    assert damaged.value is None and damaged.seeds == [] and damaged.cost == {} and damaged.epoch == 3
    assert parse_note(NOTES["hostile strings"]).error.startswith("\x1b[31m")


def test_a_read_leaves_what_it_built_in_the_oldest_generation(tmp_path):
    """The young collections after a read do not walk its objects again (at 10k ideas, three walks of
    everything were 0.41 of a 1.81 s cold read); the collector stays as it was before the read."""
    repo = build_population(tmp_path / "research", 30, seed=3)
    population._NOTES.clear()
    population._IDEAS.clear()
    assert gc.isenabled()
    pop = read_population(repo, MAIN)
    assert gc.isenabled()
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    built = [i for i in pop.ideas] + [i.note for i in pop.ideas if i.note is not None]
    assert built and all(id(o) in oldest for o in built)
    gc.disable()
    try:
        with bulk():
            pass
        assert not gc.isenabled()       # disabled before: left disabled
    finally:
        gc.enable()


def test_a_cycle_built_in_a_read_is_still_collected():
    class Node:
        pass

    with bulk():
        a, b = Node(), Node()
        a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None


_OLD_TRAILER = re.compile(r"^([A-Z][A-Za-z-]+): (.*)$")


def _old_line_rule(line: str):
    """The old rule for one line of the final paragraph, a pattern match: (key, value) or None."""
    m = _OLD_TRAILER.match(line)
    return (m.group(1), m.group(2).strip()) if m and m.group(1) in TRAILER_KEYS else None


def _trailer_lines(msg: str) -> list[str]:
    """Every line of the message that parse_message could read as a trailer (all but the title)."""
    return msg.rstrip("\n").split("\n")[1:]


MESSAGES = [
    format_message("A title", "Why it helps.\n\nMore.", {"Idea-Id": "e001-ab", "Origin": "explore", "Epoch": 1,
                                                          "Parents": ["e000-aa", "e000-bb"], "Cost-USD": 0.02}),
    "Only a title\n",
    "",
    "\n\n\n",
    "Title\n\nbody\n\nIdea-Id: x\nUnknown-Key: v\nOrigin: seed\n",          # an unknown key ends the trailers
    "Title\n\nIdea-Id:x: y\n",                                              # no ": " after the key
    "Title\n\nidea-id: lower\n",                                            # keys are case-sensitive
    "Title\n\nModel: a: b: c\nEpoch:  7  \nIdea-Id: \n",                    # ": " in a value; spaces; empty
    "Title\n\nOrigin: one\nOrigin: two\n",                                  # the same key twice
    "Title\n\nIdea-Id: x\r\nEpoch: 1\r\n",                                  # CRs stay in the line
    "Title\n\n Idea-Id: indented\n",
    "Title\n\nIdea-Id: \x1b[31mred\u202e\nTrailer-Version: 99\n",
    "Title\nIdea-Id: right after the title\n",
    "Title\n\nbody line: with a colon\n\nTokens: 12\n",
    "Title\n\nIdea-Id\t: tab\nEpoch: 2\n",
]


@pytest.mark.parametrize("k", range(len(MESSAGES)))
def test_a_message_parses_as_the_pattern_match_did(k):
    """parse_message reads trailers from the end of the message while each line is one by the old
    rule: the trailers it returns are exactly the old rule's run of lines at the end."""
    _, body, trailers = parse_message(MESSAGES[k])
    lines = _trailer_lines(MESSAGES[k])
    run = []
    for line in reversed(lines):
        if not line.strip() or (kv := _old_line_rule(line)) is None:
            break
        run.append(kv)
    assert trailers == dict(run)      # read from the end: an earlier line of a repeated key wins
    kept = lines[:len(lines) - len(run)] if run else lines
    assert body == "\n".join(kept).strip()


def test_every_known_trailer_key_is_a_word_the_pattern_matched():
    """The new reading equals the old one only while every known key is a capitalised word with dashes."""
    assert TRAILER_KEYS and all(re.fullmatch(r"[A-Z][A-Za-z-]+", k) for k in TRAILER_KEYS)


# -- the saved parses (store/parsecache.py): a note kept as the fields that differ from its defaults --

def _shape(m) -> tuple:
    """Everything a frozen model holds, in order and with each value's type, its trials likewise."""
    trials = [_shape(t) for t in m.__dict__.get("trials", ())]
    return (type(m), [(k, type(v), v) for k, v in m.__dict__.items()], m.__pydantic_extra__,
            m.__pydantic_fields_set__, m.__pydantic_private__, trials)


@pytest.mark.parametrize("name", list(NOTES))
def test_a_saved_note_is_rebuilt_as_it_was_parsed(name):
    """A note saved and loaded (through marshal, as the file holds it) is the object the parse made:
    the same fields in the same order, each value of the same type (enum members, frozen lists and
    dicts, frozen trials), the same extras and fields set; nothing in it can change."""
    parsed = freeze_parsed(parse_note(NOTES[name]))
    if parsed is None:
        return
    loaded = parsecache.note_from(marshal.loads(marshal.dumps(parsecache.note_plain(parsed))))
    assert _shape(loaded) == _shape(parsed)
    assert loaded == parsed and format_note(loaded.model_copy()) == format_note(parsed.model_copy())
    for path, v in _every_container(loaded):
        assert isinstance(v, (FrozenNote, FrozenTrial, FrozenList, FrozenDict)), (path, type(v))


def test_a_saved_note_holds_only_what_differs_from_the_defaults():
    """The saved form of a note is its fields that are not their defaults (what rebuilding it merges
    over the defaults in one step), not every one of its 46 fields."""
    note = freeze_parsed(parse_note(NOTES["no schema line (before versions)"]))
    fields, extra, fields_set = parsecache.note_plain(note)
    assert fields == {"status": "succeeded", "value": 3.3, "seeds": [0]}
    assert extra == {} and fields_set == ["seeds", "status", "value"]
    trial = parsecache.note_plain(freeze_parsed(parse_note(NOTES["a trial with fields of a newer daemon"])))[0]
    assert trial["trials"] == [("\0trial", {"trial_id": "t", "seed": 0, "status": "failed"},
                                {"zz_new": {"k": [1, 2]}}, ["metrics", "seed", "status", "trial_id", "zz_new"])]


# -- ideas built by copying their parsed fields (population._make_idea) --------------------------

def test_every_idea_a_read_builds_equals_the_dataclass_built_from_its_commit(tmp_path):
    """The population builds each idea by copying the fields parsed from its commit into a new object's
    `__dict__`; it equals, field for field, the idea `idea_from_commit` builds (then `as_pushed` for a
    commit the daemon did not mark, its ref, proposal, note and leases set), for commits of every
    message above (hostile trailers among them), marked and pushed, on branches, archives, records and
    proposals."""
    repo = GitRepo.init(tmp_path / "r")
    base = repo.commit_tree(repo.git("mktree", input=b"").strip(), [], "baseline\n")     # the empty tree
    repo.update_ref(MAIN, base)
    refs = {}
    for k, msg in enumerate(MESSAGES):
        tree = repo.tree_with_files(base, {"train.py": f"x = {k + 2}\n".encode()})
        sha = repo.commit_tree(tree, [base], msg or "\n")
        where = (f"{IDEA_BRANCHES}m/{k}", f"{ARCHIVE_PREFIX}a{k}", f"{RECORDS_PREFIX}r{k}",
                 f"{PROPOSALS_PREFIX}p{k}")[k % 4]
        repo.update_ref(where, sha)
        if k % 3:                       # marked by the daemon: its trailers count
            repo.update_ref(f"{IDEAS_PREFIX}own{k}", sha)
        if k % 2:
            repo.note_write(NOTES_REF, sha, NOTES["rich"])
        refs[sha] = where
    population._NOTES.clear()
    population._IDEAS.clear()
    pop = read_population(repo, MAIN)
    own = set(repo.refs(IDEAS_PREFIX).values())
    assert len(pop.ideas) == len(MESSAGES) and any(i.commit not in own and i.branch for i in pop.ideas)
    for idea in pop.ideas:
        raw = repo.read_object(idea.commit)[1]
        tree, parents, msg, ts = population._parse_commit(raw)
        want = idea_from_commit(idea.commit, tree, parents[0], msg, None, ts)
        ref = refs[idea.commit]
        on_branch = ref.startswith((IDEA_BRANCHES, ARCHIVE_PREFIX))
        if on_branch and idea.commit not in own:
            want = as_pushed(want)
            want.placed_epoch = idea.placed_epoch       # placed after it was built (population._placements)
        want.branch = ref if on_branch else None
        want.proposal = ref.startswith(PROPOSALS_PREFIX)
        want.note = freeze_parsed(parse_note(NOTES["rich"])) if idea.note is not None else None
        assert type(idea) is Idea and vars(idea) == vars(want), ref
        assert list(vars(idea)) == [f.name for f in dataclasses.fields(Idea)]
