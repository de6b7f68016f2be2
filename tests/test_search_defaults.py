"""The search switches behind the default's figures in docs/policies.md (issue 21): the exploit share of
epoch 1 (`exploit_start`), confirming only a lead of more than `confirm_min` standard errors, the noise
pooled over every confirmation (`noise_pool`) and demoted ideas as exploit parents (`exploit_demoted`).
Populations are real git repos; proposals go through the real openai provider to the local fake LLM
server. The confirm_min gate through the whole daemon is in test_trust.py."""

from __future__ import annotations

import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

from fake_llm import FakeLLM
from test_policies import ENV, Pop, policy
from test_search_mechanisms import ideas_answer, provider, user_prompt
from test_search_memory import add_by_model

from autoresearchd import defaults
from autoresearchd import llm as llm_registry

from autoresearchd.config import LLMCfg, PolicyCfg, Price
from autoresearchd.engine.judge import build_note, decide, pooled_noise, repeat_groups, t975
from autoresearchd.llm.ensemble import build
from autoresearchd.policies.evolutionary import schedule
from autoresearchd.store.notes import Note, Status, Trial, format_note
from autoresearchd.store.refs import IDEAS_PREFIX, NOTES_REF

ROOT = Path(__file__).resolve().parent.parent


def test_exploit_start_sets_the_exploit_share_of_the_first_epochs(tmp_path):
    assert PolicyCfg().exploit_start == 0.7
    assert schedule(1, 30, 5, 0.5) == (15, 15)      # the paper's start
    assert schedule(1, 30, 5, 0.7) == (20, 10)      # 21 rounded down to whole batches
    assert schedule(3, 80, 10, 0.7) == (60, 20)     # 0.8, the paper's cap, from epoch 2 on
    assert schedule(9, 80, 1, 0.9) == (72, 8)       # a start above the cap stays where it is
    p = Pop(tmp_path)
    p.add("e000-good0001", "a good idea", value=2.5)
    p.many(30, origin="seed", epoch=0, start=10, value=3.2)     # epoch 0 complete
    with FakeLLM() as fake:
        fake.script(*[ideas_answer] * 6)
        out = policy(ideas_per_epoch=30, batch=5, exploit_start=0.7).propose(p.read(), 30, ENV, provider(fake))
        asked = [user_prompt(r) for r in fake.requests]
    assert [q.origin for q in out] == ["exploit"] * 20 + ["explore"] * 10
    assert all("a good idea" in a for a in asked[:4]) and "## Ideas that worked" not in asked[4]


def test_confirm_min_leaves_a_small_lead_unconfirmed():
    base, std, k = 1.0, 0.01, 3
    se = std * math.sqrt(1 + 1 / k)

    def d(v, best=None, cm=1.0):
        return decide(v, "min", base, std, best, 2.0, True, k=k, confirm_min=cm)
    assert d(base - 0.9 * se) == "within_noise" and d(base - 0.9 * se, cm=0.0) == "pending"
    assert d(base - 1.1 * se) == "pending"
    assert d(0.95 - 0.9 * se, best=0.95) == "improved"     # a small lead over the best: no seeds spent
    assert d(0.95 - 1.1 * se, best=0.95) == "pending"
    assert PolicyCfg().confirm_min == 1.0


def _note(repo, commit, idea_id, values, decision=None):
    trials = [Trial(trial_id=f"{idea_id}-s{s}", seed=s, status=Status.SUCCEEDED, value=v) for s, v in enumerate(values)]
    repo.note_write(NOTES_REF, commit, format_note(Note(
        status=Status.SUCCEEDED, idea_id=idea_id, metric="val_loss", value=statistics.fmean(values),
        std=statistics.stdev(values), values=values, decision=decision, trials=trials,
        seeds=list(range(len(values))))))


def test_noise_pool_uses_every_confirmation_for_the_margin(tmp_path):
    assert pooled_noise([[1.0, 3.0], [2.0, 4.0], [5.0]]) == (math.sqrt(2), 2)
    assert pooled_noise([[1.0], []]) == (None, 0)
    p = Pop(tmp_path, baseline=None)
    # a baseline whose 3 seeds overstate the noise (std 0.04), and 8 confirmed ideas whose fresh seeds
    # say it is 0.005; seed 0 (selected for looking good) is never pooled
    _note(p.repo, p.base, "baseline", [1.0, 1.04, 0.96])
    for j in range(8):
        c = p.add(f"e000-conf{j:04d}", f"confirmed idea {j}")
        _note(p.repo, c, f"e000-conf{j:04d}", [0.89, 0.905, 0.895], decision="confirmed")
    cand = p.add("e001-cand0001", "a clear gain")
    pop = p.read()
    idea = pop.by_commit[cand]
    groups = repeat_groups(pop, exclude=idea.commit)
    assert groups == [[0.905, 0.895]] * 8
    s, dof = pooled_noise([[1.0, 1.04, 0.96]] + groups)
    assert dof == 10 and abs(s - math.sqrt(0.0036 / 10)) < 1e-9
    trial = Trial(trial_id="c-s0", seed=0, status=Status.SUCCEEDED, value=0.8)
    best = statistics.fmean([0.89, 0.905, 0.895])
    # baseline seeds alone: a lead of 0.097 over the best is under 4.30 * 0.04 * 1.15 = 0.199: confirm
    assert 0.199 > best - 0.8 > t975(10) * s * math.sqrt(1 + 1 / 3)
    assert build_note([trial], idea, pop, ENV, PolicyCfg(noise_pool=False)).decision == "pending"
    # pooled: 2.23 * 0.019 * 1.15 = 0.049, so the same lead is clear without spending seeds
    assert build_note([trial], idea, pop, ENV, PolicyCfg(noise_pool=True)).decision == "promoted"
    # a confirmation is judged on the same pooled noise, its own fresh seeds included
    fresh = [Trial(trial_id=f"c-s{j}", seed=j, status=Status.SUCCEEDED, value=0.8) for j in (1, 2)]
    n = build_note([trial] + fresh, idea, pop, ENV, PolicyCfg(noise_pool=True), confirmed=True)
    assert n.decision == "confirmed"


