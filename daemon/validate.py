"""One validation path for `start` and `doctor`: everything a config and its environment must satisfy
before the daemon creates or runs anything.

`findings(cfg)` reads only: it never creates the research repo, writes a hook or sets git config.
`start` calls `require_valid(cfg)` first and refuses on the first error (so it creates nothing for a
bad config); `doctor` prints every finding. Both therefore refuse exactly the same things.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from autoresearchd import defaults
from autoresearchd import llm as llm_registry
from autoresearchd import policies as policy_registry
from autoresearchd import runners as runner_registry
from autoresearchd.config import Config, ConfigError
from autoresearchd.implement import agent_cli, implementer
from autoresearchd.makerunner import make_runner
from autoresearchd.manifest import MANIFEST_FILE, EnvManifest, ManifestError, match_globs, parse_manifest
from autoresearchd.research import is_repo, load_manifest, research_path, template_path
from autoresearchd.runners.local import local_gpu_count
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.refs import branch_name, branch_ref
from autoresearchd.vocab import Level

ERROR, WARN, OK = Level.ERROR, Level.WARN, Level.OK


@dataclass
class Finding:
    level: str          # error | warn | ok
    what: str           # one line; plain text (callers escape it for rich)
    hint: str = ""


@dataclass
class EnvSource:
    """Where the manifest and the baseline's files come from: the existing repo or the template."""
    where: str                      # "research repo PATH" or "template PATH"
    manifest: EnvManifest
    files: list[str]                # every file path of the baseline (or the template)
    root: Path | None = None        # the template dir, when it is one


def _registry_name(what: str, names: list[str], name: str) -> Finding | None:
    if name in names:
        return None
    return Finding(ERROR, f"{what}: unknown name '{name}'; valid: {', '.join(sorted(names))}")


def env_source(cfg: Config) -> EnvSource:
    """The manifest and file list `start` would use, read without creating or configuring anything.
    Raises ConfigError naming the exact key at fault."""
    path, _ = research_path(cfg)        # the repo `start` would use (init DIR's repo is DIR itself)
    if is_repo(path):
        repo = GitRepo(path)
        # the full name: `--short` gives "heads/main" when a tag `main` exists
        head = repo.git("symbolic-ref", "-q", "HEAD", check=False).strip() or "refs/heads/main"
        rev = cfg.research.baseline or head
        if repo.rev_parse(branch_ref(rev)) is None:
            raise ConfigError(f"research.repo: {path} has no commit on '{branch_name(rev)}' yet; "
                              f"commit your baseline first")
        manifest = load_manifest(repo, branch_ref(rev), cfg)
        branch = cfg.research.baseline or manifest.baseline
        ref = branch_ref(branch)
        if repo.rev_parse(ref) is None:
            raise ConfigError(f"baseline branch '{branch}' not found in {path}")
        manifest = load_manifest(repo, ref, cfg)
        files = [e.path for e in repo.ls_tree(ref) if e.type == "blob"]
        return EnvSource(f"research repo {path}", manifest, files)
    if path.exists() and any(path.iterdir()):
        raise ConfigError(f"research.repo: {path} exists but is not a git repository")
    name = cfg.research.env
    looks_like_path = os.sep in name or name.startswith(".") or cfg.resolve(name).exists()
    if looks_like_path and not (cfg.resolve(name) / MANIFEST_FILE).is_file():
        p = cfg.resolve(name)
        why = "does not exist" if not p.exists() else f"has no {MANIFEST_FILE} with an [env] table"
        raise ConfigError(f"research.env: the env template {p} {why}; give a directory holding an "
                          f"environment (docs/environment.md) or a packaged env name (tinygpt, nanogpt, grpo)")
    root = template_path(cfg, name)
    try:
        manifest = cfg.env or parse_manifest((root / MANIFEST_FILE).read_text(), f"{root.name}/{MANIFEST_FILE}")
    except ManifestError as e:
        raise ConfigError(str(e)) from None
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts)
    return EnvSource(f"template {root}", manifest, files, root)


_SCRIPT_SUFFIXES = (".py", ".sh", ".bash")   # scripts; data paths may be made by an earlier step


