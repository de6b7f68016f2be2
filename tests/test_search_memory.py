"""The lessons scratchpad, the prompt token budget and the model ensemble (issue 21) against real git
populations and the real openai provider talking to the local fake LLM server."""

from __future__ import annotations

import json
import re

import pytest
from fake_llm import FakeLLM, Reply
from popbuilder import write_cfg
from test_policies import ENV, Pop, answer, policy
from test_search_mechanisms import ideas_answer, provider, user_prompt

from autoresearchd import defaults
from autoresearchd import llm as llm_registry
from autoresearchd.config import LLMCfg, Price
from autoresearchd.store.lessons import GitLessonsStore
from autoresearchd.llm.ensemble import build
from autoresearchd.policies.prompting import Listing
from autoresearchd.store.ideas import branch_for, format_message
from autoresearchd.store.notes import Note, Status, format_note
from autoresearchd.store.refs import IDEAS_PREFIX, LESSONS_REF, NOTES_REF
from autoresearchd.views.summary import model_shares

LESSON = "- Worked: rotary warmup (-0.0500)\n- Failed or hurt: fused dropout (crashed)\n- Why: warmup steadies early steps"


def lessons_or_ideas(req):
    first = user_prompt(req)
    if "Condense" in first:
        return Reply(f"```\n{LESSON}\n```", input_tokens=400, output_tokens=40)
    return ideas_answer(req)


def test_lessons_are_condensed_every_k_results_kept_in_git_and_shown_in_every_prompt(tmp_path):
    p = Pop(tmp_path)
    p.many(4, origin="seed", epoch=0, value=2.95)
    p.add("e000-crash01", "fused dropout", status=Status.FAILED, error="Traceback: CUDA error")
    p.many(2, origin="seed", epoch=0, start=10, value=3.1)
    pol = policy(ideas_per_epoch=10, batch=5, lessons_every=5, lessons_store=GitLessonsStore(p.repo))
    with FakeLLM() as fake:
        llm = provider(fake)
        fake.script(*[lessons_or_ideas] * 6)
        out = pol.propose(p.read(), 5, ENV, llm)
        reqs = list(fake.requests)
    cond = user_prompt(reqs[0])
    assert "Condense" in cond and "## Lessons so far\n\n(none yet)" in cond
    assert "e000-crash01" in cond and "CUDA error" in cond       # every new result, failures with their reason
    kept = json.loads(p.repo.read_blob(LESSONS_REF))
    assert kept["text"] == LESSON and kept["updates"] == 1 and len(kept["covered"]) == 7
    assert kept["cost_usd"] == pytest.approx((400 * 1.0 + 40 * 2.0) / 1e6)
    # the ideation prompt after it shows the lessons block; the lessons call is billed to the proposals
    assert "## Lessons from earlier results" in user_prompt(reqs[1]) and LESSON in user_prompt(reqs[1])
    assert sum(q.cost_usd for q in out) == pytest.approx(llm.budget.usd) and llm.budget.by_purpose["lessons"] > 0

    # a restarted daemon (a fresh policy, the same repo) reads the lessons back and does not condense again
    # until K more results are in
    pol2 = policy(ideas_per_epoch=10, batch=5, lessons_every=5, lessons_store=GitLessonsStore(p.repo))
    for q in out:
        p.add(f"e000-{q.title[:8].lower().replace(' ', '')}", q.title, value=3.05)
    with FakeLLM() as fake:
        fake.script(*[lessons_or_ideas] * 6)
        pol2.propose(p.read(), 5, ENV, provider(fake))
        prompts = [user_prompt(r) for r in fake.requests]
    assert "Condense" in prompts[0]
    assert "## Lessons so far\n\n" + LESSON in prompts[0]             # the earlier lessons, to be rewritten
    assert "e000-crash01" not in prompts[0], re.findall(r"^### .*", prompts[0], re.M)
    assert len(re.findall(r"^### ", prompts[0], re.M)) == len(out)     # only the results since
    assert all(LESSON in q for q in prompts[1:])
    with FakeLLM() as fake:
        fake.script(*[lessons_or_ideas] * 6)
        pol2.propose(p.read(), 5, ENV, provider(fake))
        assert not any("Condense" in user_prompt(r) for r in fake.requests)     # nothing new: no call


