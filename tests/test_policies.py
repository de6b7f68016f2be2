"""Search policies against real git populations and a scripted (real subclass) LLM provider."""

from __future__ import annotations

import itertools
import re

import pytest

from autoresearchd.config import LLMCfg, PolicyCfg
from autoresearchd.llm.base import Completion, LLMError, Provider
from autoresearchd.manifest import EnvManifest
from autoresearchd.policies import get
from autoresearchd.policies.evolutionary import schedule
from autoresearchd.policies.prompting import parse_ideas
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import branch_for, format_message, prompt_hash
from autoresearchd.store.notes import Note, Status, format_note
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import IDEAS_PREFIX, NOTES_REF, RECORDS_PREFIX

ENV = EnvManifest(run="python train.py", metric="val_loss", goal="min", time_budget_s=1500,
                  context="Train a tiny GPT on Shakespeare characters.")
_counter = itertools.count()


# -- a scripted provider: the policy is what is under test ----------------------------------------
def idea_block(title: str | None = None, extra: str = "") -> str:
    """One idea with words of its own, so unrelated ideas never look like duplicates."""
    n = next(_counter)
    title = title or f"Idea{n} tweak knob{n}"
    words = " ".join(f"w{n}x{j}" for j in range(10))
    return f"[Experiment] {title}. Change {words} {extra}\n[Code Changes] edit f{n}.py function g{n}.\n[End]\n"


def answer(k: int, **kw) -> str:
    return "Here are the experiments.\n\n" + "\n".join(idea_block(**kw) for _ in range(k))


class Scripted(Provider):
    """Answers from a script: a list of texts, or a function of (meta, messages)."""
    name = "scripted"

    def __init__(self, script=None):
        super().__init__(LLMCfg(provider="replay", max_retries=0, backoff_s=0))
        self.script = script if script is not None else (lambda meta, messages: answer(meta["n"]))
        self.calls: list[dict] = []

    def _call(self, messages, system, max_tokens, meta):
        self.calls.append({"messages": [dict(m) for m in messages], "system": system, "meta": dict(meta)})
        if callable(self.script):
            text = self.script(meta, messages)
        elif self.script:
            text = self.script.pop(0)
        else:
            raise LLMError("script exhausted")
        return Completion(text=text, model="scripted-1", input_tokens=100, output_tokens=50, cost_usd=0.01)

    def prompt(self, i: int = -1) -> str:
        return self.calls[i]["messages"][0]["content"]


# -- populations as real git repos ----------------------------------------------------------------
class Pop:
    def __init__(self, tmp_path, baseline: float | None = 3.0):
        self.repo = GitRepo.init(tmp_path / "research")
        (self.repo.path / "train.py").write_text("print('hi')\n")
        self.base = self.repo.commit_all_initial("baseline")
        self.commits: dict[str, str] = {}
        if baseline is not None:
            self.repo.note_write(NOTES_REF, self.base, format_note(Note(
                status=Status.SUCCEEDED, value=baseline, metric="val_loss", values=[baseline], std=0.01)))

    def add(self, idea_id, title, *, origin="seed", epoch=0, value=None, status=None, error=None,
            decision=None, on=None, text=None, record=False):
        parent = self.commits[on] if on else self.base
        tree = self.repo.tree_with_files(parent, {f"ideas/{idea_id}.txt": idea_id.encode()})
        body = text or f"[Experiment] {title}. Details {' '.join(f'{idea_id}q{j}' for j in range(8))}"
        msg = format_message(title, body, {"Idea-Id": idea_id, "Origin": origin, "Epoch": epoch,
                                           "Parents": [on] if on else None})
        c = self.repo.commit_tree(tree, [parent], msg)
        ref = RECORDS_PREFIX + idea_id if record else branch_for(idea_id, title, origin)
        self.repo.update_ref(IDEAS_PREFIX + idea_id, c)     # written "by the daemon": trailers believed
        self.repo.update_ref(ref, c)
        self.commits[idea_id] = c
        if value is not None or status is not None:
            st = status or Status.SUCCEEDED
            self.repo.note_write(NOTES_REF, c, format_note(Note(
                status=st, idea_id=idea_id, metric="val_loss", value=value,
                values=[value] if value is not None else [], error=error, decision=decision)))
        return c

    def many(self, n, *, origin, epoch, start=0, **kw):
        for j in range(start, start + n):
            self.add(f"e{epoch:03d}-{origin[:2]}{j:06d}", f"{origin} idea {j} of epoch {epoch}",
                     origin=origin, epoch=epoch, **kw)

    def read(self):
        return read_population(self.repo, "main")


