"""The knob tuner: Optuna's samplers (TPE by default, CMA-ES selectable) on the knobs of a promising
idea (or of the baseline), each suggestion written as a tuned commit. A study's knobs are the
manifest's plus the ones the tuned idea's tree declares (knobs.commit_manifest).

A tuned commit is the tuned idea's code plus a knobs file (knobs.py) and nothing else, on
`idea/tune/<study>/<n>`, marked as the daemon's own; its trailers name the study, the sampler and the
trial number (Tune-Study, Tune-Sampler, Tune-Trial, Knobs). It is then an idea like any other: queued,
dispatched, judged against the baseline and, when it looks like a new best, confirmed on fresh seeds.

Nothing lives only in memory: before each suggestion the study is rebuilt from git, every tuned commit
of it added with `study.add_trial(create_trial(...))`: COMPLETE with its note's value, FAIL when its
note says it failed (an `over_budget` point too: knob values that cost more compute than the cap are
infeasible, not good), PRUNED when early stopping stopped it (its curve's last point is the trial's
intermediate value), RUNNING while it has no note yet (TPE's constant liar then steers away from it).
The sampler is seeded with the study's seed plus its number of trials, so a restarted daemon suggests
exactly what the stopped one would have.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import replace
from enum import Enum
from typing import Any

from autoresearchd.config import ConfigError
from autoresearchd.manifest import EnvManifest, KnobType
from autoresearchd.store.ideas import Idea, format_message
from autoresearchd.store.lifecycle import Lifecycle, Made
from autoresearchd.store.lifecycle import tune_fields as note_fields  # noqa: F401 - the tuner's readers
from autoresearchd.store import ranking
from autoresearchd.store.notes import Origin, Status
from autoresearchd.store.refs import IDEA_BRANCHES, IDEAS_PREFIX
from autoresearchd.tune.knobs import KNOBS_FILE, KnobFileError, commit_manifest, commit_values, values_file
from autoresearchd.store.trailers import Trailers

log = logging.getLogger("autoresearchd")

BASELINE_STUDY = "baseline"


class Sampler(str, Enum):
    TPE = "tpe"
    CMAES = "cmaes"


def require_optuna():
    """Optuna, or a ConfigError that says how to install it."""
    try:
        import optuna       # lazy: the [tune] extra, loaded only with [tune] enabled
    except ImportError:
        raise ConfigError("[tune] enabled needs Optuna, which is not installed: "
                          "pip install 'autoresearchd[tune]' (or set [tune] enabled = false)") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def distributions(manifest: EnvManifest) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution  # lazy: [tune]
    out = {}
    for k in manifest.knobs:
        if k.type == KnobType.CATEGORICAL:
            out[k.name] = CategoricalDistribution(list(k.choices))
        elif k.type == KnobType.INT:
            out[k.name] = IntDistribution(int(k.low), int(k.high), log=k.log, step=int(k.step or 1))
        else:
            out[k.name] = FloatDistribution(k.low, k.high, log=k.log)
    return out


def make_sampler(name: str, seed: int, manifest: EnvManifest, startup: int):
    optuna = require_optuna()
    if Sampler(name) == Sampler.CMAES:
        # no x0 (deprecated since Optuna 4.9): the startup trials seed the search, as for TPE
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)


def study_members(pop, study: str) -> list[Idea]:
    """The tuned commits of a study, by trial number: the tuner's and the LLM's knobs-only ideas routed
    to it (only the daemon's own: a pushed commit keeps no trailers)."""
    mine = [i for i in pop.ideas if i.trailers.tune_study == study]
    return sorted(mine, key=lambda i: i.trailers.tune_trial or 0)


def _params(idea: Idea) -> dict[str, Any]:
    if idea.note is not None and idea.note.tune.get("knobs"):
        return dict(idea.note.tune["knobs"])
    try:
        v = json.loads(idea.trailers.knobs or "{}")
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def rebuild(pop, manifest: EnvManifest, study: str, sampler: str, seed: int, startup: int = 5):
    """The study as git holds it: every tuned commit of it, with its note's value or state."""
    optuna = require_optuna()
    from optuna.trial import TrialState, create_trial     # lazy: the [tune] extra
    dists = distributions(manifest)
    members = study_members(pop, study)
    s = optuna.create_study(direction="minimize" if manifest.goal == "min" else "maximize",
                            sampler=make_sampler(sampler, seed + len(members), manifest, startup))
    for i in members:
        params = _params(i)
        if set(params) != set(dists) or any(manifest.knob(k).check(v) for k, v in params.items()):
            continue        # knobs declared since (or ranges moved): not a point of this space
        n = i.note
        inter: dict[int, float] = {}
        if n is None:
            state, value = TrialState.RUNNING, None
        elif n.status == Status.SUCCEEDED and n.value is not None and not pop.stale(i):
            state, value = TrialState.COMPLETE, float(n.value)
        elif n.status == Status.STOPPED:
            # stopped by its learning curve (engine/stopping.py): a pruned trial, as Optuna's own pruners
            # leave one, its last reported point at the step (per cent of the run) it stopped
            state, value = TrialState.PRUNED, None
            ev = n.stopped or {}
            if isinstance(ev.get("t"), (int, float)) and isinstance(ev.get("value"), (int, float)):
                inter = {int(round(float(ev["t"]) * 100)): float(ev["value"])}
        else:
            state, value = TrialState.FAIL, None
        s.add_trial(create_trial(state=state, value=value, params=params, distributions=dists,
                                 intermediate_values=inter,
                                 user_attrs={"commit": i.commit, "trial": i.trailers.tune_trial}))
    return s


class Tuner:
    """Writes tuned commits for the studies worth tuning. One writer: the daemon's tick calls it. Their
    marks and branches go through `lifecycle` (store/lifecycle.py), given by app.build_daemon."""

    def __init__(self, research, cfg, lifecycle: Lifecycle):
        self.research, self.cfg, self.repo = research, cfg, research.repo
        self.lifecycle = lifecycle
        self._lock = threading.Lock()           # the tick and the proposing worker both write trials
        self.router = Router(self)
        # commit -> (the manifest it was read against, that manifest with the knobs the commit declares)
        self._knobs: dict[str, tuple[EnvManifest, EnvManifest]] = {}
        require_optuna()
        if not research.manifest.knobs:
            log.warning("[tune] is enabled but the manifest declares no [[env.knobs]]: only ideas that declare "
                        "knobs of their own (.autoresearch-knobs.toml) are tuned")

    @property
    def t(self):
        return self.cfg.tune

    def knobs_of(self, commit: str) -> EnvManifest:
        """The manifest with the knobs `commit` declares (the manifest alone if its declaration is
        invalid: the gate refused such a commit already)."""
        base = self.research.manifest
        got = self._knobs.get(commit)
        if got is None or got[0] is not base:     # a commit never changes; a reloaded manifest may
            try:
                got = (base, commit_manifest(self.repo, commit, base))
            except KnobFileError:
                got = (base, base)
            self._knobs[commit] = got
        return got[1]

    def targets(self, pop) -> list[tuple[str, str, Idea | None]]:
        """(study, commit to tune, its idea) for the best confirmed ideas, best first (a tuned winner
        continues its own study); the baseline when no idea is confirmed yet. A study needs knobs: the
        manifest's or the tuned idea's own."""
        m = self.research.manifest
        out: list[tuple[str, str, Idea | None]] = []
        ranked = ranking.ranked((i for i in pop.comparable() if i.confirmed), m.goal)   # the one order of "best"
        for i in ranked:
            root = i
            if i.trailers.tune_study:            # a tuned commit (the sampler's or a routed LLM idea's)
                root = pop.by_id.get(i.trailers.tune_study) if i.trailers.tune_study != BASELINE_STUDY else None
                if root is None and i.trailers.tune_study != BASELINE_STUDY:
                    continue
            key = root.idea_id if root is not None else BASELINE_STUDY
            commit = root.commit if root is not None else pop.baseline_commit
            if key not in {o[0] for o in out} and commit and self.knobs_of(commit).knobs:
                out.append((key, commit, root))
            if len(out) >= self.t.studies:
                break
        if not out and pop.baseline_commit and pop.baseline_value is not None \
                and self.knobs_of(pop.baseline_commit).knobs:
            out.append((BASELINE_STUDY, pop.baseline_commit, None))
        return out

    def pending(self, pop) -> int:
        """Tuned commits waiting for a result (queued or running)."""
        return sum(1 for i in pop.ideas if i.origin == Origin.TUNE and i.note is None)

    def propose(self, pop, n: int) -> list[str]:
        """Write up to n tuned commits; returns their branch refs."""
        if n <= 0:
            return []
        out = []
        for study, commit, root in self.targets(pop):
            m = self.knobs_of(commit)           # the manifest's knobs and the ones this idea declares
            members = study_members(pop, study)
            open_ = sum(1 for i in members if i.note is None)
            while len(out) < n and len(members) < self.t.trials_per_study and open_ < self.t.parallel:
                s = rebuild(pop, m, study, self.t.sampler, self.t.seed, self.t.startup_trials)
                trial = s.ask(distributions(m))
                params = rounded(m, trial.params)
                with self._lock:
                    number = self._next_number(study)
                    branch = self.write(study, commit, root, params, number)
                if branch is None:
                    break
                out.append(branch)
                # the next suggestion of this round sees this one as running, as a rebuild would
                members.append(Idea(idea_id=f"{study}-t{number}", commit=None, title="", text="",
                                    trailers=_trailers(study, self.t.sampler, number, params)))
                open_ += 1
                pop = _with(pop, members[-1])
        return out

    def _next_number(self, study: str) -> int:
        """The study's next trial number, from the daemon's marks in git (not from a population read
        before a slow LLM call: the tick and the proposing worker may both add a trial)."""
        pat = re.compile(re.escape(IDEAS_PREFIX + study) + r"-t(\d+)$")
        return max((int(mt.group(1)) for ref in self.repo.refs(IDEAS_PREFIX) if (mt := pat.match(ref))),
                   default=0) + 1

    def write(self, study: str, base: str, root: Idea | None, params: dict[str, Any], number: int,
              sampler: str | None = None, title: str | None = None, body: str | None = None,
              extra: dict[str, Any] | None = None) -> str | None:
        """The tuned commit: `base`'s tree with the knobs file set, on idea/tune/<study>/<number>.
        `extra`: trailer fields (a routed LLM idea keeps its origin, epoch, parents and spend)."""
        sampler = sampler or self.t.sampler
        idea_id = f"{study}-t{number}"
        branch = f"{IDEA_BRANCHES}tune/{study}/{number}"
        if self.repo.rev_parse(IDEAS_PREFIX + idea_id):
            return None                          # written already (a concurrent tick): nothing twice
        values = {**commit_values(self.repo, base, self.research.manifest), **params}
        tree = self.repo.tree_with_files(base, {KNOBS_FILE: values_file(values)})
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in params.items())
        title = title or f"tune {study} #{number}: {shown}"
        body = body or (f"Trial {number} of the study on {study}'s knobs, suggested by Optuna's {sampler} sampler. "
                        f"The code is {base[:10]}'s; only {KNOBS_FILE} changes.")
        tr = _trailers(study, sampler, number, params)
        tr = tr.model_copy(update={"parents": (root.idea_id,) if root is not None else (),
                                   "epoch": root.epoch if root is not None else 0, "base": base, **(extra or {})})
        # the writer makes the commit, then its mark (first: the mark makes the trailers count), its branch
        self.lifecycle.tuned(idea_id, Made((base,), format_message(title, body, tr), tree), branch)
        log.info("tuned trial %s: %s", idea_id, shown)
        return branch