def test_a_failed_lessons_call_keeps_the_old_lessons_and_the_search_goes_on(tmp_path):
    p = Pop(tmp_path)
    p.many(5, origin="seed", epoch=0, value=2.95)
    pol = policy(ideas_per_epoch=10, batch=5, lessons_every=5, lessons_store=GitLessonsStore(p.repo))
    with FakeLLM() as fake:
        from fake_llm import Status as HTTP
        fake.script(HTTP(400, message="bad request"), *[ideas_answer] * 3)
        out = pol.propose(p.read(), 5, ENV, provider(fake))
    assert len([q for q in out if q.dropped_reason is None]) == 5
    assert p.repo.read_blob(LESSONS_REF) is None


def test_the_prompt_token_budget_keeps_prompts_flat_and_says_what_it_left_out(tmp_path):
    p = Pop(tmp_path)
    long = " ".join(f"word{j}" for j in range(200))
    for j in range(60):
        p.add(f"e000-win{j:05d}", f"winner number {j}", value=2.5 + 0.001 * j,
              text=f"[Experiment] winner number {j}. {long} u{j}")
    p.many(20, origin="seed", epoch=0, start=100, value=3.3)
    pop = p.read()
    sizes = {}
    for budget in (None, 3000):
        with FakeLLM() as fake:
            fake.script(*[ideas_answer] * 3)
            policy(ideas_per_epoch=80, batch=5, max_parents=100,
                   prompt_token_budget=budget).propose(pop, 5, ENV, provider(fake))
            sizes[budget] = user_prompt(fake.requests[0])
    assert len(sizes[None]) > 4 * 3000 * 2                    # unbounded: every winner in full
    assert len(sizes[3000]) <= 3000 * defaults.CHARS_PER_TOKEN
    m = re.search(r"\((\d+) more not shown: prompt budget\)", sizes[3000])
    shown = len(re.findall(r"^### e000-win", sizes[3000], re.M))
    assert m and shown >= 5 and shown + int(m.group(1)) == 60
    # a Listing keeps whole entries, the newest when keep="last"
    lst = Listing([f"- title number {j}" for j in range(20)], sep="\n", keep="last")
    lines = lst.render(150).split("\n")
    assert lines[-1] == "- title number 19" and lines[0].endswith("earlier not shown: prompt budget)") and len(lines) >= 3


def add_by_model(p: Pop, idea_id: str, model: str, usd: float, value: float | None, status=Status.SUCCEEDED):
    """An idea the daemon wrote, proposed by `model` for `usd` (its Idea-Model / Idea-Cost-USD trailers)."""
    tree = p.repo.tree_with_files(p.base, {f"ideas/{idea_id}.txt": idea_id.encode()})
    msg = format_message(idea_id, f"[Experiment] {idea_id} q{idea_id}", {
        "Idea-Id": idea_id, "Origin": "seed", "Epoch": 0, "Model": "implementer-model", "Idea-Model": model,
        "Idea-Cost-USD": f"{usd:.6f}"})
    c = p.repo.commit_tree(tree, [p.base], msg)
    p.repo.update_ref(IDEAS_PREFIX + idea_id, c)
    p.repo.update_ref(branch_for(idea_id, idea_id, "seed"), c)
    p.repo.note_write(NOTES_REF, c, format_note(Note(
        status=status, idea_id=idea_id, metric="val_loss", value=value, values=[value] if value else [])))


def ensemble(fake) -> object:
    prices = {m: Price(input=1.0, output=2.0) for m in ("main-model", "cheap", "pricey")}
    cfg = LLMCfg(provider="openai", base_url=fake.openai_url, model="main-model", max_retries=0, timeout_s=10,
                 prices=prices, ensemble=[{"provider": "openai", "model": "pricey"},
                                          {"provider": "openai", "model": "cheap", "base_url": fake.openai_url}])
    return build(cfg, llm_registry.get("openai")(cfg), llm_registry.get)