def policy(name="evolutionary", lessons_store=None, **kw):
    cfg = PolicyCfg(**{"ideas_per_epoch": 40, "batch": 10, **kw})
    return get(name)(cfg, lessons_store=lessons_store)


# -- the schedule -----------------------------------------------------------------------------------
def test_schedule_matches_the_paper_rounding_to_whole_batches():
    assert schedule(0, 80, 10) == (0, 80)
    assert schedule(1, 80, 10) == (40, 40)
    assert schedule(2, 80, 10) == (40, 40)      # 0.6 * 80 = 48, rounded down to whole batches of 10
    assert schedule(2, 80, 8) == (48, 32)       # 48 is already whole batches of 8
    assert schedule(4, 80, 10) == (50, 30)
    assert schedule(6, 80, 10) == (60, 20)
    assert schedule(50, 80, 10) == (60, 20)     # capped at 0.8 -> 64 -> 60
    assert schedule(50, 80, 1) == (64, 16)
    assert schedule(3, 80, 1) == (48, 32)
    for e in range(30):
        x, y = schedule(e, 80, 10)
        assert x + y == 80 and x % 10 == 0


def test_epoch_split_exploit_then_explore_counts(tmp_path):
    p = Pop(tmp_path)
    p.add("e000-good0001", "good idea one", value=2.5)
    p.add("e000-bad00001", "bad idea", value=3.5)
    p.many(40, origin="seed", epoch=0, start=10, value=3.2)   # epoch 0 complete
    pol, llm = policy(ideas_per_epoch=40, batch=10), Scripted()
    out = pol.propose(p.read(), 40, ENV, llm)
    assert [q.origin for q in out] == ["exploit"] * 20 + ["explore"] * 20
    assert {q.epoch for q in out} == {1} and [q.batch for q in out[::10]] == [0, 1, 2, 3]
    assert all(c["meta"]["n"] == 10 for c in llm.calls)


# -- epoch 0 ----------------------------------------------------------------------------------------
def test_seed_batches_avoid_titles_already_proposed_in_the_epoch(tmp_path):
    p = Pop(tmp_path, baseline=None)
    pol, llm = policy(ideas_per_epoch=30), Scripted()
    out = pol.propose(p.read(), 20, ENV, llm)
    assert len(out) == 20 and {q.origin for q in out} == {"seed"} and {q.epoch for q in out} == {0}
    first, second = llm.prompt(0), llm.prompt(1)
    assert "Already proposed" not in first
    for q in out[:10]:
        assert q.title in second
    assert llm.calls[1]["meta"]["known_titles"][:10] == [q.title for q in out[:10]]
    assert llm.calls[0]["meta"] == {"n": 10, "known_titles": [], "purpose": "propose"}
    # the manifest's facts reach the prompt, the time budget included (the paper's said 3,600 s)
    assert "1500 seconds" in first and "val_loss" in first and "lower is better" in first
    assert "Shakespeare" in first and "not been measured yet" in first
    assert out[0].prompt_hash and re.fullmatch(r"[0-9a-f]{12}", out[0].prompt_hash)
    assert out[0].model == "scripted-1" and out[0].cost_usd == pytest.approx(0.001)
    assert out[0].base_commit is None and out[0].parents == []


