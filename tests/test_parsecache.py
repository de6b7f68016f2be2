"""The on-disk parse cache (store/parsecache.py): a population read with it loaded equals one parsed
from git; a file of other code, a tampered entry and a damaged file are each ignored whole."""

from __future__ import annotations

import marshal

import pytest

from autoresearchd.store import parsecache, population
from autoresearchd.store.gitrepo import state_dir
from autoresearchd.store.population import read_population

from popbuilder import build_population

MAIN = "refs/heads/main"


def _forget():
    population._NOTES.clear()
    population._IDEAS.clear()


@pytest.fixture
def saved(tmp_path):
    repo = build_population(tmp_path / "r", 60, seed=7)
    _forget()
    full = read_population(repo, MAIN)
    n = parsecache.save(repo)
    assert n == parsecache.size() and n >= 100
    _forget()
    yield repo, full, state_dir(repo) / parsecache.FILE
    _forget()


def test_a_read_from_the_saved_parses_equals_a_parse_from_git(saved, monkeypatch):
    repo, full, _ = saved
    assert parsecache.load(repo) == len(population._NOTES) + len(population._IDEAS) > 100
    asked = []
    real = repo.cat_file_batch
    monkeypatch.setattr(repo, "cat_file_batch", lambda shas: (asked.extend(shas), real(shas))[1])
    pop = read_population(repo, MAIN)
    assert pop.ideas == full.ideas and (pop.baseline_note, pop.baseline_leases) == (full.baseline_note,
                                                                                     full.baseline_leases)
    assert not set(asked) & {i.commit for i in pop.ideas}       # no commit was read from git again
    note = next(i.note for i in pop.ideas if i.note is not None and i.note.trials)
    with pytest.raises(TypeError, match="immutable"):           # loaded notes are as frozen as parsed ones
        note.trials.append(note.trials[0])
    assert type(note.status) is type(full.ideas[0].status)


def test_a_file_of_other_code_is_ignored(saved):
    repo, _, path = saved
    body = marshal.loads(path.read_bytes())
    body["code"] = "0" * 64
    path.write_bytes(marshal.dumps(body))
    assert parsecache.load(repo) == 0 and parsecache.size() == 0


def test_a_tampered_entry_is_found_by_the_check_and_the_file_ignored(saved):
    repo, _, path = saved
    body = marshal.loads(path.read_bytes())
    for d, _extra, _set in body["notes"].values():       # every note names another idea
        d["idea_id"] = "forged"
    path.write_bytes(marshal.dumps(body))
    assert parsecache.load(repo) == 0 and parsecache.size() == 0


@pytest.mark.parametrize("damage", [lambda b: b[: len(b) // 2], lambda b: b"not marshal", lambda b: b""])
def test_a_damaged_file_is_ignored(saved, damage):
    repo, _, path = saved
    path.write_bytes(damage(path.read_bytes()))
    assert parsecache.load(repo) == 0 and parsecache.size() == 0
