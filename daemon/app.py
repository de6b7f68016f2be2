"""Builds the daemon's parts from a Config: research repo, runner, LLM provider, policy, implementer.
The one place that knows how the registries fit together, and that wires them: every part is given
what it uses when it is built (the one lifecycle writer with its observers, the lessons store), never
set on it afterwards."""

from __future__ import annotations

import logging

from autoresearchd import llm as llm_registry
from autoresearchd import policies as policy_registry

from autoresearchd.config import Config, ConfigError
from autoresearchd.engine.loop import Daemon
from autoresearchd.engine.screener import Screener
from autoresearchd.engine.stopping import Stopper
from autoresearchd.implement.implementer import make_implementer
from autoresearchd.llm.ensemble import build
from autoresearchd.makelifecycle import make_lifecycle
from autoresearchd.makerunner import make_runner
from autoresearchd.research import Research, open_research
from autoresearchd.store import gitrepo
from autoresearchd.store.lessons import GitLessonsStore
from autoresearchd.store.population import read_population
from autoresearchd.store.replaypos import load_position, saver
from autoresearchd.store.spend import total
from autoresearchd.tune.surface import prompt_block
from autoresearchd.tune.tuner import Tuner
from autoresearchd.validate import unpriced_message

log = logging.getLogger("autoresearchd")


def restore_spend(provider, research: Research) -> None:
    """The budget counts what earlier runs of the daemon already spent (store/spend.py: the notes, then
    the daemon's own trailers)."""
    pop = read_population(research.repo, research.baseline_ref)
    spent = total(pop.ideas)                # the one spend rule (store/spend.py), as `status` sums it
    provider.budget.usd += spent.usd
    provider.budget.input_tokens += spent.tokens
    # calls (llm.max_calls) are not in git: the ledger in the state dir counts them across restarts
    provider.budget.restore(str(gitrepo.state_dir(research.repo) / "llm_calls.jsonl"))


def make_llm(cfg: Config, research: Research):
    name, why = llm_registry.resolve_provider_name(cfg.llm, research.manifest.name)
    try:
        cls = llm_registry.get(name)
    except KeyError as e:
        raise ConfigError(f"llm.provider: {e.args[0]}") from None
    if name == "replay" and cfg.llm.ensemble:
        raise ConfigError("llm.ensemble: the main provider resolved to replay; an ensemble needs a live "
                          "provider (set llm.provider and its key)")
    if name == "replay":
        path = llm_registry.default_replay_file(cfg, research.manifest.name)
        if path is None:
            raise ConfigError("llm: no API key is set and no replay file is configured (llm.replay_file); "
                              "set ANTHROPIC_API_KEY or OPENAI_API_KEY, or point llm.replay_file at a JSONL file")
        provider = cls(cfg.llm, path=str(path), on_served=saver(research.repo, path))
        done = load_position(research.repo, path)
        provider.resume(done)
        note = (why or "llm.provider = replay") + f" ({path.name}" + \
            (f", resuming after {len(done)} of {len(provider.records)} records)" if done else ")")
    else:
        provider = cls(cfg.llm)
        note = f"{name}:{provider.model}"
        models = [provider.model] + [m.model for m in cfg.llm.ensemble]
        unpriced = next((m for m in models if m not in cfg.llm.prices), None)
        if cfg.llm.budget_usd is not None and unpriced is not None:
            raise ConfigError(unpriced_message(unpriced))    # an unpriced model would never trip the budget
        if cfg.llm.ensemble:
            try:
                provider = build(cfg.llm, provider, llm_registry.get)
            except llm_registry.LLMError as e:    # a member without its key: one line, exit 2
                raise ConfigError(f"llm.ensemble: {e}") from None
            note += " + ensemble " + ", ".join(provider.members)
    restore_spend(provider, research)
    return provider, note


def make_policy(cfg: Config, lessons_store=None, tuning=None):
    """The configured policy; `lessons_store` keeps its lessons scratchpad (store/lessons.py; in
    memory when None); `tuning` writes its prompts' tuning section (tune/surface.py, with [tune] on)."""
    try:
        return policy_registry.get(cfg.policy.name)(cfg.policy, lessons_store=lessons_store, tuning=tuning)
    except KeyError as e:
        raise ConfigError(f"policy.name: {e.args[0]}") from None


def build_daemon(cfg: Config, with_llm: bool = True):
    research = open_research(cfg, configure_repo=True)
    if research.configured:
        log.info("%s", research.configured)
    if research.manifest.deterministic:
        # a deterministic run gives the same value for every seed: more baseline seeds measure nothing.
        # Every part below is built with a config derived from the caller's, which stays as it was loaded
        cfg = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"baseline_seeds": 1})})
    runner = make_runner(cfg, research)
    # the one writer of idea state changes, shared by every part and told of every note by itself: the
    # W&B mirror, given to it here, hears the backfill too
    lifecycle = make_lifecycle(cfg, research)
    llm = note = policy = implementer = None
    name, why = llm_registry.resolve_provider_name(cfg.llm, research.manifest.name)
    if name == "none":      # chosen, or `auto` with no key and nothing recorded to replay for this env
        with_llm, note = False, "none (" + (why or "llm.provider = none: running pushed idea branches only") + ")"
    if with_llm:
        llm, note = make_llm(cfg, research)
        # the lessons live in the research repo; the LLM sees the tuning in its prompts
        # (the study's own declared knobs are read from git: tune/surface.py)
        tuning = (lambda pop, m: prompt_block(pop, m, research.repo)) if cfg.tune.enabled else None
        policy = make_policy(cfg, GitLessonsStore(research.repo), tuning)
        try:
            implementer = make_implementer(research, llm, cfg, lifecycle)
        except KeyError as e:
            raise ConfigError(f"implementer.kind: {e.args[0]}") from None
    # raises a ConfigError naming the extra without Optuna
    tuner = Tuner(research, cfg, lifecycle) if cfg.tune.enabled else None
    stopper = None
    if cfg.stopping.enabled:
        stopper = Stopper(cfg.stopping, research.manifest, runner, lifecycle)
    screener = Screener(cfg.screening, research, lifecycle, cfg.policy) if cfg.screening.enabled else None
    return Daemon(cfg, research, runner, llm, policy, implementer, llm_note=note, lifecycle=lifecycle,
                  tuner=tuner, stopper=stopper, screener=screener)