def test_exploit_demoted_shows_a_demoted_idea_that_still_beats_the_baseline(tmp_path):
    p = Pop(tmp_path)
    p.add("e000-demo0001", "demoted but better than the baseline", value=2.9, decision="demoted")
    p.add("e000-demo0002", "demoted and worse than the baseline", value=3.1, decision="demoted")
    p.add("e000-conf0001", "confirmed winner", value=2.95, decision="confirmed")
    p.many(20, origin="seed", epoch=0, start=20, value=3.2)
    prompts = {}
    for flag in (False, True):
        with FakeLLM() as fake:
            fake.script(ideas_answer)
            policy(ideas_per_epoch=20, batch=5, exploit_demoted=flag).propose(p.read(), 1, ENV, provider(fake))
            prompts[flag] = user_prompt(fake.requests[0])
    assert "confirmed winner" in prompts[False] and "demoted but better" not in prompts[False]
    assert "confirmed winner" in prompts[True] and "demoted but better" in prompts[True]
    assert "demoted and worse" not in prompts[True]
    # the confirmed one is still listed first (preferred), the demoted one among the others
    assert prompts[True].index("confirmed winner") < prompts[True].index("demoted but better")


def test_the_ensemble_bandit_counts_the_gpu_time_of_each_models_ideas(tmp_path, monkeypatch):
    monkeypatch.setattr(defaults, "ENSEMBLE_MIN_TRIES", 5)
    p = Pop(tmp_path)                     # baseline 3.0
    # "cheap" proposes for $0.001 and gains 0.06, but its ideas take 3 GPU-hours of runs (they crash
    # and retry, or need confirmation seeds); "pricey" proposes for $0.010, gains 0.10 in 20 GPU-minutes
    for j in range(6):
        for model, usd, value, gpu_s in (("pricey", 0.010, 2.90, 1200.0), ("cheap", 0.001, 2.94, 10800.0)):
            iid = f"e000-{model[:2]}{j:06d}"
            add_by_model(p, iid, model, usd, value)
            commit = p.repo.rev_parse(IDEAS_PREFIX + iid)
            p.repo.note_write(NOTES_REF, commit, format_note(Note(
                status=Status.SUCCEEDED, idea_id=iid, metric="val_loss", value=value, values=[value], gpu_s=gpu_s)))
    picked = {}
    for price in (0.0, 2.0):
        with FakeLLM() as fake:
            prices = {m: Price(input=1.0, output=2.0) for m in ("main-model", "cheap", "pricey")}
            cfg = LLMCfg(provider="openai", base_url=fake.openai_url, model="main-model", max_retries=0,
                         timeout_s=10, prices=prices, ensemble_gpu_usd_per_hour=price,
                         ensemble=[{"provider": "openai", "model": "pricey"}, {"provider": "openai", "model": "cheap"}])
            llm = build(cfg, llm_registry.get("openai")(cfg), llm_registry.get)
            fake.script(ideas_answer)
            policy(ideas_per_epoch=40, batch=5).propose(p.read(), 5, ENV, llm)
            picked[price] = [r.body["model"] for r in fake.requests]
    # LLM spend alone: 60 gain per $ against 10; with $2 per GPU-hour: 0.06 / $6.001 against 0.10 / $0.677
    assert picked == {0.0: ["cheap"], 2.0: ["pricey"]}
    assert LLMCfg().ensemble_gpu_usd_per_hour == defaults.ENSEMBLE_GPU_USD_PER_HOUR == 2.0


def test_the_simulator_runs_the_default_ablation_rows_on_a_chosen_seed_range():
    r = subprocess.run([sys.executable, "bench/search_sim.py", "--seeds", "1", "--first-seed", "7", "--budget", "30",
                        "--jobs", "1", "--variants", "evolutionary, the earlier;- exploit_start;+ noise_pool"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("1 world seeds (from 7), 30 trials each, 3 variants")
    rows = [ln for ln in r.stdout.splitlines() if re.match(r"\| (evolutionary, the earlier|- exploit|\+ noise)", ln)]
    assert len(rows) == 3