def _named_files(command: str) -> list[str]:
    """Relative script paths a command names (`python train.py`, `bash scripts/setup.sh`)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    out = []
    for w in words:
        if w.startswith("-") or "$" in w or "*" in w or "=" in w or w.startswith(("~", "/")):
            continue
        if w.endswith(_SCRIPT_SUFFIXES):
            out.append(w.removeprefix("./"))
    return out


def manifest_findings(src: EnvSource, cfg: Config) -> list[Finding]:
    """Missing files, frozen globs that match nothing, a setup path that does not exist."""
    m, files = src.manifest, set(src.files)
    dirs = {str(Path(f).parent) for f in files} | {p for f in files for p in map(str, Path(f).parents)}
    out = []
    for key in ("run", "evaluate", "check", "setup"):
        cmd = getattr(m, key)
        if not cmd:
            continue
        missing = [f for f in _named_files(cmd) if f not in files and f.rstrip("/") not in dirs]
        if missing:
            out.append(Finding(ERROR, f"env.{key} names {', '.join(missing)}, which is not in the baseline "
                                      f"({src.where})", "commit the file or fix the command"))
    if m.setup:
        # an absolute path in setup (a venv on the host) can be checked only where the trial runs: here
        if cfg.runner.kind == "local":
            try:
                words = shlex.split(m.setup)
            except ValueError:
                words = []
            gone = [w for w in words if w.startswith(("/", "~/")) and "$" not in w
                    and not Path(os.path.expanduser(w)).exists()]
            if gone:
                out.append(Finding(ERROR, f"env.setup names {', '.join(gone)}, which does not exist on this host"))
    for g in m.frozen:
        if not any(_glob_hits(g, f) for f in files):
            out.append(Finding(ERROR, f"env.frozen: '{g}' matches no file in the baseline ({src.where}); "
                                      f"a typo here would leave the evaluator editable"))
    if m.evaluate and not m.frozen:
        out.append(Finding(WARN, "env.frozen is empty: the evaluator could be edited by ideas"))
    return out


def _glob_hits(glob: str, path: str) -> bool:
    return match_globs(path, [glob])


def runner_findings(cfg: Config, m: EnvManifest | None) -> list[Finding]:
    r = cfg.runner
    bad = _registry_name("runner.kind", runner_registry.names(), r.kind)
    if bad:
        return [bad]
    out = []
    if r.kind == "ssh" and not r.hosts:
        out.append(Finding(ERROR, "runner.kind = 'ssh' needs at least one [[runner.hosts]] entry (docs/hosts.md)"))
    names = [h.name for h in r.hosts]
    if r.kind == "slurm" and r.slurm.login and r.slurm.login not in names:
        out.append(Finding(ERROR, f"runner.slurm.login = '{r.slurm.login}' is not a [[runner.hosts]] name"))
    if not out and r.kind != "local":
        out += _construct(cfg, m)
    if m is None or m.gpus <= 0:
        return out
    need = m.gpus
    cpu = (f"if the run trains on the CPU, set gpus = 0 in the manifest's [env] (env.gpus = 0; now "
           f"{need}), and commit it")
    if r.kind == "local":
        have = local_gpu_count()
        if len(r.gpus) < need:
            out.append(Finding(ERROR, f"the env needs {need} GPU(s) per run, but runner.gpus lists "
                                      f"{len(r.gpus)} (this machine has {have})",
                               f"this machine has no GPU: {cpu}; or use an ssh/slurm runner with GPU hosts"
                               if have == 0 else "set runner.gpus = [0, ...] or use an ssh/slurm runner"))
        elif max(r.gpus) >= have:
            out.append(Finding(ERROR, f"runner.gpus = {r.gpus}, but this machine has {have} GPU(s)",
                               f"this machine has no GPU: {cpu}" if have == 0 else
                               f"list GPU ids below {have} in runner.gpus"))
    elif r.kind == "ssh":
        few = [h.name for h in r.hosts if h.gpus < need]
        if few:
            out.append(Finding(ERROR, f"the env needs {need} GPU(s) per run; host(s) {', '.join(few)} "
                                      f"declare fewer (gpus = ...) in [[runner.hosts]]",
                               f"declare the hosts' GPUs, or {cpu}"))
    return out


def _construct(cfg: Config, m: EnvManifest | None) -> list[Finding]:
    """Build the runner without connecting: host entries it cannot use (an ssh alias with no ssh
    config, duplicate names) are refused here rather than as a traceback at start."""
    try:
        make_runner(cfg, None, manifest=m or EnvManifest(run="true", metric="m")).close()
    except (ValueError, ConfigError) as e:
        return [Finding(ERROR, f"runner: {e}")]
    return []


def llm_findings(cfg: Config, src: EnvSource | None) -> list[Finding]:
    out = []
    bad = _registry_name("policy.name", policy_registry.names(), cfg.policy.name)
    if bad:
        out.append(bad)
    out += _implementer_findings(cfg)
    # the env decides what `auto` falls back to; unreadable at the baseline, the file on disk still names it
    env_name = src.manifest.name if src else (cfg.env.name if cfg.env else None)
    name, why = llm_registry.resolve_provider_name(cfg.llm, env_name)
    found = _provider_findings(cfg, src, name)
    if not any(f.level == ERROR for f in found):   # one verdict on the LLM: its error(s), or this line
        level = WARN if name == "none" and cfg.llm.provider == "auto" else OK
        found.append(Finding(level, f"LLM provider: {name}" + (f" ({why})" if why else
                                                                " (running pushed idea branches only)"
                                                                if name == "none" else "")))
    return out + found


def _provider_findings(cfg: Config, src: EnvSource | None, name: str) -> list[Finding]:
    """What keeps the resolved provider from working: a missing key, replay file or price."""
    out: list[Finding] = []
    if name == "none":
        return out
    if name == "replay":
        if cfg.llm.ensemble:
            out.append(Finding(ERROR, "llm.ensemble: the main provider resolved to replay; an ensemble needs "
                                      "a live provider (set llm.provider and its key)"))
        if cfg.llm.replay_file:
            p = cfg.resolve(cfg.llm.replay_file)
            if not p.is_file():
                out.append(Finding(ERROR, f"llm.replay_file: {p} does not exist"))
        elif src is not None and not _packaged_replay(src.manifest.name):
            out.append(Finding(ERROR, f"llm.provider = \"replay\": env '{src.manifest.name}' has no packaged "
                                      f"replay file; set llm.replay_file, or ANTHROPIC_API_KEY or OPENAI_API_KEY "
                                      f"with llm.provider = \"auto\", or llm.provider = \"none\" to run only "
                                      f"pushed idea branches"))
        return out
    key_env = cfg.llm.api_key_env or {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}.get(name)
    if key_env and not os.environ.get(key_env, "").strip() and not (name == "openai" and cfg.llm.base_url):
        out.append(Finding(ERROR, f"llm.provider = '{name}' needs the environment variable {key_env} "
                                  f"(keys are read from the environment only)"))
    model = cfg.llm.model or default_model(name)
    if cfg.llm.budget_usd is not None and model not in cfg.llm.prices:
        out.append(Finding(ERROR, unpriced_message(model)))
    for m in cfg.llm.ensemble:          # each proposing model needs its key and, under a budget, a price
        same = m.provider == name
        env = m.api_key_env or (cfg.llm.api_key_env if same else None) or \
            {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}[m.provider]
        local = m.provider == "openai" and (m.base_url or (cfg.llm.base_url if same else None))
        if not os.environ.get(env, "").strip() and not local:
            out.append(Finding(ERROR, f"llm.ensemble model '{m.model}' ({m.provider}) needs the environment "
                                      f"variable {env} (keys are read from the environment only)"))
        if cfg.llm.budget_usd is not None and m.model not in cfg.llm.prices:
            out.append(Finding(ERROR, unpriced_message(m.model)))
    return out


def _implementer_findings(cfg: Config) -> list[Finding]:
    """implementer.kind names a known implementer; a coding agent's CLI is installed, and its
    sessions can be priced (docs/llm.md, "Coding agents")."""
    kind, a = cfg.implementer.kind, cfg.implementer.agent
    bad = _registry_name("implementer.kind", implementer.names(), kind)
    if bad or kind == "diff":
        return [bad] if bad else []
    cli = agent_cli.get(kind)
    out = []
    if cli.find(a.command) is None:
        out.append(Finding(ERROR, f"implementer.kind = '{kind}': {cli.missing_hint()}"))
    if a.model and cfg.llm.budget_usd is not None and a.model not in cfg.llm.prices:
        out.append(Finding(ERROR, unpriced_message(a.model)))
    elif kind == "codex" and (not a.model or a.model not in cfg.llm.prices):
        out.append(Finding(WARN, "codex reports no cost: give implementer.agent.model a price in llm.prices, "
                                 "or its sessions count as $0 and implementer.agent.max_usd cannot stop them"))
    return out


def unpriced_message(model: str) -> str:
    return (f"model '{model}' has no price in the llm.prices table while llm.budget_usd is set: its calls "
            f"would count as $0 and the budget could never stop them; add [llm.prices.\"{model}\"] with "
            f"input and output (USD per million tokens)")


def default_model(provider: str) -> str:
    return defaults.LLM_MODELS.get(provider, "unknown")


def _packaged_replay(env_name: str) -> bool:
    return llm_registry.packaged_replay(env_name) is not None


def findings(cfg: Config) -> tuple[list[Finding], EnvSource | None]:
    """Every problem `start` would refuse (errors) or should mention (warnings), read-only."""
    out: list[Finding] = []
    src = None
    try:
        src = env_source(cfg)
        m = src.manifest
        out.append(Finding(OK, f"env '{m.name}' from {src.where}: {m.goal} {m.metric}, "
                               f"{m.time_budget_s}s run budget, {m.gpus} GPU(s) per run"))
        out += manifest_findings(src, cfg)
    except ConfigError as e:
        out.append(Finding(ERROR, str(e)))
    out += runner_findings(cfg, src.manifest if src else None)
    out += llm_findings(cfg, src)
    return out, src


def require_valid(cfg: Config) -> list[Finding]:
    """For `start`: raise ConfigError with the first error; return the warnings."""
    found, _ = findings(cfg)
    errors = [f for f in found if f.level == ERROR]
    if errors:
        more = f" (and {len(errors) - 1} more problem(s): run `autoresearchd doctor`)" if len(errors) > 1 else ""
        raise ConfigError(errors[0].what + more)
    return [f for f in found if f.level == WARN]