# -- exploit -----------------------------------------------------------------------------------------
def test_exploit_shows_sampled_winners_with_metrics_and_builds_on_a_single_cited_parent(tmp_path):
    p = Pop(tmp_path)
    p.add("e000-aaaa0001", "wider mlp", value=2.8)
    p.add("e000-aaaa0002", "rope embeddings", value=2.9)
    p.add("e000-aaaa0003", "worse than baseline", value=3.4)
    p.add("e000-aaaa0004", "crashed idea", status=Status.FAILED, error="CUDA OOM")
    p.many(20, origin="seed", epoch=0, start=10, value=3.1)
    cites = ["builds on e000-aaaa0001 only", "(builds on e000-aaaa0001 and e000-aaaa0002)", "no citation"]
    llm = Scripted(lambda meta, m: "".join(idea_block(extra=c) for c in cites) + answer(meta["n"] - 3))
    pol = policy(ideas_per_epoch=20, batch=10)       # epoch 1: 10 exploit, then 10 explore
    out = pol.propose(p.read(), 1, ENV, llm)
    prompt = llm.prompt()
    assert "wider mlp" in prompt and "rope embeddings" in prompt
    assert "val_loss = 2.8000" in prompt and "-0.2 vs baseline 3.0000: better" in prompt
    assert "worse than baseline" not in prompt and "crashed idea" not in prompt
    assert "The unmodified baseline scores `val_loss` = 3.0000" in prompt
    assert [q.origin for q in out] == ["exploit"] * 10 and {q.epoch for q in out} == {1}
    assert out[0].parents == ["e000-aaaa0001"] and out[0].base_commit == p.commits["e000-aaaa0001"]
    assert out[1].parents == ["e000-aaaa0001", "e000-aaaa0002"] and out[1].base_commit is None
    assert sorted(out[2].parents) == ["e000-aaaa0001", "e000-aaaa0002"] and out[2].base_commit is None


def test_exploit_prefers_confirmed_parents_and_never_demoted(tmp_path):
    p = Pop(tmp_path)
    p.add("e000-conf0001", "confirmed winner", value=2.95, decision="confirmed")
    p.add("e000-demo0001", "demoted lucky seed", value=2.0, decision="demoted")
    for j in range(6):
        p.add(f"e000-plain{j:03d}", f"plain winner {j}", value=2.9)
    p.many(20, origin="seed", epoch=0, start=20, value=3.1)
    llm = Scripted()
    policy(ideas_per_epoch=20, max_parents=2).propose(p.read(), 1, ENV, llm)
    prompt = llm.prompt()
    assert "confirmed winner" in prompt and "demoted lucky seed" not in prompt
    assert len(re.findall(r"plain winner \d", prompt)) == 1


def test_exploit_without_baseline_uses_best_measured_ideas(tmp_path):
    p = Pop(tmp_path, baseline=None)
    for j, v in enumerate([3.3, 2.7, 3.0, 2.9]):
        p.add(f"e000-nob{j:05d}", f"nobase idea {j}", value=v)
    p.many(20, origin="seed", epoch=0, start=20, status=Status.FAILED, error="boom")
    llm = Scripted()
    out = policy(ideas_per_epoch=20, max_parents=2).propose(p.read(), 1, ENV, llm)
    prompt = llm.prompt()
    assert "nobase idea 1" in prompt and "nobase idea 3" in prompt and "nobase idea 0" not in prompt
    assert out[0].origin == "exploit"


def test_exploit_with_nothing_to_exploit_runs_as_explore(tmp_path):
    p = Pop(tmp_path)
    p.many(20, origin="seed", epoch=0, value=3.5)
    out = policy(ideas_per_epoch=20).propose(p.read(), 1, ENV, Scripted())
    assert {q.origin for q in out} == {"explore"} and {q.epoch for q in out} == {1}


