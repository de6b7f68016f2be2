"""Search quality in a simulated research world: every policy at an equal trial budget over many
world seeds, with the real policies, prompts, parser and OpenAI provider talking to a simulated
ideator over local HTTP (bench/search_ideator.py). The world is bench/search_world.py (fixed).

    python bench/search_sim.py [--seeds 20] [--budget 150] [--variants a,b] [--markdown]

Per run it records: the TRUE effect of the idea the search would report as its best (not its noisy
measurement), false promotions (a new best whose true effect is not above the previous best's),
duplicates run (ideas executed whose technique set had already been executed), and trials until the
reported best reaches 90% of the world's reachable optimum (runs that never reach it count as the
budget; the table also gives the share that reached it). Each as a mean with a 95% interval.

Our loop here mirrors the daemon's: a queue refilled batch by batch (no epoch barrier), a baseline
measured over `baseline_seeds`, noise-aware decisions with confirmation seeds (daemon.decide), and
duplicates dropped by the policy. The paper's rule: whole epochs proposed before any of their results
(a barrier), one baseline run, every idea one run, the best single noisy run wins, no dedupe.
"""

from __future__ import annotations

import argparse
import functools
import json
import hashlib
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import search_world as W  # noqa: E402
from search_ideator import Ideator, IdeatorServer  # noqa: E402

from autoresearchd import policies  # noqa: E402
from autoresearchd.config import LLMCfg, PolicyCfg, Price  # noqa: E402
from autoresearchd.engine.judge import decide, noise_estimate  # noqa: E402
from autoresearchd.llm.ensemble import Ensemble  # noqa: E402
from autoresearchd.llm.openai_provider import OpenAIProvider  # noqa: E402
from autoresearchd.manifest import EnvManifest  # noqa: E402
from autoresearchd.store.ideas import Idea, make_idea_id  # noqa: E402
from autoresearchd.store.notes import BEST_DECISIONS, Note, Status, Trial  # noqa: E402
from autoresearchd.store.population import Population  # noqa: E402
from autoresearchd.store.trailers import Trailers  # noqa: E402

ENV = EnvManifest(name="sim", run="true", metric="val_loss", goal="min", time_budget_s=600,
                  context="Improve the training recipe of a small language model.")
SIM = dict(ideas_per_epoch=30, batch=5, max_parents=30)   # the paper's 80/10/100, scaled to the budget
MAX_STALLS = 10      # proposal rounds in a row with nothing new: the search ends before its budget
PAPER = dict(barrier=True, noise=False, dedupe=False)
# The prompt token budget of the lessons rows: about half of what a full exploit prompt of this scaled
# search grows to (30 shown ideas and the epoch's titles), so the budget binds.
BUDGET_TOKENS = 1500
# The simulated models: name -> (USD per million input / output tokens, extra prior noise). sim-ideator
# is the ideator every other row uses; sim-cheap costs a fifth and knows the literature less well (its
# prior gets extra noise of half the world's prior noise; with the full prior noise, tried first in a
# 2-seed development run, it found nothing at all, which makes the bandit's choice trivial).
MODELS = {"sim-ideator": (1.0, 4.0, 0.0), "sim-cheap": (0.2, 0.8, W.PRIOR_NOISE / 2)}

# Every simulated trial takes the manifest's time budget on one GPU: what the ensemble's bandit prices
# (ensemble_gpu_usd_per_hour) on top of the LLM spend.
TRIAL_GPU_S = float(ENV.time_budget_s)

# The default search as it was before the two switches this table justified (docs/policies.md)
OLD_DEFAULTS = {"exploit_start": 0.5, "confirm_min": 0.0}

