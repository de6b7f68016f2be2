"""DuplicateIndex: LSH candidates verified by token_set_ratio, with a guard against containment."""

from __future__ import annotations

from autoresearchd.policies.dedupe import PENDING, DuplicateIndex, normalize
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import branch_for, format_message
from autoresearchd.store.notes import Note, Status, format_note
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import IDEAS_PREFIX, NOTES_REF, RECORDS_PREFIX

LS = ("[Experiment] Label smoothing of 0.1 on the cross-entropy loss to soften the targets and reduce "
      "overconfidence early in training.\n[Code Changes] In train.py pass label_smoothing=0.1 to "
      "F.cross_entropy in the training step only; evaluation keeps the plain loss.")
ROPE = ("[Experiment] Replace the learned absolute position embeddings with rotary position embeddings "
        "(RoPE, base 10000) applied to queries and keys in every attention layer.\n[Code Changes] In "
        "model.py remove wpe, add a rotary helper and apply it in CausalSelfAttention.forward.")


def test_rewordings_and_markup_are_duplicates():
    idx = DuplicateIndex(90)
    idx.add("e000-ls", LS)
    idx.add("e000-rope", ROPE)
    assert idx.find(LS) == "e000-ls"
    reworded = LS.replace("of 0.1 on the", "of 0.1 on").replace("early in", "early during").upper()
    assert idx.find(reworded) == "e000-ls"
    assert idx.find("**" + ROPE.replace("\n", "\r\n") + "**\n[End]") == "e000-rope"


def test_different_ideas_and_different_values_in_short_texts_are_not():
    idx = DuplicateIndex(90)
    idx.add("e000-ls", LS)
    assert idx.find(ROPE) is None
    assert idx.find("[Experiment] Label smoothing of 0.2 with z-loss 1e-4 instead of dropout.") is None


def test_a_short_text_contained_in_a_long_one_is_not_a_duplicate():
    # token_set_ratio alone says 100 here: every word of the short text is in the long one.
    idx = DuplicateIndex(90)
    idx.add("e000-ls", LS)
    assert idx.find("Label smoothing on the loss") is None
    assert idx.matches(LS + " Also log the smoothed loss.")[0][0] == "e000-ls"   # a small addition is


def test_threshold_is_respected():
    a = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    b = "alpha beta gamma delta epsilon zeta eta theta iota lambda"
    strict, loose = DuplicateIndex(99), DuplicateIndex(80, min_jaccard=0.5, lsh_threshold=0.3)
    for idx in (strict, loose):
        idx.add("x", a)
    assert strict.find(b) is None and loose.find(b) == "x"


def test_pending_keys_lose_to_real_ids_and_remove_works():
    idx = DuplicateIndex(90)
    idx.add(PENDING + "1", LS)
    idx.add("e001-real", LS)
    assert idx.find(LS) == "e001-real"
    idx.remove("e001-real")
    assert idx.find(LS) == PENDING + "1"
    idx.remove(PENDING + "1")
    assert idx.find(LS) is None and len(idx) == 0
    idx.remove("never-there")


def test_empty_and_stopword_only_texts():
    idx = DuplicateIndex(90)
    idx.add("empty", "")
    idx.add("stop", "the and of to")
    assert idx.find("") == "empty"
    assert idx.find(ROPE) is None
    assert normalize("Use LR 3e-4 and attn_temp=0.5") == ["lr", "3e-4", "attn_temp", "0.5"]


def test_sync_indexes_every_idea_whatever_its_status(tmp_path):
    repo = GitRepo.init(tmp_path / "r")
    (repo.path / "a.txt").write_text("x\n")
    base = repo.commit_all_initial("baseline")
    specs = [("e000-fail", LS, Status.FAILED, "seed", False), ("e000-impl", ROPE, Status.IMPLEMENT_FAILED,
                                                                "seed", True)]
    for idea_id, text, status, origin, record in specs:
        c = repo.commit_tree(repo.tree_of(base), [base], format_message(
            text.split(".")[0], text, {"Idea-Id": idea_id, "Origin": origin, "Epoch": 0}))
        repo.update_ref(IDEAS_PREFIX + idea_id, c)
        repo.update_ref(RECORDS_PREFIX + idea_id if record else branch_for(idea_id, idea_id, origin), c)
        repo.note_write(NOTES_REF, c, format_note(Note(status=status, error="x")))
    # a person's branch: no trailers, no note
    human = "Try a much bigger batch size of 1024 sequences with linear warmup over 500 steps"
    c = repo.commit_tree(repo.tree_of(base), [base], human + "\n")
    repo.update_ref("refs/heads/idea/me/big-batch", c)
    pop = read_population(repo, "main")
    idx = DuplicateIndex(90)
    assert idx.sync(pop) == 3 and idx.sync(pop) == 0
    assert idx.find(LS) == "e000-fail" and idx.find(ROPE) == "e000-impl"
    assert idx.find(human + ".") == f"h-{c[:10]}"
