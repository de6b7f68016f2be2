"""Builds the daemon's parts from a Config: research repo, runner, LLM provider, policy, implementer.
The one place that knows how the registries fit together, and that wires them: every part is given
what it uses when it is built (the one lifecycle writer with its observers, the lessons store), never
set on it afterwards."""

from __future__ import annotations

import logging
from pathlib import Path

from autoresearchd import llm as llm_registry
from autoresearchd import policies as policy_registry
from autoresearchd import runners as runner_registry

from autoresearchd import defaults

from autoresearchd.config import Config, ConfigError
from autoresearchd.engine.loop import Daemon
from autoresearchd.implement.implementer import make_implementer
from autoresearchd.research import Research, open_research
from autoresearchd.store import gitrepo
from autoresearchd.store.lessons import GitLessonsStore
from autoresearchd.store.lifecycle import Lifecycle
from autoresearchd.store.spend import total
from autoresearchd.tune.tuner import Tuner
from autoresearchd.views.wandb_mirror import make_mirror

log = logging.getLogger("autoresearchd")


def make_runner(cfg: Config, research: Research | None, *, manifest=None, local_dir: Path | None = None):
    """The configured runner for the research's env (or for `manifest`, with local trials under
    `local_dir`: how `doctor --run` runs a baseline without a research repo's state dir)."""
    try:
        cls = runner_registry.get(cfg.runner.kind)
    except KeyError as e:
        raise ConfigError(f"runner.kind: {e.args[0]}") from None
    manifest = manifest or research.manifest
    if cfg.runner.kind == "local":
        # outside the research repo: a trial must never reach its .git (hooks, notes) or work tree
        runner = cls(cfg.runner, manifest, local_dir or defaults.local_trial_root(str(research.repo.path)))
    else:
        runner = cls(cfg.runner, manifest)
    # only the README's config-less demo may fall back to no sandbox (flagged) where bwrap is missing;
    # everyone else gets an error until they install it or choose runner.sandbox = "none"
    runner.sandbox_fallback = cfg.runner.sandbox is None and cfg.path is None
    return runner


def default_replay_file(cfg: Config, research: Research) -> Path | None:
    """The packaged replay file for the env (e.g. envs/replays/tinygpt.jsonl), if there is one."""
    if cfg.llm.replay_file:
        return cfg.resolve(cfg.llm.replay_file)
    from importlib import resources
    p = Path(str(resources.files("autoresearchd.envs"))) / "replays" / f"{research.manifest.name}.jsonl"
    return p if p.is_file() else None


def restore_spend(provider, research: Research) -> None:
    """The budget counts what earlier runs of the daemon already spent (store/spend.py: the notes, then
    the daemon's own trailers)."""
    from autoresearchd.store.population import read_population
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
        path = default_replay_file(cfg, research)
        if path is None:
            raise ConfigError("llm: no API key is set and no replay file is configured (llm.replay_file); "
                              "set ANTHROPIC_API_KEY or OPENAI_API_KEY, or point llm.replay_file at a JSONL file")
        provider = cls(cfg.llm, path=str(path))
        from autoresearchd.store.replaypos import load_position, saver
        done = load_position(research.repo, path)
        provider.resume(done)
        provider.on_served = saver(research.repo, path)
        note = (why or "llm.provider = replay") + f" ({path.name}" + \
            (f", resuming after {len(done)} of {len(provider.records)} records)" if done else ")")
    else:
        provider = cls(cfg.llm)
        note = f"{name}:{provider.model}"
        models = [provider.model] + [m.model for m in cfg.llm.ensemble]
        unpriced = next((m for m in models if m not in cfg.llm.prices), None)
        if cfg.llm.budget_usd is not None and unpriced is not None:
            from autoresearchd.validate import unpriced_message    # an unpriced model would never trip the budget
            raise ConfigError(unpriced_message(unpriced))
        if cfg.llm.ensemble:
            from autoresearchd.llm.ensemble import build
            try:
                provider = build(cfg.llm, provider, llm_registry.get)
            except llm_registry.LLMError as e:    # a member without its key: one line, exit 2
                raise ConfigError(f"llm.ensemble: {e}") from None
            note += " + ensemble " + ", ".join(provider.members)
    restore_spend(provider, research)
    return provider, note


def make_policy(cfg: Config, lessons_store=None):
    """The configured policy; `lessons_store` keeps its lessons scratchpad (store/lessons.py; in
    memory when None)."""
    try:
        return policy_registry.get(cfg.policy.name)(cfg.policy, lessons_store=lessons_store)
    except KeyError as e:
        raise ConfigError(f"policy.name: {e.args[0]}") from None


def build_daemon(cfg: Config, with_llm: bool = True):
    research = open_research(cfg, configure_repo=True)
    if research.configured:
        log.info("%s", research.configured)
    if research.manifest.deterministic:
        # a deterministic run gives the same value for every seed: more baseline seeds measure nothing
        cfg.policy.baseline_seeds = 1
    runner = make_runner(cfg, research)
    # the one writer of idea state changes, shared by every part and told of every note by itself: the
    # W&B mirror, given to it here, hears the backfill too
    mirror = make_mirror(cfg, research)
    lifecycle = Lifecycle(research.repo, observers=[mirror.written] if mirror is not None else [])
    llm = note = policy = implementer = None
    name, why = llm_registry.resolve_provider_name(cfg.llm, research.manifest.name)
    if name == "none":      # chosen, or `auto` with no key and nothing recorded to replay for this env
        with_llm, note = False, "none (" + (why or "llm.provider = none: running pushed idea branches only") + ")"
    if with_llm:
        llm, note = make_llm(cfg, research)
        policy = make_policy(cfg, GitLessonsStore(research.repo))   # the lessons live in the research repo
        try:
            implementer = make_implementer(research, llm, cfg, lifecycle)
        except KeyError as e:
            raise ConfigError(f"implementer.kind: {e.args[0]}") from None
    # raises a ConfigError naming the extra without Optuna
    tuner = Tuner(research, cfg, lifecycle) if cfg.tune.enabled else None
    stopper = None
    if cfg.stopping.enabled:
        from autoresearchd.engine.stopping import Stopper
        stopper = Stopper(cfg.stopping, research.manifest, runner, lifecycle)
    return Daemon(cfg, research, runner, llm, policy, implementer, llm_note=note, lifecycle=lifecycle,
                  tuner=tuner, stopper=stopper)