# name -> (policy, PolicyCfg overrides, loop flags)
VARIANTS: dict[str, tuple[str, dict, dict]] = {
    "paper rule (evolutionary, barrier, best single run)": ("evolutionary", {"exploit_start": 0.5}, PAPER),
    "best_of_n": ("best_of_n", {}, {}),
    "greedy": ("greedy", {}, {}),
    "evolutionary (ours)": ("evolutionary", {}, {}),
    "evolutionary, the earlier default (exploit_start 0.5, confirm_min 0)": ("evolutionary", OLD_DEFAULTS, {}),
    "- exploit_start = 0.5 (the paper's schedule)": ("evolutionary", {"exploit_start": 0.5}, {}),
    "- confirm_min = 0 (confirm any lead)": ("evolutionary", {"confirm_min": 0.0}, {}),
    "+ noise_pool (noise pooled over all confirmations)": ("evolutionary", {"noise_pool": True}, {}),
    "+ exploit_demoted (demoted ideas stay parents)": ("evolutionary", {"exploit_demoted": True}, {}),
    "evolutionary, baseline_seeds = 5": ("evolutionary", {"baseline_seeds": 5}, {}),
    "+ islands (3, migration every 2 epochs)": ("evolutionary", {"islands": 3}, {}),
    "+ inspiration (top + diverse)": ("evolutionary", {"inspiration": "top_diverse"}, {}),
    "+ novelty gate (80)": ("evolutionary", {"novelty_threshold": 80}, {}),
    "+ novelty gate (80) with LLM judge": ("evolutionary", {"novelty_threshold": 80, "novelty_judge": True}, {}),
    "+ all of the above": ("evolutionary", {"islands": 3, "inspiration": "top_diverse",
                                            "novelty_threshold": 80, "novelty_judge": True}, {}),
    f"+ prompt budget ({BUDGET_TOKENS} tokens), no lessons": ("evolutionary",
                                                              {"prompt_token_budget": BUDGET_TOKENS}, {}),
    f"+ lessons (every 10 results), prompt budget {BUDGET_TOKENS}": (
        "evolutionary", {"lessons_every": 10, "prompt_token_budget": BUDGET_TOKENS}, {}),
    "+ lessons (every 10 results), no budget": ("evolutionary", {"lessons_every": 10}, {}),
    "evolutionary, cheap model only": ("evolutionary", {}, {"models": ["sim-cheap"]}),
    "+ ensemble (strong + cheap, UCB per $ of LLM and GPU)": ("evolutionary", {},
                                                               {"models": ["sim-ideator", "sim-cheap"]}),
    "+ ensemble, UCB per $ of LLM only": ("evolutionary", {}, {"models": ["sim-ideator", "sim-cheap"],
                                                                "gpu_usd_per_hour": 0.0}),
}


# Rows run only when named in --variants, so the default table stays under 10 minutes on 2 cores: an
# earlier check of baseline_seeds, and every mechanism at once (docs/policies.md has both figures).
OPT_IN = {"evolutionary, baseline_seeds = 5", "+ all of the above"}


@functools.lru_cache(maxsize=None)
def _optimum(wseed: int) -> float:
    return W.World.make(wseed).optimum()


def _trial(seed: int, value: float) -> Trial:
    return Trial(trial_id=f"s{seed}", seed=seed, status=Status.SUCCEEDED, value=value)


def _sha(*parts) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()


