"""The search mechanisms of issue 21 (islands, inspiration sampling, the novelty gate) against real git
populations and the real openai provider talking to the local fake LLM server; and the search
simulator (bench/search_sim.py) run as a real subprocess on a tiny budget."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_llm import FakeLLM, Reply
from test_policies import ENV, Pop, answer, idea_block, policy

from autoresearchd.config import LLMCfg, PolicyCfg, Price
from autoresearchd.llm.openai_provider import OpenAIProvider
from autoresearchd.policies.diversity import island_of
from autoresearchd.store.notes import Status

ROOT = Path(__file__).resolve().parent.parent


def provider(fake: FakeLLM) -> OpenAIProvider:
    return OpenAIProvider(LLMCfg(provider="openai", base_url=fake.openai_url, model="test-model",
                                 max_retries=0, backoff_s=0.01, timeout_s=10,
                                 prices={"test-model": Price(input=1.0, output=2.0)}))


def ideas_answer(req):
    """Answer a propose request with as many fresh ideas as the prompt asks for."""
    last = req.body["messages"][-1]["content"]
    m = re.search(r"(?:write|Propose) (\d+)", last) or re.search(r"exactly (\d+)", last)
    return Reply(answer(int(m.group(1)) if m else 1))


def user_prompt(req) -> str:
    return next(m["content"] for m in req.body["messages"] if m["role"] == "user")


def winners(p: Pop, n: int) -> list[str]:
    ids = [f"e000-win{j:05d}" for j in range(n)]
    for j, iid in enumerate(ids):
        p.add(iid, f"winner number {j}", value=2.5 + 0.05 * j, decision="confirmed" if j == 0 else None)
    return ids


def test_islands_split_exploit_parents_and_migrate_confirmed_winners(tmp_path):
    p = Pop(tmp_path)
    ids = winners(p, 8)
    p.many(12, origin="seed", epoch=0, start=20, value=3.2)
    pop = p.read()
    home = {iid: island_of(pop.by_id[iid], pop, 2) for iid in ids}
    assert set(home.values()) == {0, 1}, "the hash split put every winner on one island"
    with FakeLLM() as fake:
        fake.script(*[ideas_answer] * 4)
        # epoch 1 (odd): no migration with migration_epochs = 2; two exploit batches = islands 0 and 1
        policy(ideas_per_epoch=20, batch=5, islands=2, migration_epochs=2).propose(pop, 10, ENV, provider(fake))
        shown = [set(re.findall(r"^### (e000-win\d{5})", user_prompt(r), re.M)) for r in fake.requests[:2]]
    for island, seen in enumerate(shown):
        assert seen == {i for i in ids if home[i] == island}
    # a child lives on its parent's island, whatever its own id hashes to
    p.add("e001-child001", "child of the confirmed winner", origin="exploit", epoch=1, value=2.4, on=ids[0])
    pop = p.read()
    assert island_of(pop.by_id["e001-child001"], pop, 2) == home[ids[0]]
    # epoch 2 (divisible by 2): the confirmed winner migrates to the other island
    p.many(10, origin="explore", epoch=1, start=40, value=3.3)
    p.many(9, origin="exploit", epoch=1, start=60, value=3.3, on=ids[1])
    other = 1 - home[ids[0]]
    with FakeLLM() as fake:
        fake.script(*[ideas_answer] * 4)
        policy(ideas_per_epoch=20, batch=5, islands=2, migration_epochs=2).propose(p.read(), 10, ENV,
                                                                                   provider(fake))
        prompts = [user_prompt(r) for r in fake.requests[:2]]
    assert ids[0] in prompts[other]
    assert all(home[i] == other for i in re.findall(r"^### (e000-win\d{5})", prompts[other], re.M) if i != ids[0])


def test_inspiration_shows_the_best_first_then_a_diverse_sample_of_the_rest(tmp_path):
    p = Pop(tmp_path)
    winners(p, 6)
    p.add("e000-lose0001", "slower warmup that did not help", value=3.05)
    p.add("e000-fail0001", "fused kernel that crashed", status=Status.FAILED,
          error="CUDA error: illegal memory access")
    p.add("e000-demo0001", "demoted lucky seed", value=2.0, decision="demoted")
    p.many(12, origin="seed", epoch=0, start=20, value=3.2)
    with FakeLLM() as fake:
        fake.script(ideas_answer)
        out = policy(ideas_per_epoch=21, batch=5, max_parents=6, inspiration="top_diverse").propose(
            p.read(), 1, ENV, provider(fake))
        prompt = user_prompt(fake.requests[0])
    top, _, rest = prompt.partition("## Other experiments, for inspiration")
    assert rest, "no inspiration section in the exploit prompt"
    assert re.findall(r"^### (e000-win\d{5})", top, re.M) == ["e000-win00000", "e000-win00001", "e000-win00002"]
    rest = rest.split("## What I want")[0]
    assert len(re.findall(r"^### ", rest, re.M)) == 3
    assert "demoted lucky seed" not in prompt
    assert out[0].origin == "exploit"
    # the sample is diverse: drawn from the whole history, so losers and failures can be shown
    with FakeLLM() as fake:
        fake.script(*[ideas_answer] * 30)
        seen = set()
        for seed in range(6):
            policy(ideas_per_epoch=21, batch=5, max_parents=6, inspiration="top_diverse", seed=seed).propose(
                p.read(), 1, ENV, provider(fake))
            seen |= set(re.findall(r"^### (e000-\w{8})", user_prompt(fake.requests[-1]).split("for inspiration")[1],
                                   re.M))
    assert {"e000-lose0001", "e000-fail0001"} <= seen


NEAR = ("[Experiment] Cosine decay after linear warmup. Switch the learning rate schedule to cosine decay "
        "with 300 warmup steps, ending at ten percent of peak.\n[Code Changes] edit train.py get_lr function.\n"
        "[End]\n")
PAST = ("[Experiment] Cosine warmup schedule. Use a cosine learning rate schedule with 500 warmup steps "
        "and decay to ten percent of the peak.\n[Code Changes] edit train.py get_lr.")


@pytest.mark.parametrize("judge_says", [None, "SAME", "DIFFERENT"])
def test_novelty_gate_sends_near_variants_back_and_the_judge_decides_borderline_pairs(tmp_path, judge_says):
    p = Pop(tmp_path)
    p.add("e000-cosw0001", "Cosine warmup schedule", value=2.9, text=PAST)
    p.many(3, origin="seed", epoch=0, start=20, value=3.2)
    cfg = {"ideas_per_epoch": 40, "batch": 2, "novelty_threshold": 80, "novelty_judge": judge_says is not None}
    with FakeLLM() as fake:
        fake.script(Reply(NEAR + idea_block()))
        if judge_says:
            fake.script(Reply(judge_says))
        fake.script(ideas_answer)
        llm = provider(fake)
        out = policy(**cfg).propose(p.read(), 2, ENV, llm)
        bodies = [json.dumps(r.body) for r in fake.requests]
        provider_spend = [llm.budget.usd]
    near = [q for q in out if q.title.startswith("Cosine decay")]
    assert len(near) == 1
    # every call is billed to some proposal: the judge's to the proposal it judged
    fake_cost = sum(q.cost_usd for q in out)
    assert provider_spend[0] > 0 and abs(fake_cost - provider_spend[0]) < 1e-9
    if judge_says == "DIFFERENT":
        assert near[0].dropped_reason is None
        assert len(bodies) == 2                          # the proposal, the judge: no follow-up needed
    else:
        assert near[0].dropped_reason.startswith("too close to (novelty gate) e000-cosw0001")
        assert near[0].duplicate_of == "e000-cosw0001"
        assert "too close to (novelty gate)" in bodies[-1]       # sent back for a different idea
        assert len([q for q in out if q.dropped_reason is None]) == 2
    assert ("SAME or DIFFERENT" in bodies[1]) == (judge_says is not None)
    # without the gate the same reworded idea passes: it is not a duplicate by the default rule
    with FakeLLM() as fake:
        fake.script(Reply(NEAR + idea_block()))
        out = policy(ideas_per_epoch=40, batch=2).propose(p.read(), 2, ENV, provider(fake))
    assert all(q.dropped_reason is None for q in out)


def test_mechanism_keys_are_validated():
    with pytest.raises(ValueError):
        PolicyCfg(inspiration="everything")
    with pytest.raises(ValueError):
        PolicyCfg(islands=0)
    with pytest.raises(ValueError):
        PolicyCfg(novelty_threshold=150)


def test_search_simulator_runs_and_prints_the_table():
    r = subprocess.run([sys.executable, "bench/search_sim.py", "--seeds", "2", "--budget", "20", "--jobs", "1",
                        "--variants", "paper,evolutionary (ours)"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| paper") or ln.startswith("| evolutionary")]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert re.fullmatch(r"-?\d+\.\d{4} ± \d+\.\d{4}", cells[1]), cells
        assert re.fullmatch(r"\d+/2", cells[6]), cells
