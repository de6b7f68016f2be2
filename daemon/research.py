"""The research repo: open the user's repo or create one from an env template, configure it so a
plain `git log` shows results (and install its hooks, whose texts are pushhooks.py), and read the
manifest and the frozen evaluation harness from the baseline commit (never from a work tree a trial
could edit).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from autoresearchd import defaults
from autoresearchd.config import Config, ConfigError
from autoresearchd.envs import template_dir
from autoresearchd.manifest import (EVAL_FILE, EXPORT_FILE, MANIFEST_FILE, EnvManifest, ManifestError, match_globs,
                                    parse_manifest)
from autoresearchd.runners.prepare import prepare_key
from autoresearchd.pushguard import _stale_hooks, guard_problem, is_ours
# the hooks' texts; re-exported: the tests and the docs name them here
from autoresearchd.pushhooks import _HOOK_HEAD, HOOKS, PUSH_ALLOW_KEY, PUSH_MAX_KEYS  # noqa: F401
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.refs import NOTES_REF, branch_ref
from autoresearchd.tune.knobs import file_error



def template_path(cfg: Config, name: str) -> Path:
    """An env template: a path relative to the config file, or the name of a packaged env."""
    p = cfg.resolve(name)
    if (p / MANIFEST_FILE).is_file():
        return p
    try:
        return template_dir(Path(name).name)
    except KeyError as e:
        raise ConfigError(f"research.env: {e.args[0]}") from None


def create_from_template(template: Path, dest: Path) -> GitRepo:
    if dest.exists() and any(dest.iterdir()):
        raise ConfigError(f"{dest} exists and is not empty; choose another directory")
    shutil.copytree(template, dest, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".venv", "wandb"))
    repo = GitRepo.init(dest, branch="main")
    repo.commit_all_initial(f"baseline: {template.name} environment\n\nCreated by autoresearchd from the "
                            f"'{template.name}' template.")
    return repo


def configure(repo: GitRepo) -> list[str]:
    """Idempotent: plain `git log` shows result notes; fetches from clones bring notes along.
    Returns what it newly wrote into the repo's git config and hooks (empty when nothing). Called
    only by `init` and `start`: reading commands (status, doctor, ...) write nothing (consent)."""
    wrote = []
    if NOTES_REF not in repo.git("config", "--get-all", "notes.displayRef", check=False).split():
        repo.config_set("notes.displayRef", NOTES_REF, add=True)
        wrote.append(f"notes.displayRef={NOTES_REF}")
    repo.ensure_notes_ref(NOTES_REF)
    for key, value in defaults.RECEIVE_CONFIG.items():
        # receive.fsckObjects falls back to transfer.fsckObjects: a user's choice of either stands
        if not any(repo.git("config", "--get", k, check=False).strip()
                   for k in (key, key.replace("receive.", "transfer."))):
            repo.config_set(key, value)
            wrote.append(f"{key}={value}")
    hooks = repo.git_dir / "hooks"
    hooks.mkdir(exist_ok=True)
    for name, text in HOOKS.items():
        h = hooks / name
        try:
            current = h.read_text(errors="replace")
        except OSError:
            current = None
        if (current == text and os.access(h, os.X_OK)) or \
                (current is not None and not is_ours(current)):
            continue            # up to date, or the user's own hook: left alone (guard_problem says so)
        h.write_text(text)
        h.chmod(0o755)
        wrote.append(f"hooks/{name}")
    # hooks run from the directory core.hooksPath names, from any config git reads: a global one (a
    # hooks manager's) would switch the guard off for every push. A local value wins over it
    local = repo.git("config", "--local", "--get", "core.hooksPath", check=False).strip()
    if local != str(hooks) and (not local or _stale_hooks(Path(local))):
        repo.config_set("core.hooksPath", str(hooks))       # unset, or ours before the repo moved
        wrote.append(f"core.hooksPath={hooks}")
    (repo.git_dir / "autoresearch").mkdir(exist_ok=True)
    problem = guard_problem(repo)
    if problem:
        raise ConfigError(f"pushes to {repo.path} would not be checked: {problem}; the daemon does not "
                          "start on a repo whose pushes could forge its results (docs/security.md)")
    return wrote


def consent_message(repo: GitRepo, wrote: list[str]) -> str | None:
    """The one line that says what `configure` wrote into a repo and how to take it out again."""
    if not wrote:
        return None
    hooks = [w.removeprefix("hooks/") for w in wrote if w.startswith("hooks/")]
    keys = [w.split("=", 1)[0] for w in wrote if "=" in w]
    undo = [f"git config --unset-all {k}" for k in keys]
    if hooks:      # the directory once, then the names: a short line that pastes into any POSIX shell
        undo.append(f"(cd {shlex.quote(str(repo.git_dir / 'hooks'))} && rm -- {' '.join(hooks)})")
    return (f"wrote into {repo.git_dir}: {', '.join(wrote)} (so plain `git log` shows results, pushes "
            f"wake the daemon and a push writes idea branches only); to remove: {' && '.join(undo)}")


@dataclass
class Research:
    repo: GitRepo
    baseline_ref: str
    manifest: EnvManifest
    why: str = ""          # why this repo is the research repo (start says it)
    configured: str | None = None   # what open_research(configure_repo=True) wrote, as one line
    _prepare_keys: dict = field(default_factory=dict, repr=False)

    @property
    def baseline_commit(self) -> str:
        c = self.repo.rev_parse(self.baseline_ref)
        if c is None:
            raise ConfigError(f"baseline branch {self.baseline_ref} does not exist in {self.repo.path}")
        return c

    def frozen_files(self, commit: str | None = None) -> list[str]:
        entries = self.repo.ls_tree(commit or self.baseline_commit)
        return sorted(e.path for e in entries if e.type == "blob" and self.manifest.is_frozen(e.path))

    def harness(self) -> tuple[bytes | None, str | None]:
        """(tar of the baseline's frozen files, hash of their blob ids). The evaluator runs from this."""
        files = self.frozen_files()
        if not files:
            return None, None
        entries = self.repo.ls_tree(self.baseline_commit, files)
        digest = hashlib.sha256("\n".join(f"{e.sha} {e.path}" for e in entries).encode()).hexdigest()[:16]
        return self.repo.archive(self.baseline_commit, files), digest

    def prepare_key(self) -> str:
        """The cache key of the manifest's prepare step (empty when there is none), from the baseline."""
        if not self.manifest.prepare:
            return ""
        base = self.baseline_commit
        if base not in self._prepare_keys:        # one ls-tree per baseline, not one per dispatch
            files = [f for f in self.frozen_files(base) if _match_any(f, self.manifest.prepare_inputs)]
            entries = self.repo.ls_tree(base, files) if files else []
            self._prepare_keys[base] = prepare_key(self.manifest, [(e.path, e.sha) for e in entries])
        return self._prepare_keys[base]


def _match_any(path: str, globs: list[str]) -> bool:
    return match_globs(path, globs)


def load_manifest(repo: GitRepo, rev: str, cfg: Config | None = None) -> EnvManifest:
    # A config file that is the repo's own manifest (what `adopt` writes) is read from the baseline
    # commit like any manifest: an uncommitted edit on disk never changes what the daemon enforces.
    own = cfg is not None and cfg.path is not None and cfg.path == (repo.path / MANIFEST_FILE).resolve()
    if cfg is not None and cfg.env is not None and not own:
        return cfg.env
    text = repo.read_blob(f"{rev}:{MANIFEST_FILE}")
    if text is None and (repo.path / MANIFEST_FILE).is_file():
        raise ConfigError(_uncommitted(repo, rev))
    if text is None:
        raise ConfigError(f"{repo.path}: no {MANIFEST_FILE} with an [env] table at {rev}; "
                          f"see docs/environment.md to turn a repo into an environment")
    try:
        m = parse_manifest(text.decode(), f"{repo.path.name}:{MANIFEST_FILE}")
    except ManifestError as e:
        raise ConfigError(str(e)) from None
    # the baseline's own knobs files (declaration, values): ideas are gated on theirs, the baseline here
    why = file_error(repo, rev, m)
    if why:
        raise ConfigError(f"{repo.path.name} at {rev}: {why}")
    return m


def _uncommitted(repo: GitRepo, rev: str) -> str:
    """The manifest is on disk (adopt wrote it) but not in the baseline commit: say so, and how to
    commit it with the files adopt wrote beside it that are not committed either."""
    branch = rev.removeprefix("refs/heads/")
    files = [MANIFEST_FILE] + [f for f in (EVAL_FILE, EXPORT_FILE, ".gitignore") if (repo.path / f).is_file()
                               and repo.read_blob(f"{rev}:{f}") != (repo.path / f).read_bytes()]
    q = shlex.quote(str(repo.path))
    return (f"{repo.path / MANIFEST_FILE} exists in the work tree but is not committed on '{branch}': the "
            f"daemon reads the manifest from the baseline commit, never from the work tree; review it, then "
            f"commit it on '{branch}': git -C {q} add {' '.join(files)} && "
            f"git -C {q} commit -m 'autoresearchd environment'")


def is_repo(path: Path) -> bool:
    return (path / ".git").exists() or (path / "HEAD").is_file() and (path / "objects").is_dir()


def research_path(cfg: Config) -> tuple[Path, str]:
    """(the research repo, why that one). A git repo whose own .autoresearch.toml holds the [env]
    manifest, started from inside, is the research repo itself (what `init DIR` creates), unless
    research.repo names another; otherwise research.repo, by default created from research.env."""
    if "repo" in cfg.research.model_fields_set:
        return cfg.resolve(cfg.research.repo), f"research.repo in {cfg.path or 'the environment'}"
    if cfg.path is not None and cfg.env is not None and is_repo(cfg.path.parent):
        return cfg.path.parent, f"the git repo holding the [env] manifest {cfg.path}"
    return (cfg.resolve(cfg.research.repo),
            f"the default research.repo ({cfg.research.repo}), created from env '{cfg.research.env}'")


def open_research(cfg: Config, create: bool = True, configure_repo: bool = False) -> Research:
    """Open (or, with `create`, create) the research repo. Only `configure_repo=True` (init, start)
    writes git config or hooks into it; the message saying so is `Research.configured`."""
    path, why = research_path(cfg)
    if is_repo(path):
        repo = GitRepo(path)
    elif create:
        repo = create_from_template(template_path(cfg, cfg.research.env), path)
    else:
        raise ConfigError(f"research repo {path} ({why}) does not exist; run `autoresearchd init` or `start`")
    message = consent_message(repo, configure(repo)) if configure_repo else None
    # the full name: `--short` gives "heads/main" when a tag `main` exists
    head = repo.git("symbolic-ref", "-q", "HEAD", check=False).strip() or "refs/heads/main"
    # a full ref name: a tag or a ref named `main` must not decide which manifest (and baseline) is read
    manifest = load_manifest(repo, branch_ref(cfg.research.baseline or head), cfg)
    branch = cfg.research.baseline or manifest.baseline
    ref = branch_ref(branch)
    if repo.rev_parse(ref) is None:
        raise ConfigError(f"baseline branch '{branch}' not found in {path}")
    manifest = load_manifest(repo, ref, cfg)
    if configure_repo:      # the pre-receive hook refuses pushes to it (a branch other than HEAD's, too)
        (repo.git_dir / "autoresearch" / "baseline-ref").write_text(ref + "\n")
    return Research(repo, ref, manifest, why, configured=message)