def test_the_ensemble_tries_each_model_then_picks_by_improvement_per_dollar(tmp_path, monkeypatch):
    monkeypatch.setattr(defaults, "ENSEMBLE_MIN_TRIES", 5)
    p = Pop(tmp_path)                     # baseline 3.0
    with FakeLLM() as fake:
        llm = ensemble(fake)
        fake.script(*[ideas_answer] * 4)
        out = policy(ideas_per_epoch=40, batch=5).propose(p.read(), 10, ENV, llm)
        used = [r.body["model"] for r in fake.requests]
        # the base_url of a member without one is the main one's: both reach the same server
        assert {q.model for q in out} == {"pricey", "cheap"} and sorted(used) == ["cheap", "pricey"]
    # both have a record: "pricey" gains 0.10 per idea for $0.010, "cheap" 0.06 for $0.001
    for j in range(6):
        add_by_model(p, f"e000-pr{j:06d}", "pricey", 0.010, 2.90)
        add_by_model(p, f"e000-ch{j:06d}", "cheap", 0.001, 2.94 if j < 5 else None,
                     Status.SUCCEEDED if j < 5 else Status.FAILED)
    with FakeLLM() as fake:
        llm = ensemble(fake)
        fake.script(*[ideas_answer] * 2)
        out = policy(ideas_per_epoch=40, batch=5).propose(p.read(), 5, ENV, llm)
        assert [r.body["model"] for r in fake.requests] == ["cheap"]
        assert all(q.model == "cheap" for q in out)
        # other calls go to the main model: the implementer stays one model
        llm.complete([{"role": "user", "content": "write a diff"}], purpose="implement")
        assert fake.requests[-1].body["model"] == "main-model"
    rows = {r["model"]: r for r in model_shares(p.read(), ENV)}
    assert rows["pricey"]["share"] == pytest.approx(0.5) and rows["cheap"]["usd"] == pytest.approx(0.006)
    assert rows["cheap"]["gain_per_usd"] == pytest.approx(5 * 0.06 / 0.006)


def test_status_shows_each_proposing_models_share_and_cost(tmp_path):
    import os
    import subprocess
    import sys
    p = Pop(tmp_path)
    add_by_model(p, "e000-pr000001", "pricey", 0.02, 2.9)
    add_by_model(p, "e000-ch000001", "cheap<b>[red]", 0.001, 2.95)
    add_by_model(p, "e000-ch000002", "cheap<b>[red]", 0.001, 3.1)
    cfg = write_cfg(tmp_path, p.repo.path, '[env]\nname = "t"\nrun = "true"\nmetric = "val_loss"\n'
                                           'goal = "min"\ntime_budget_s = 60\n')
    r = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "status"],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="250"))
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("proposing models:"))
    assert "cheap<b>[red] 67% (2 ideas, $0.0020" in line and "pricey 33% (1 ideas, $0.0200" in line


def test_ensemble_keys_are_validated():
    with pytest.raises(ValueError):
        LLMCfg(ensemble=[{"provider": "openai", "model": "a"}, {"provider": "anthropic", "model": "a"}])
    with pytest.raises(ValueError):
        LLMCfg(ensemble=[{"provider": "replay", "model": "a"}])
    with pytest.raises(ValueError):
        LLMCfg(ensemble=[{"provider": "openai"}])


