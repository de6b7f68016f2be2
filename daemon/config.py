"""Loads and validates `.autoresearch.toml` (pydantic), applies environment overrides, and turns
every mistake into one line that names the key, with a did-you-mean suggestion.

Lookup: `--config PATH`, else walk up from the current directory. pydantic-settings reads both
sources (`Config.settings_customise_sources`): environment variables
`AUTORESEARCHD_<SECTION>__<KEY>=value` (for example `AUTORESEARCHD_LLM__PROVIDER=openai`) over the
TOML file over the defaults. Secrets never live here: a key that looks like one is refused, and API
keys are read from the environment by the providers alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from autoresearchd import defaults
from autoresearchd.configsources import ENV_PREFIX, ConfigError, EnvSource, env_var_at, TomlSource
from autoresearchd.keyerrors import format_validation_error
from autoresearchd.manifest import EnvManifest


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DaemonCfg(_Strict):
    tick_s: float = Field(defaults.TICK_S, gt=0)
    lease_ttl_s: float = Field(defaults.LEASE_TTL_S, gt=0)
    heartbeat_s: float = Field(defaults.HEARTBEAT_S, gt=0)
    max_retries: int = Field(defaults.MAX_RETRIES, ge=0)
    max_host_faults: int = Field(defaults.MAX_HOST_FAULTS, ge=1)  # host faults a seed survives before it is lost
    human_priority: bool = defaults.HUMAN_PRIORITY
    max_ideas: int | None = Field(None, ge=0)        # stop proposing after this many ideas
    max_epochs: int | None = Field(None, ge=0)
    max_gpu_hours: float | None = Field(None, ge=0)
    target: float | None = None           # stop when the confirmed best reaches this
    log_level: str = "INFO"


class ResearchCfg(_Strict):
    repo: str = ".autoresearch/research"  # the research repo (created from `env` on first start)
    env: str = "tinygpt"                   # template: a packaged env name, or a path (with a /)
    baseline: str | None = None            # overrides the manifest's baseline branch


class Price(_Strict):
    input: float = 0.0    # USD per million input tokens
    output: float = 0.0   # USD per million output tokens


class EnsembleMember(_Strict):
    """One model of `[llm] ensemble`: it proposes ideas when the bandit picks it (policies/bandit.py)."""
    provider: Literal["anthropic", "openai"]
    model: str
    base_url: str | None = None
    api_key_env: str | None = None         # name of the env variable holding its key, never the key


class LLMCfg(_Strict):
    provider: Literal["auto", "anthropic", "openai", "replay", "none"] = "auto"  # none: only run pushed branches
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None         # name of the env variable holding the key, never the key
    timeout_s: float = Field(defaults.LLM_TIMEOUT_S, gt=0)
    max_retries: int = Field(defaults.LLM_MAX_RETRIES, ge=0)
    backoff_s: float = defaults.LLM_BACKOFF_S
    concurrency: int = Field(defaults.LLM_CONCURRENCY, ge=1)
    max_tokens: int = Field(defaults.LLM_MAX_TOKENS, ge=1)
    temperature: float | None = None
    thinking_budget: int | None = None     # anthropic extended thinking tokens
    replay_file: str | None = None
    prices: dict[str, Price] = Field(default_factory=lambda: _default_prices({}))
    budget_usd: float | None = None
    max_calls: int | None = None
    # several proposing models at once, picked per batch by a bandit on improvement per dollar; every
    # other call (implement, lessons, novelty judge) goes to the provider/model above. [] = one model
    ensemble: list[EnsembleMember] = Field(default_factory=list)
    # the ensemble's bandit counts an idea's trials at this price per GPU-hour on top of its LLM spend
    ensemble_gpu_usd_per_hour: float = Field(defaults.ENSEMBLE_GPU_USD_PER_HOUR, ge=0)

    @field_validator("ensemble", mode="after")
    @classmethod
    def _unique_models(cls, v: list[EnsembleMember]) -> list[EnsembleMember]:
        names = [m.model for m in v]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"model '{dup}' is listed twice (each ensemble model must be named once)")
        return v

    @field_validator("prices", mode="after")
    @classmethod
    def _with_defaults(cls, v: dict[str, Price]) -> dict[str, Price]:
        return _default_prices(v)


def _default_prices(given: dict[str, Price]) -> dict[str, Price]:
    """The shipped prices of the default models (defaults.LLM_PRICES) under the configured ones."""
    out = {m: Price(input=i, output=o) for m, (i, o) in defaults.LLM_PRICES.items()}
    out.update(given)
    return out


class HostCfg(_Strict):
    name: str
    alias: str | None = None               # a Host in ~/.ssh/config
    host: str | None = None
    port: int | None = None
    user: str | None = None
    key: str | None = None
    known_hosts: str | None = None
    trusted: bool = False                  # accept an unknown host key (first use) and record it
    gpus: int = Field(1, ge=0)
    slots: int | None = Field(None, ge=1)  # defaults to gpus // env.gpus (at least 1)
    work_root: str = "~/.autoresearchd/trials"
    connect_timeout_s: float = Field(10.0, gt=0)
    min_free_mb: float = defaults.MIN_FREE_MB   # free space the work root needs before a trial is staged
    python: str | None = None              # the trials' interpreter here (overrides runner.python; docs/hosts.md)


class SlurmCfg(_Strict):
    partition: str | None = None
    account: str | None = None
    time_margin_s: int = 300
    extra_args: list[str] = Field(default_factory=list)
    max_jobs: int = Field(4, ge=1)
    login: str | None = None               # a host name from [[runner.hosts]]; None = sbatch on PATH
    work_root: str = "~/.autoresearchd/slurm"


class RunnerCfg(_Strict):
    kind: str = "local"
    slots: int = Field(defaults.LOCAL_SLOTS, ge=1)   # local runner on CPU
    gpus: list[int] = Field(default_factory=list)  # local GPU ids; one slot per env.gpus of them
    work_root: str | None = None           # local trial dirs (default: defaults.local_trial_root)
    # how run and evaluate are isolated on every host: bwrap | apptainer | none. Unset means bwrap, and
    # only the config-less embedded demo may then fall back to none (flagged) where bwrap is missing.
    sandbox: Literal["bwrap", "apptainer", "none"] | None = None
    sandbox_binds: list[str] = Field(default_factory=list)  # more host dirs visible read-only inside
    sandbox_image: str = defaults.SANDBOX_IMAGE             # apptainer's image (.sif or a directory)
    # the interpreter trials run as `python`: a path, `~/...` or a name on the host's PATH, a shim is
    # fine; unset: PATH's python/python3, resolved through any shim (runners/interp.py, docs/hosts.md)
    python: str | None = None
    hosts: list[HostCfg] = Field(default_factory=list)
    slurm: SlurmCfg = Field(default_factory=SlurmCfg)
    prestage: int | None = Field(None, ge=1, le=64)   # trials placed per slot (the next waits on the host); default 2; at most 64: the host queue is a ring of 256 turns
    log_head_bytes: int = Field(defaults.LOG_HEAD_BYTES, ge=0)
    log_tail_bytes: int = Field(defaults.LOG_TAIL_BYTES, ge=0)


class PolicyCfg(_Strict):
    name: str = "evolutionary"
    seed: int = 0
    ideas_per_epoch: int = Field(defaults.IDEAS_PER_EPOCH, ge=1)
    batch: int = Field(defaults.IDEAS_PER_BATCH, ge=1)
    max_parents: int = Field(defaults.MAX_PARENTS_SHOWN, ge=0)
    queue_buffer: int = Field(defaults.QUEUE_BUFFER, ge=0)
    baseline_seeds: int = Field(defaults.BASELINE_SEEDS, ge=1)
    noise_mult: float = Field(defaults.NOISE_MULT, ge=0)
    confirm_seeds: int = Field(defaults.CONFIRM_SEEDS, ge=0)
    noise_pool: bool = defaults.NOISE_POOL      # margins use the noise pooled over all repeated runs
    confirm_min: float = Field(defaults.CONFIRM_MIN, ge=0)   # a would-be best by less (in run SEs) is not confirmed
    duplicate_threshold: float = defaults.DUPLICATE_THRESHOLD
    islands: int = Field(defaults.ISLANDS, ge=1)
    migration_epochs: int = Field(defaults.MIGRATION_EPOCHS, ge=0)   # 0: islands never exchange
    exploit_start: float = Field(defaults.EXPLOIT_START, ge=0, le=1)   # exploit share of epoch 1 (paper: 0.5)
    inspiration: Literal["sample", "top_diverse"] = defaults.INSPIRATION
    exploit_demoted: bool = defaults.EXPLOIT_DEMOTED   # demoted ideas that beat the baseline stay parents
    novelty_threshold: float | None = Field(defaults.NOVELTY_THRESHOLD, ge=0, le=100)
    novelty_judge: bool = defaults.NOVELTY_JUDGE
    lessons_every: int = Field(defaults.LESSONS_EVERY, ge=0)           # 0: no lessons scratchpad
    prompt_token_budget: int | None = Field(defaults.PROMPT_TOKEN_BUDGET, ge=500)


class AgentCfg(_Strict):
    """A coding-agent CLI as the implementer (docs/llm.md, "Coding agents")."""
    command: str | None = None             # the CLI binary; default: `claude` / `codex` on PATH
    model: str | None = None               # default: the CLI's own default model
    base_url: str | None = None            # model API root (claude: the host; codex: including /v1)
    api_key_env: str | None = None         # *name* of the key variable; default ANTHROPIC_/OPENAI_API_KEY
    home: str | None = None                # HOME for the CLI (its login); default: a fresh one per session
    wall_s: float = defaults.AGENT_WALL_S
    max_turns: int = defaults.AGENT_MAX_TURNS
    max_usd: float = defaults.AGENT_MAX_USD
    sandbox: str = defaults.SANDBOX        # bwrap | apptainer | none (runners/sandbox.py)


class ImplementerCfg(_Strict):
    kind: str = defaults.IMPLEMENTER_KIND  # diff | claude-code | codex
    agent: AgentCfg = Field(default_factory=AgentCfg)
    max_revisions: int = Field(defaults.MAX_REVISIONS, ge=0)
    max_diff_bytes: int = defaults.MAX_DIFF_BYTES
    max_file_bytes: int = defaults.MAX_FILE_BYTES
    check_timeout_s: float = Field(defaults.CHECK_TIMEOUT_S, gt=0)
    concurrency: int = Field(2, ge=1)


class TuneCfg(_Strict):
    """[tune]: the knob tuner (daemon/tune/, docs/policies.md "Tuning knobs: the hybrid search")."""
    enabled: bool = defaults.TUNE_ENABLED
    sampler: Literal["tpe", "cmaes"] = defaults.TUNE_SAMPLER
    trials_per_study: int = Field(defaults.TUNE_TRIALS_PER_STUDY, ge=1)
    parallel: int = Field(defaults.TUNE_PARALLEL, ge=1)
    studies: int = Field(defaults.TUNE_STUDIES, ge=1)
    startup_trials: int = Field(defaults.TUNE_STARTUP_TRIALS, ge=0)
    floor: float = Field(defaults.TUNE_FLOOR, ge=0, le=0.5)
    seed: int = 0


class StoppingCfg(_Strict):
    """[stopping]: early stopping by learning curves (engine/stopping.py, docs/policies.md "Early stopping")."""
    enabled: bool = defaults.STOPPING_ENABLED
    rule: Literal["band", "median", "asha", "hyperband"] = defaults.STOPPING_RULE
    margin: float = Field(defaults.STOPPING_MARGIN, ge=0)
    min_t: float = Field(defaults.STOPPING_MIN_T, gt=0, le=1)
    min_peers: int = Field(defaults.STOPPING_MIN_PEERS, ge=1)


class ScreeningCfg(_Strict):
    """[screening]: low-fidelity screening of new ideas (engine/screening.py, docs/policies.md
    "Screening at low fidelity"); the env declares its fidelity knob in [env.screening]."""
    enabled: bool = defaults.SCREENING_ENABLED
    keep: float = Field(defaults.SCREENING_KEEP, gt=0, le=1)
    margin: float = Field(defaults.SCREENING_MARGIN, ge=0)
    min_peers: int = Field(defaults.SCREENING_MIN_PEERS, ge=1)


class WandbCfg(_Strict):
    enabled: bool = False
    project: str = "autoresearchd"
    entity: str | None = None
    mode: Literal["online", "offline", "disabled"] = "offline"


class Config(BaseSettings):
    """The whole config. Built by `load_config`, it reads the environment over the file over the
    defaults; built in code (`Config(...)`), it holds its arguments over the defaults and reads nothing."""
    model_config = SettingsConfigDict(extra="forbid", validate_assignment=True, env_prefix=ENV_PREFIX,
                                      env_nested_delimiter="__", case_sensitive=False)
    daemon: DaemonCfg = Field(default_factory=DaemonCfg)
    research: ResearchCfg = Field(default_factory=ResearchCfg)
    llm: LLMCfg = Field(default_factory=LLMCfg)
    runner: RunnerCfg = Field(default_factory=RunnerCfg)
    policy: PolicyCfg = Field(default_factory=PolicyCfg)
    implementer: ImplementerCfg = Field(default_factory=ImplementerCfg)
    wandb: WandbCfg = Field(default_factory=WandbCfg)
    tune: TuneCfg = Field(default_factory=TuneCfg)
    stopping: StoppingCfg = Field(default_factory=StoppingCfg)
    screening: ScreeningCfg = Field(default_factory=ScreeningCfg)
    env: EnvManifest | None = None         # an env repo may carry its manifest here
    path: Path | None = Field(default=None, exclude=True)  # the file it came from

    def resolve(self, p: str) -> Path:
        """Resolve a path from the config relative to the config file's directory."""
        base = self.path.parent if self.path else Path.cwd()
        q = Path(os.path.expanduser(p))
        return q if q.is_absolute() else (base / q).resolve()

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        """First wins: init arguments, then the variables, then the file (pydantic-settings merges
        tables key by key). The hook is a classmethod, so `load_config` hands it the file and the
        environment it chose through `_LOADING`; outside `load_config` only the arguments count."""
        loading = _LOADING.get()
        if loading is None:
            return (init_settings,)
        path, environ = loading
        return (init_settings, EnvSource(settings_cls, environ)) + \
            ((TomlSource(settings_cls, path),) if path is not None else ())