# -- explore -----------------------------------------------------------------------------------------
def test_explore_shows_history_with_failures_and_their_reasons(tmp_path):
    p = Pop(tmp_path)
    p.add("e000-fail0001", "huge batch", status=Status.TIMED_OUT, error="killed after 1500 s")
    p.add("e000-fail0002", "broken diff", status=Status.IMPLEMENT_FAILED,
          error="patch does not apply to model.py", record=True)
    p.add("e000-okay0001", "small tweak", value=3.2)
    p.many(7, origin="seed", epoch=0, start=10, status=Status.FAILED, error="NaN loss at step 3")
    p.many(12, origin="exploit", epoch=1, start=50, value=3.1)     # the exploit part of epoch 1 is done
    llm = Scripted()
    out = policy(ideas_per_epoch=20, max_parents=100).propose(p.read(), 1, ENV, llm)
    prompt = llm.prompt()
    assert {q.origin for q in out} == {"explore"} and {q.epoch for q in out} == {1}
    assert "huge batch" in prompt and "FAILED (timed_out): killed after 1500 s" in prompt
    assert "FAILED (implement_failed): patch does not apply to model.py" in prompt
    assert "small tweak" in prompt and "+0.2 vs baseline" in prompt
    assert "NaN loss at step 3" in prompt


# -- greedy and best_of_n ----------------------------------------------------------------------------
def test_greedy_branches_off_the_best_commit_preferring_confirmed(tmp_path):
    p = Pop(tmp_path)
    p.add("e000-root0001", "step one", value=2.9, decision="confirmed")
    p.add("e000-step0002", "step two on top", value=2.8, decision="confirmed", on="e000-root0001")
    p.add("e000-luck0001", "lucky unconfirmed", value=2.5, decision="within_noise")
    p.add("e000-oops0001", "recent crash", status=Status.FAILED, error="segfault in kernel")
    llm = Scripted()
    out = policy("greedy", ideas_per_epoch=20).propose(p.read(), 3, ENV, llm)
    assert len(out) == 10 and {q.origin for q in out} == {"greedy"}
    assert all(q.base_commit == p.commits["e000-step0002"] and q.parents == ["e000-step0002"] for q in out)
    prompt = llm.prompt()
    assert prompt.index("step one") < prompt.index("step two on top")
    assert "segfault in kernel" in prompt


def test_greedy_without_confirmed_takes_best_beating_baseline_else_baseline(tmp_path):
    p = Pop(tmp_path)
    p.add("e000-wors0001", "worse", value=3.3)
    out = policy("greedy").propose(p.read(), 1, ENV, Scripted())
    assert out[0].base_commit is None and out[0].parents == []
    p.add("e000-bett0001", "better", value=2.9)
    out = policy("greedy").propose(p.read(), 1, ENV, Scripted())
    assert out[0].base_commit == p.commits["e000-bett0001"]


def test_best_of_n_shows_no_population_and_repeats_the_same_prompt(tmp_path):
    p = Pop(tmp_path)
    p.add("e000-seen0001", "a visible winner", value=2.0)
    p.add("e000-seen0002", "a visible failure", status=Status.FAILED, error="boom")
    llm = Scripted()
    out = policy("best_of_n").propose(p.read(), 30, ENV, llm)
    assert len(out) == 30 and {q.origin for q in out} == {"best_of_n"}
    prompts = {c["messages"][0]["content"] for c in llm.calls}
    assert len(prompts) == 1
    prompt = prompts.pop()
    assert "visible" not in prompt and "Already proposed" not in prompt and "2.0" not in prompt
    assert "a visible winner" in llm.calls[0]["meta"]["known_titles"]   # a hint for replay only


