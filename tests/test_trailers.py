"""Typed, versioned trailers and leases (store/trailers.py, store/notes.py): what the daemon writes
reads back as the same typed values; old text without a version reads as version 1; a newer version
goes to the newest reader; a malformed number is absent, not an error. Real git for the commit."""

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import format_message, idea_from_commit, parse_message
from autoresearchd.store.notes import LEASE_VERSION, Lease, format_leases, parse_leases
from autoresearchd.store.trailers import TRAILER_VERSION, Trailers, parse_trailers


def test_trailers_round_trip_through_a_real_commit_as_typed_values(tmp_path):
    repo = GitRepo.init(tmp_path / "r")
    (tmp_path / "r" / "f").write_text("x\n")
    base = repo.commit_all_initial("base")
    msg = format_message("Rotary embeddings", "Replace learned positions.",
                         {"Idea-Id": "e001-abcd1234", "Origin": "exploit", "Parents": ["e000-1", "e000-2"],
                          "Epoch": 1, "Tokens": 1200, "Cost-USD": "0.0123456789", "Model": "m", "Base": base})
    commit = repo.commit_tree(repo.tree_of(base), [base], msg)
    text = repo.commit_message(commit)
    assert "Trailer-Version: 1\n" in text and "Cost-USD: 0.012346\n" in text and "Parents: e000-1, e000-2\n" in text
    idea = idea_from_commit(commit, repo.tree_of(commit), base, text, None)
    tr = idea.trailers
    assert (tr.idea_id, tr.origin, tr.parents, tr.epoch, tr.tokens, tr.cost_usd, tr.version) == \
        ("e001-abcd1234", "exploit", ("e000-1", "e000-2"), 1, 1200, 0.012346, TRAILER_VERSION)
    assert (idea.idea_id, idea.parents, idea.epoch, idea.cost_usd, idea.text) == \
        ("e001-abcd1234", ["e000-1", "e000-2"], 1, 0.012346, "Replace learned positions.")
    # the model is frozen: a caller cannot change what the commit says
    try:
        tr.epoch = 5
        raise AssertionError("trailers are mutable")
    except ValueError:
        pass


def test_old_unversioned_trailers_newer_versions_and_bad_numbers_still_read():
    _, _, raw = parse_message("T\n\nbody\n\nIdea-Id: e002-x\nEpoch: two\nCost-USD: 0.5\n")
    tr = parse_trailers(raw)
    assert (tr.version, tr.idea_id, tr.epoch, tr.cost_usd) == (1, "e002-x", None, 0.5)   # "two" is absent
    newer = parse_trailers({"Trailer-Version": "7", "Idea-Id": "e009-y", "Tokens": "3"})
    assert (newer.version, newer.idea_id, newer.tokens) == (7, "e009-y", 3)
    # a line that is not a trailer we know ends the trailer block: it stays in the body
    title, body, raw = parse_message("T\n\nbody\n\nSigned-off-by: a <a@b>\nIdea-Id: e1\n")
    assert raw == {"Idea-Id": "e1"} and "Signed-off-by" in body
    assert Trailers().lines() == [] and format_message("T", "", {}) == "T\n\n"


def test_leases_carry_a_version_and_old_or_newer_ones_read():
    lz = Lease(trial_id="t1", seed=0, runner="local", host="h", slot="s0")
    text = format_leases([lz])
    assert '"version":1' in text and parse_leases(text)[0].version == LEASE_VERSION
    old = 'running: t1\n\nleases: [{"trial_id":"t1","seed":0,"runner":"local","host":"h","slot":"s0"}]\n'
    assert parse_leases(old)[0].version == 1 and parse_leases(old)[0].trial_id == "t1"
    newer = old.replace('"seed":0', '"seed":0,"version":2,"gpu_uuid":"GPU-1"')
    got = parse_leases(newer)[0]
    assert (got.version, got.seed, got.gpu_uuid) == (2, 0, "GPU-1")       # an added key is kept
    assert parse_leases("leases: [1, 2]\n") == []                          # garbage is no lease, not a crash


def test_rewritten_trailers_name_the_writers_version_and_stay_immutable():
    """The implementer re-writes a proposal's trailers (adding its own). Read from a newer version,
    the keys this daemon does not know were dropped: what it writes is its own version, so a newer
    daemon does not look for them. The parents are a tuple: the frozen model cannot be changed in place."""
    _, _, raw = parse_message("T\n\nbody\n\nIdea-Id: e003-z\nParents: a, b\nTrailer-Version: 7\n")
    assert raw["Trailer-Version"] == "7" and parse_trailers(raw).version == 7
    rewritten = format_message("T", "body", dict(raw, Attempts=2))
    assert rewritten.endswith(f"Attempts: 2\nTrailer-Version: {TRAILER_VERSION}\n")
    assert parse_trailers(parse_message(rewritten)[2]).version == TRAILER_VERSION
    tr = parse_trailers(raw)
    assert tr.parents == ("a", "b")
    try:
        tr.parents.append("c")
        raise AssertionError("parents are mutable")
    except AttributeError:
        pass


def test_a_pushed_commit_with_an_unreadable_version_still_reads(tmp_path):
    """Every commit is parsed before a pushed one's trailers are set aside: `Trailer-Version: x` in a
    pushed message must read as version 1, not raise (it would stop every population read)."""
    msg = "Hack\n\nbody\n\nIdea-Id: e000-0badf00d\nTrailer-Version: x\n"
    idea = idea_from_commit("c" * 40, "t" * 40, "b" * 40, msg, "refs/heads/idea/m/hack")
    assert (idea.trailers.version, idea.idea_id) == (1, "e000-0badf00d")
    for bad in ("1.5", "-3", "", "99999999999999999999"):
        assert parse_trailers({"Trailer-Version": bad, "Epoch": "2"}).epoch == 2