KNOBS_LINE = re.compile(r"\[Code Changes\]\s*Knobs:\s*(?P<pairs>[^\n]+?)\s*$")


def knobs_only(text: str, m: EnvManifest) -> dict[str, Any] | None:
    """The knob values of an idea whose [Code Changes] is only a `Knobs: name=value, ...` line, all of
    them declared knobs at valid values; None for any other idea (it goes to the implementer)."""
    mt = KNOBS_LINE.search(text.strip())
    if mt is None or not m.knobs:
        return None
    out: dict[str, Any] = {}
    for pair in mt.group("pairs").split(","):
        name, eq, raw = pair.partition("=")
        k = m.knob(name.strip().strip("`"))
        if not eq or k is None:
            return None
        raw = raw.strip().strip("`")
        if k.type == KnobType.CATEGORICAL:
            v = next((c for c in k.choices if str(c) == raw), None)
        else:
            try:
                v = int(raw) if k.type == KnobType.INT else float(raw)
            except ValueError:
                return None
        if v is None or k.check(v):
            return None
        out[k.name] = v
    return out or None


def rounded(manifest: EnvManifest, params: dict[str, Any]) -> dict[str, Any]:
    """Floats to 6 significant digits (kept inside the knob's range): the file, the trailer and the
    note then hold the same value, and people read it."""
    out = {}
    for name, v in params.items():
        k = manifest.knob(name)
        if isinstance(v, float) and k is not None and k.type == KnobType.FLOAT:
            v = min(max(float(f"{v:.6g}"), k.low), k.high)
        out[name] = v
    return out