# (config file or None, environment) of the `load_config` call in progress, for the sources hook
_LOADING: ContextVar[tuple[Path | None, Mapping[str, str]] | None] = ContextVar("config_loading", default=None)


def find_config(start: Path | None = None) -> Path | None:
    d = (start or Path.cwd()).resolve()
    for p in (d, *d.parents):
        if (p / defaults.CONFIG_NAME).is_file():
            return p / defaults.CONFIG_NAME
    return None


def load_config(path: str | os.PathLike | None = None, *, environ: dict | None = None,
                allow_missing: bool = True) -> Config:
    """Load, override from the environment, validate. Raises ConfigError with a one-line message."""
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
    else:
        p = find_config()
        if p is None and not allow_missing:
            raise ConfigError(f"no {defaults.CONFIG_NAME} found in {Path.cwd()} or its parents; "
                              f"pass --config PATH or run `autoresearchd init`")
    environ = os.environ if environ is None else environ
    token = _LOADING.set((p, environ))
    try:
        cfg = Config()
    except ValidationError as e:
        var = env_var_at(tuple(e.errors()[0]["loc"]), environ)
        # a bad value that came from a variable is blamed on it, not on a file that does not hold it
        raise ConfigError(format_validation_error(e, Config, f"environment ({var})" if var
                                                  else str(p or "environment"))) from None
    finally:
        _LOADING.reset(token)
    cfg.path = p.resolve() if p else None
    return cfg