class Run:
    """One search in one world. `go()` returns its metrics."""

    def __init__(self, srv, wseed: int, budget: int, policy: str, overrides: dict, flags: dict):
        self.w = W.World.make(wseed)
        self.ideator = srv.ideator = Ideator(self.w)
        models = flags.get("models", ["sim-ideator"])
        srv.ideators = {m: (self.ideator if m == "sim-ideator" else Ideator(self.w, seed=j, prior_noise=MODELS[m][2]))
                        for j, m in enumerate(models)}
        self.srv = srv
        self.budget, self.flags = budget, flags
        cfg = PolicyCfg(name=policy, seed=wseed, **{**SIM, **overrides})
        if flags.get("dedupe") is False:
            cfg.duplicate_threshold = 101.0           # token_set_ratio never exceeds 100: no dedupe
        self.cfg = cfg
        self.policy = policies.get(policy)(cfg)
        prices = {m: Price(input=i, output=o) for m, (i, o, _) in MODELS.items()}
        gpu_price = flags.get("gpu_usd_per_hour", LLMCfg().ensemble_gpu_usd_per_hour)
        llms = {m: OpenAIProvider(LLMCfg(provider="openai", base_url=srv.base_url, model=m, max_retries=0,
                                         prices=prices, ensemble_gpu_usd_per_hour=gpu_price)) for m in models}
        self.llm = llms[models[0]]
        if len(models) > 1:      # proposals by the bandit's model, the rest (lessons, judge) by the first
            self.llm = Ensemble(self.llm, llms)
            for p in llms.values():
                p.budget = self.llm.budget
        self.rng = random.Random(f"trials-{wseed}")
        self.ideas: list[Idea] = []
        self.techs: dict[str, frozenset] = {}          # commit -> techniques
        self.true: dict[str, float] = {}
        self.ran: set[frozenset] = set()
        self.trials = 0
        self.m = dict(false_promotions=0, duplicates_run=0, dropped=0, implement_failed=0, crashed=0,
                      usd=0.0, trials_to_90=None, prompts=[], models={})
        self.pick: Idea | None = None

    # -- measuring ------------------------------------------------------------------------------
    def _baseline(self) -> None:
        k = 1 if self.flags.get("noise") is False else self.cfg.baseline_seeds
        vals = [W.BASELINE + self.rng.gauss(0, W.NOISE_SD) for _ in range(k)]
        self.trials += k
        self.bnote = Note(status=Status.SUCCEEDED, value=statistics.fmean(vals), values=vals,
                          std=statistics.stdev(vals) if k > 1 else None, seeds=list(range(k)))
        self.bvals = vals

    def _best_value(self) -> float | None:
        vals = [i.note.value for i in self.ideas if i.note and i.note.decision in BEST_DECISIONS]
        return min(vals) if vals else None

    def _measure(self, idea: Idea, techs: frozenset) -> Note:
        v = self.w.run(techs, self.rng)
        self.trials += 1
        if v is None:
            self.m["crashed"] += 1
            return Note(status=Status.FAILED, exit_code=1, error="Traceback: RuntimeError: CUDA error",
                        gpu_s=TRIAL_GPU_S)
        note = Note(status=Status.SUCCEEDED, value=v, values=[v], seeds=[0], baseline=self.bnote.value,
                    trials=[_trial(0, v)], gpu_s=TRIAL_GPU_S)
        if self.flags.get("noise") is False:
            if v < min([i.note.value for i in self.ideas if i.value is not None] + [self.bnote.value]):
                note.decision = "promoted"              # the paper: the best single run wins
            return note
        c = self.cfg
        k = len(self.bvals)
        pop = Population(list(self.ideas), "0" * 40, self.bnote)      # the noise estimate is the judge's
        noise, _, dof = noise_estimate(pop, idea, None, c)
        d = decide(v, "min", self.bnote.value, noise, self._best_value(), c.noise_mult,
                   c.confirm_seeds > 0, k=k, dof=dof, confirm_min=c.confirm_min)
        if d == "pending":
            fresh = [self.w.run(techs, self.rng) for _ in range(c.confirm_seeds)]
            self.trials += c.confirm_seeds
            note.gpu_s += c.confirm_seeds * TRIAL_GPU_S
            fresh = [x for x in fresh if x is not None]
            if fresh:
                noise, spread, dof = noise_estimate(pop, idea, fresh, c)
                d = decide(statistics.fmean(fresh), "min", self.bnote.value, noise, self._best_value(),
                           c.noise_mult, True, confirmed=True, n=len(fresh), k=k, std=spread, dof=dof)
                note.values = [v] + fresh
                note.value = statistics.fmean(note.values)
                note.trials += [_trial(j + 1, x) for j, x in enumerate(fresh)]
            else:
                d = "demoted"
        note.decision = d
        return note

    def _track(self, idea: Idea) -> None:
        if idea.note.decision not in BEST_DECISIONS:
            return
        prev = self.true[self.pick.commit] if self.pick else 0.0
        if self.flags.get("noise") is not False and self.pick is not None \
                and idea.note.value >= self.pick.note.value:
            return
        if self.true[idea.commit] <= prev:
            self.m["false_promotions"] += 1
        self.pick = idea
        if self.m["trials_to_90"] is None and self.true[idea.commit] >= 0.9 * self.opt:
            self.m["trials_to_90"] = self.trials

    # -- the loop -------------------------------------------------------------------------------
    def go(self) -> dict:
        self.opt = _optimum(self.w.seed)
        self._baseline()
        barrier = self.flags.get("barrier", False)
        stalls = 0
        while self.trials < self.budget:
            pop = Population(list(self.ideas), "0" * 40, self.bnote)
            epoch, done = self.policy.cursor(pop)
            n = self.cfg.ideas_per_epoch - done if barrier else self.cfg.batch
            k0 = len(self.srv.prompts)
            props = self.policy.propose(pop, n, ENV, self.llm)
            self.m["prompts"] += [(epoch, tok) for kind, tok in self.srv.prompts[k0:] if kind == "propose"]
            if not any(p.dropped_reason is None for p in props):
                stalls += 1                  # only duplicates: the ideator is saturated
                if stalls >= MAX_STALLS or not props:
                    break
                continue
            stalls = 0
            for p in props:
                self.m["usd"] += p.cost_usd
                commit = _sha(self.w.seed, len(self.ideas), p.text)
                idea = Idea(idea_id=make_idea_id(p.text, p.epoch, commit[:6]), commit=commit, title=p.title,
                            text=p.text, base_commit=p.base_commit, committed_at=len(self.ideas),
                            trailers=Trailers(origin=p.origin, parents=tuple(p.parents), epoch=p.epoch,
                                              idea_model=p.model, idea_cost_usd=float(f"{p.cost_usd:.6f}")))
                self.m["models"][p.model] = self.m["models"].get(p.model, 0) + 1
                if p.dropped_reason:
                    idea.note = Note(status=Status.DUPLICATE, duplicate_of=p.duplicate_of, error=p.dropped_reason)
                    self.m["dropped"] += 1
                    self.ideas.append(idea)
                    continue
                if self.trials >= self.budget:
                    break
                techs = frozenset(self.ideator.techs(p.text)) | self.techs.get(p.base_commit or "", frozenset())
                self.techs[commit], self.true[commit] = techs, self.w.true_effect(techs)
                if not techs or self.w.implement_fails(techs, self.rng):
                    self.m["implement_failed"] += 1
                    idea.note = Note(status=Status.IMPLEMENT_FAILED, error="the diff did not apply after 2 revisions")
                else:
                    if techs in self.ran:
                        self.m["duplicates_run"] += 1
                    self.ran.add(techs)
                    idea.note = self._measure(idea, techs)
                self.ideas.append(idea)
                if idea.note.status == Status.SUCCEEDED:
                    self._track(idea)
        best = self.true[self.pick.commit] if self.pick else 0.0
        self.m.update(true_best=best, opt=self.opt, share_of_opt=best / self.opt if self.opt else 0.0,
                      reached_90=self.m["trials_to_90"] is not None, trials=self.trials,
                      no_best=self.pick is None)
        if self.m["trials_to_90"] is None:
            self.m["trials_to_90"] = self.budget
        return self.m