# -- determinism and restarts --------------------------------------------------------------------------
def test_same_seed_same_prompts_other_seed_other_sample(tmp_path):
    p = Pop(tmp_path)
    for j in range(30):
        p.add(f"e000-win{j:05d}", f"winner number {j}", value=2.5 + j / 100)
    pop = p.read()
    runs = []
    for seed in (7, 7, 8):
        llm = Scripted()
        policy(ideas_per_epoch=30, max_parents=5, seed=seed).propose(pop, 1, ENV, llm)
        runs.append(llm.prompt())
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_restart_mid_epoch_continues_without_repeat_or_skip(tmp_path):
    p = Pop(tmp_path)
    p.many(40, origin="seed", epoch=0, value=3.1)
    p.add("e000-best0001", "the winner", value=2.5)
    p.many(10, origin="exploit", epoch=1, value=2.9)               # one exploit batch done before a crash
    p.add("e001-dupl0001", "a dropped duplicate", origin="exploit", epoch=1, status=Status.DUPLICATE,
          record=True)                                             # not counted
    pop = p.read()
    pol = policy(ideas_per_epoch=40)
    assert pol.cursor(pop) == (1, 10)
    first = pol.propose(pop, 1, ENV, Scripted())
    assert [(q.epoch, q.batch, q.origin) for q in first][:1] == [(1, 1, "exploit")]
    # the same process asks again before those ideas reach git: it moves on, it does not repeat
    second = pol.propose(pop, 1, ENV, Scripted())
    assert (second[0].epoch, second[0].batch, second[0].origin) == (1, 2, "explore")
    # a restarted daemon (fresh policy, same git) resumes where git says: no skip either
    fresh = policy(ideas_per_epoch=40)
    assert fresh.cursor(pop) == (1, 10)
    # and once the epoch is full, the next one starts
    p.many(30, origin="explore", epoch=1, start=100, value=3.0)
    assert policy(ideas_per_epoch=40).cursor(p.read()) == (2, 0)


# -- duplicates ---------------------------------------------------------------------------------------
def test_duplicates_of_a_failed_idea_and_within_the_batch_are_dropped_and_replaced(tmp_path):
    p = Pop(tmp_path)
    old = ("[Experiment] Label smoothing of 0.1 on the cross-entropy loss to soften targets and "
           "reduce overconfidence early in training.\n[Code Changes] Pass label_smoothing=0.1 in train.py.")
    p.add("e000-oldf0001", "Label smoothing of 0.1 on the cross-entropy loss", text=old,
          status=Status.FAILED, error="diverged")
    p.many(10, origin="seed", epoch=0, start=10, value=3.2)
    again = old.replace("0.1 on", "0.1 on the").replace("[End]", "") + "\n[End]\n"
    twin = idea_block(title="Twin idea")
    first = "Ideas:\n" + again + twin + twin + answer(7)
    llm = Scripted([first, answer(2)])
    out = policy(ideas_per_epoch=10).propose(p.read(), 10, ENV, llm)
    ok = [q for q in out if q.dropped_reason is None]
    dropped = [q for q in out if q.dropped_reason]
    assert len(ok) == 10 and len(dropped) == 2
    assert dropped[0].duplicate_of == "e000-oldf0001" and "duplicate of e000-oldf0001" in dropped[0].dropped_reason
    assert dropped[1].duplicate_of is None and "Twin idea" in dropped[1].dropped_reason
    assert len(llm.calls) == 2 and llm.calls[1]["meta"]["n"] == 2
    follow = llm.calls[1]["messages"]
    assert [m["role"] for m in follow] == ["user", "assistant", "user"]
    assert "duplicate of e000-oldf0001" in follow[2]["content"] and "2 more experiments" in follow[2]["content"]


def test_duplicate_replacement_is_bounded(tmp_path):
    p = Pop(tmp_path)
    p.many(10, origin="seed", epoch=0, value=3.2)
    same = idea_block(title="Always the same")
    llm = Scripted(lambda meta, m: same * meta["n"])
    out = policy(ideas_per_epoch=10, batch=5).propose(p.read(), 1, ENV, llm)
    assert len(llm.calls) == 3                                  # 1 + at most 2 follow-ups
    assert len([q for q in out if q.dropped_reason is None]) == 1


# -- counts and failures ----------------------------------------------------------------------------
def test_too_few_asks_again_once_and_too_many_are_truncated(tmp_path):
    p = Pop(tmp_path, baseline=None)
    llm = Scripted([answer(6), answer(4)])
    out = policy(ideas_per_epoch=10).propose(p.read(), 1, ENV, llm)
    assert len(out) == 10 and [c["meta"]["n"] for c in llm.calls] == [10, 4]
    assert "only 6 of the 10" in llm.calls[1]["messages"][2]["content"]
    llm = Scripted([answer(15)])
    out = policy(ideas_per_epoch=10).propose(p.read(), 1, ENV, llm)
    assert len(out) == 10 and len(llm.calls) == 1