def test_the_daemon_wires_the_ensemble_and_keeps_lessons_and_the_proposing_model_in_git(toy_env, tmp_path):
    from conftest import write_config

    from autoresearchd.app import build_daemon
    from autoresearchd.config import load_config
    from autoresearchd.llm.ensemble import Ensemble
    from autoresearchd.store.population import read_population
    with FakeLLM() as fake:
        cfg = write_config(tmp_path, toy_env, f'base_url = "{fake.openai_url}"\nmodel = "main-model"\n'
                                              'budget_usd = 5\nensemble = [{provider = "openai", model = "a"}, '
                                              '{provider = "openai", model = "b"}]\n'
                                              '[llm.prices.main-model]\ninput = 1.0\noutput = 2.0\n'
                                              '[llm.prices.a]\ninput = 1.0\noutput = 2.0\n')
        text = cfg.read_text().replace('provider = "none"', 'provider = "openai"')
        cfg.write_text(text.replace("[policy]\n", "[policy]\nlessons_every = 3\nbatch = 2\n"))
        from autoresearchd.config import ConfigError
        with pytest.raises(ConfigError, match="model 'b' has no price"):
            build_daemon(load_config(cfg))
        cfg.write_text(cfg.read_text() + '[llm.prices.b]\ninput = 0.1\noutput = 0.2\n')
        d = build_daemon(load_config(cfg))
        assert isinstance(d.llm, Ensemble) and set(d.llm.members) == {"a", "b"} and "ensemble a, b" in d.llm_note
        assert isinstance(d.policy.lessons_store, GitLessonsStore)
        fake.script(*[ideas_answer] * 2)
        pop = read_population(d.repo, d.research.baseline_ref)
        props = d.policy.propose(pop, 2, d.research.manifest, d.llm)
        ids = [d.implementer.record_proposal(q) for q in props]
    pop = read_population(d.repo, d.research.baseline_ref)
    assert {pop.by_id[i].trailers.idea_model for i in ids} == {"a"}          # the first model tried
    assert fake.requests[0].body["model"] == "a"


def test_the_simulator_runs_the_lessons_and_ensemble_rows_and_prints_prompt_sizes():
    import subprocess
    import sys
    from pathlib import Path
    r = subprocess.run([sys.executable, "bench/search_sim.py", "--seeds", "1", "--budget", "80", "--jobs", "1",
                        "--prompt-sizes", "--variants", "+ lessons (every 10 results), prompt;+ ensemble (strong"],
                       cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "| + lessons (every 10 results), prompt budget 1500 | " in out and "| + ensemble (strong" in out
    assert re.search(r"\+ ensemble \(strong \+ cheap, UCB per \$ of LLM and GPU\): "
                     r"sim-cheap \d+%, sim-ideator \d+%", out)
    sizes = next(ln for ln in out.splitlines() if ln.startswith("| + lessons") and "±" not in ln)
    cells = [int(c) for c in re.findall(r"\| (\d+) ", sizes + " ")]
    assert len(cells) >= 2 and all(c <= 1500 + 200 for c in cells)     # the page's budget + the system prompt


def test_doctor_checks_each_ensemble_models_key_and_price(monkeypatch):
    from autoresearchd.config import Config
    from autoresearchd.validate import llm_findings
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-main")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    cfg = Config.model_validate({"llm": {
        "provider": "openai", "model": "gpt-5.5", "budget_usd": 1.0,
        "ensemble": [{"provider": "openai", "model": "gpt-5.5"}, {"provider": "anthropic", "model": "claude-x"}]}})
    msgs = [f.what for f in llm_findings(cfg, None)]
    assert any("'claude-x' (anthropic) needs the environment variable ANTHROPIC_API_KEY" in m for m in msgs)
    assert any("model 'claude-x' has no price" in m for m in msgs)
    assert not any("gpt-5.5" in m for m in msgs)          # the main provider's key and shipped price serve it


def test_best_of_n_condenses_and_shows_no_lessons(tmp_path):
    p = Pop(tmp_path)
    p.many(6, origin="best_of_n", epoch=0, value=2.95)
    with FakeLLM() as fake:
        fake.script(*[lessons_or_ideas] * 3)
        policy("best_of_n", ideas_per_epoch=40, batch=5, lessons_every=2).propose(p.read(), 5, ENV, provider(fake))
        assert not any("Condense" in user_prompt(r) or "## Lessons" in user_prompt(r) for r in fake.requests)