def ci95(xs: list[float]) -> tuple[float, float]:
    """Mean and the half-width of a t-based 95% interval."""
    from autoresearchd.engine.judge import t975
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, t975(len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5


_SRV = None


def _one(job: tuple[str, int, int]) -> dict:
    """One (variant, world seed) run; each worker process keeps its own ideator server."""
    global _SRV
    name, seed, budget = job
    if _SRV is None:
        _SRV = IdeatorServer().__enter__()
    policy, over, flags = VARIANTS[name]
    return Run(_SRV, seed, budget, policy, over, flags).go()


def simulate(seeds: int, budget: int, names: list[str], jobs: int = 1, log=None,
             first: int = 0) -> dict[str, list[dict]]:
    """Seed-major order, so a run cut short has the same world seeds for every variant; `log` (a
    file) gets one JSON line per finished run, so partial results survive (see --from-log)."""
    work = [(name, s, budget) for s in range(first, first + seeds) for name in names]
    out: dict[str, list[dict]] = {name: [] for name in names}
    pool = None
    if jobs > 1:
        import multiprocessing
        pool = multiprocessing.get_context("fork").Pool(jobs)
    try:
        runs = pool.imap(_one, work, chunksize=1) if pool else map(_one, work)
        for (name, seed, _), r in zip(work, runs):
            out[name].append(r)
            if log is not None:
                log.write(json.dumps({"variant": name, "seed": seed, **r}) + "\n")
                log.flush()
    finally:
        if pool:
            pool.terminate()
    return out


def from_log(path: str) -> dict[str, list[dict]]:
    """Results from a --log file, keeping only the world seeds every variant finished."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    names = list(dict.fromkeys(r["variant"] for r in rows))
    done = set.intersection(*({r["seed"] for r in rows if r["variant"] == n} for n in names))
    return {n: [r for r in rows if r["variant"] == n and r["seed"] in done] for n in names}


def table(res: dict[str, list[dict]], markdown: bool = True) -> str:
    cols = [("true_best", "true effect of best", "{:.4f}"), ("share_of_opt", "share of optimum", "{:.0%}"),
            ("false_promotions", "false promotions", "{:.2f}"), ("duplicates_run", "duplicates run", "{:.1f}"),
            ("trials_to_90", "trials to 90%", "{:.0f}")]
    head = ["variant"] + [c[1] for c in cols] + ["reached 90%", "dropped dups", "LLM $"]
    rows = []
    for name, runs in res.items():
        cells = [name]
        for key, _, fmt in cols:
            m, h = ci95([float(r[key]) for r in runs])
            cells.append(f"{fmt.format(m)} ± {fmt.format(h).rstrip('%')}" + ("%" if "%" in fmt else ""))
        cells.append(f"{sum(r['reached_90'] for r in runs)}/{len(runs)}")
        cells.append(f"{statistics.fmean(r['dropped'] for r in runs):.1f}")
        cells.append(f"{statistics.fmean(r['usd'] for r in runs):.3f}")
        rows.append(cells)
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    return "\n".join("  ".join(r) for r in [head] + rows)


def prompt_sizes(res: dict[str, list[dict]], markdown: bool = True) -> str:
    """Per variant and epoch: the largest ideation prompt (tokens, as the server counts them: characters
    / 4), mean over the world seeds that reached the epoch."""
    per = {name: {} for name in res}
    for name, runs in res.items():
        for r in runs:
            top: dict[int, int] = {}
            for epoch, tok in r.get("prompts", []):
                top[epoch] = max(top.get(epoch, 0), tok)
            for epoch, tok in top.items():
                per[name].setdefault(epoch, []).append(tok)
    epochs = sorted({e for d in per.values() for e in d})
    head = ["variant"] + [f"epoch {e}" for e in epochs]
    rows = [[name] + [f"{statistics.fmean(d[e]):.0f}" if e in d else "" for e in epochs] for name, d in per.items()]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def model_shares(res: dict[str, list[dict]]) -> str:
    """Share of the proposals per simulated model, for the rows with more than one model."""
    out = []
    for name, runs in res.items():
        tot: dict[str, int] = {}
        for r in runs:
            for m, k in r.get("models", {}).items():
                tot[m] = tot.get(m, 0) + k
        if len(tot) > 1:
            n = sum(tot.values())
            out.append(f"{name}: " + ", ".join(f"{m} {k / n:.0%}" for m, k in sorted(tot.items())))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=150)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2: the 2-core target)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="world seeds first-seed .. first-seed + seeds - 1 (a second set checks a choice made "
                         "on the first)")
    ap.add_argument("--variants", default="",
                    help="prefixes of variant names, comma- (or, when a name holds a comma, semicolon-) "
                         "separated (default: all but the opt-in rows, " + "; ".join(sorted(OPT_IN)) + ")")
    ap.add_argument("--log", help="append one JSON line per finished run to this file")
    ap.add_argument("--from-log", help="print the table of a --log file (the seeds every variant finished)")
    ap.add_argument("--prompt-sizes", action="store_true",
                    help="also print the largest ideation prompt per epoch (tokens) of each variant")
    ap.add_argument("--noise-sd", type=float,
                    help="the world's seed noise instead of its fixed 0.01 (issue 29's sensitivity check)")
    a = ap.parse_args(argv)
    if a.noise_sd is not None:
        W.NOISE_SD = a.noise_sd       # read at every trial; forked workers inherit it
    if a.from_log:
        res = from_log(a.from_log)
        print(f"{len(next(iter(res.values())))} world seeds (from {a.from_log})")
        print(table(res))
        print(model_shares(res))
        if a.prompt_sizes:
            print(prompt_sizes(res))
        return 0
    prefixes = a.variants.split(";" if ";" in a.variants else ",")     # ";" when a name holds a comma
    if a.variants:
        names = [n for n in VARIANTS if any(n.startswith(p) for p in prefixes)]
    else:
        names = [n for n in VARIANTS if n not in OPT_IN]
    t0 = time.monotonic()
    log = open(a.log, "a") if a.log else None
    res = simulate(a.seeds, a.budget, names, a.jobs, log, a.first_seed)
    print(f"{a.seeds} world seeds (from {a.first_seed}), {a.budget} trials each, {len(names)} variants, "
          f"{a.jobs} processes, "
          f"{time.monotonic() - t0:.0f} s wall")
    print(table(res))
    print(model_shares(res))
    print("searches that reported no best: " + ", ".join(
        f"{name} {sum(r['no_best'] for r in runs)}/{len(runs)}" for name, runs in res.items()))
    if a.prompt_sizes:
        print(prompt_sizes(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