def test_unusable_answers_raise_and_partial_success_is_kept(tmp_path):
    p = Pop(tmp_path, baseline=None)
    with pytest.raises(LLMError, match="no usable"):
        policy().propose(p.read(), 1, ENV, Scripted(["no tags at all"] * 3))
    out = policy(ideas_per_epoch=40).propose(p.read(), 30, ENV, Scripted([answer(10)]))
    assert len(out) == 10
    out = policy(ideas_per_epoch=40).propose(p.read(), 1, ENV, Scripted([answer(6)]))  # follow-up fails
    assert len(out) == 6


def test_prompts_dir_overrides_a_template(tmp_path):
    d = tmp_path / "prompts"
    d.mkdir()
    (d / "seed.md").write_text("CUSTOM ${n} ideas for ${metric}\n${task}\n${avoid}\n${format}\n")
    p = Pop(tmp_path, baseline=None)
    llm = Scripted()
    pol = get("evolutionary")(PolicyCfg(ideas_per_epoch=10), prompts_dir=d)
    out = pol.propose(p.read(), 1, ENV, llm)
    assert llm.prompt().startswith("CUSTOM 10 ideas for val_loss")
    assert out[0].prompt_hash != policy(ideas_per_epoch=10).propose(p.read(), 1, ENV, Scripted())[0].prompt_hash


# -- the parser -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,titles,codes", [
    ("[Experiment] Alpha idea.\n[Code Changes] a.py\n[End]\n[Experiment] Beta idea\n[Code Changes] b.py\n[End]",
     ["Alpha idea", "Beta idea"], ["a.py", "b.py"]),
    ("Sure! Here you go:\r\n\r\n1. **[Experiment]** **Cosine to zero**: decay lr to 0.\r\n"
     "**[Code Changes]** train.py get_lr\r\n**[End]**\r\n\r\n2. **[Experiment]** RMSNorm. Swap norms.\r\n"
     "**[Code Changes]** model.py\r\n[End]\r\nHope this helps!",
     ["Cosine to zero", "RMSNorm"], ["train.py get_lr", "model.py"]),
    ("### Idea 1\n[Experiment]: Label smoothing 0.1 on the loss.\n[Code Changes]: add it\n\n"
     "### Idea 2\n[Experiment] Z-loss 1e-4\n[Code Changes] add z loss term\n\nLet me know if you want more!",
     ["Label smoothing 0.1 on the loss", "Z-loss 1e-4"], ["add it", "add z loss term"]),
    ("[experiment] lower case tags\n[code changes] fine\n[end]", ["lower case tags"], ["fine"]),
    ("```\n[Experiment] fenced answer\n[Code Changes] x.py\n```", ["fenced answer"], ["x.py"]),
    ("[Experiment] only an experiment, no code section\n[End]", ["only an experiment, no code section"], [""]),
    ("[Experiment]\n[Code Changes] empty experiment is skipped\n[End]\n[Experiment] kept\n[End]", ["kept"], [""]),
    ("no tags here at all", [], []),
])
def test_parser_robustness(text, titles, codes):
    got = parse_ideas(text)
    assert [g.title for g in got] == titles
    assert [g.code_changes for g in got] == codes
    for g in got:
        assert g.text.startswith("[Experiment] ") and "\r" not in g.text


def test_titles_are_first_sentence_and_bounded():
    long = "[Experiment] " + "word " * 60 + "\n[End]"
    assert len(parse_ideas(long)[0].title) <= 121
    t = parse_ideas("[Experiment] Use lr 3e-4, e.g. the usual value. Then more text.\n[End]")[0].title
    assert t == "Use lr 3e-4, e.g. the usual value"
    assert prompt_hash("x") == prompt_hash("x") != prompt_hash("y")