class Router:
    """Hands a knobs-only LLM idea to the tuner: a tuned commit of the study its base belongs to, the
    LLM's values a trial of that study (Tune-Sampler: llm), with no implementation spent on it."""

    def __init__(self, tuner: Tuner):
        self.tuner = tuner

    def route(self, pop, prop) -> str | None:
        """The branch written for `prop`, or None when it is not a knobs-only idea."""
        t = self.tuner
        base = prop.base_commit or pop.baseline_commit
        m = t.knobs_of(base)                          # the base idea's own knobs may be set too
        values = knobs_only(prop.text, m)
        if values is None:
            return None
        on = pop.by_commit.get(base)
        if on is not None and on.trailers.tune_study:
            study = on.trailers.tune_study            # a tuned parent: the same study, from its values
        else:
            study = on.idea_id if on is not None else BASELINE_STUDY
        values = {**commit_values(t.repo, base, t.research.manifest), **values}
        extra = {"origin": prop.origin, "epoch": prop.epoch, "parents": tuple(prop.parents), "model": prop.model,
                 "idea_model": prop.model, "idea_cost_usd": prop.cost_usd or None, "cost_usd": prop.cost_usd or None,
                 "idea_tokens": prop.tokens or None, "tokens": prop.tokens or None,
                 "prompt_hash": getattr(prop, "prompt_hash", None)}
        with t._lock:
            branch = t.write(study, base, None, values, t._next_number(study), sampler="llm",
                             title=prop.title, body=prop.text, extra=extra)
        if branch:
            log.info("knobs-only idea %r routed to the tuner (study %s): no implementation", prop.title, study)
        return branch


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _trailers(study: str, sampler: str, number: int, params: dict[str, Any]):
    return Trailers.model_validate({"Idea-Id": f"{study}-t{number}", "Origin": Origin.TUNE, "Tune-Study": study,
                                    "Tune-Sampler": sampler, "Tune-Trial": number,
                                    "Knobs": json.dumps(params, sort_keys=True)})


def _with(pop, idea: Idea):
    """The population with one more (unwritten-to-git-view) pending tuned idea, for the next ask."""
    return replace(pop, ideas=pop.ideas + [idea], by_id={}, by_commit={})
