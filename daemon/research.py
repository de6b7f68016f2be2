"""The research repo: open the user's repo or create one from an env template, configure it so a
plain `git log` shows results, and read the manifest and the frozen evaluation harness from the
baseline commit (never from a work tree a trial could edit).
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from . import defaults
from .config import Config, ConfigError
from .gitrepo import GitRepo
from .manifest import MANIFEST_FILE, EnvManifest, ManifestError, parse_manifest

HOOK = """#!/bin/sh
# installed by autoresearchd init: poke the daemon when an idea branch changes (the clock is the safety net)
case "$0" in *reference-transaction) [ "$1" = committed ] || exit 0 ;; esac
grep -q ' refs/heads/idea/' || exit 0
f="$(git rev-parse --git-dir)/autoresearch/poke"
[ -d "$(dirname "$f")" ] && date +%s > "$f"
exit 0
"""


def template_path(cfg: Config, name: str) -> Path:
    """An env template: a path relative to the config file, or the name of a packaged env."""
    p = cfg.resolve(name)
    if (p / MANIFEST_FILE).is_file():
        return p
    from autoresearchd.envs import template_dir
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


HOOK_NAMES = ("reference-transaction", "post-receive")


def configure(repo: GitRepo) -> list[str]:
    """Idempotent: plain `git log` shows result notes; fetches from clones bring notes along.
    Returns what it newly wrote into the repo's git config and hooks (empty when nothing). Called
    only by `init` and `start`: reading commands (status, doctor, ...) write nothing (consent)."""
    wrote = []
    if defaults.NOTES_REF not in repo.git("config", "--get-all", "notes.displayRef", check=False).split():
        repo.config_set("notes.displayRef", defaults.NOTES_REF, add=True)
        wrote.append(f"notes.displayRef={defaults.NOTES_REF}")
    if repo.config_get("receive.denyCurrentBranch") != "updateInstead":
        repo.config_set("receive.denyCurrentBranch", "updateInstead")
        wrote.append("receive.denyCurrentBranch=updateInstead")
    hooks = repo.git_dir / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in HOOK_NAMES:
        h = hooks / name
        if not h.exists():
            h.write_text(HOOK)
            h.chmod(0o755)
            wrote.append(f"hooks/{name}")
    (repo.git_dir / "autoresearch").mkdir(exist_ok=True)
    return wrote


def consent_message(repo: GitRepo, wrote: list[str]) -> str | None:
    """The one line that says what `configure` wrote into a repo and how to take it out again."""
    if not wrote:
        return None
    hooks = [w.removeprefix("hooks/") for w in wrote if w.startswith("hooks/")]
    keys = [w.split("=", 1)[0] for w in wrote if "=" in w]
    undo = [f"git config --unset-all {k}" for k in keys]
    if hooks:
        undo.append("rm " + " ".join(shlex.quote(str(repo.git_dir / "hooks" / h)) for h in hooks))
    return (f"wrote into {repo.git_dir}: {', '.join(wrote)} (so plain `git log` shows results and pushes "
            f"wake the daemon); to remove: {' && '.join(undo)}")


@dataclass
class Research:
    repo: GitRepo
    baseline_ref: str
    manifest: EnvManifest
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
        from autoresearchd.runners.prepare import prepare_key
        base = self.baseline_commit
        if base not in self._prepare_keys:        # one ls-tree per baseline, not one per dispatch
            files = [f for f in self.frozen_files(base) if _match_any(f, self.manifest.prepare_inputs)]
            entries = self.repo.ls_tree(base, files) if files else []
            self._prepare_keys[base] = prepare_key(self.manifest, [(e.path, e.sha) for e in entries])
        return self._prepare_keys[base]


def _match_any(path: str, globs: list[str]) -> bool:
    from .manifest import _match
    return _match(path, globs)


def load_manifest(repo: GitRepo, rev: str, cfg: Config | None = None) -> EnvManifest:
    # A config file that is the repo's own manifest (what `adopt` writes) is read from the baseline
    # commit like any manifest: an uncommitted edit on disk never changes what the daemon enforces.
    own = cfg is not None and cfg.path is not None and cfg.path == (repo.path / MANIFEST_FILE).resolve()
    if cfg is not None and cfg.env is not None and not own:
        return cfg.env
    text = repo.read_blob(f"{rev}:{MANIFEST_FILE}")
    if text is None:
        raise ConfigError(f"{repo.path}: no {MANIFEST_FILE} with an [env] table at {rev}; "
                          f"see docs/environment.md to turn a repo into an environment")
    try:
        return parse_manifest(text.decode(), f"{repo.path.name}:{MANIFEST_FILE}")
    except ManifestError as e:
        raise ConfigError(str(e)) from None


def open_research(cfg: Config, create: bool = True, configure_repo: bool = False) -> Research:
    """Open (or, with `create`, create) the research repo. Only `configure_repo=True` (init, start)
    writes git config or hooks into it; the message saying so is `Research.configured`."""
    path = cfg.resolve(cfg.research.repo)
    if (path / ".git").exists() or (path / "HEAD").is_file() and (path / "objects").is_dir():
        repo = GitRepo(path)
    elif create:
        repo = create_from_template(template_path(cfg, cfg.research.env), path)
    else:
        raise ConfigError(f"research repo {path} does not exist; run `autoresearchd init` or `start`")
    message = consent_message(repo, configure(repo)) if configure_repo else None
    head = repo.git("symbolic-ref", "-q", "--short", "HEAD", check=False).strip() or "main"
    manifest = load_manifest(repo, cfg.research.baseline or head, cfg)
    branch = cfg.research.baseline or manifest.baseline
    ref = branch if branch.startswith("refs/") else f"refs/heads/{branch}"
    if repo.rev_parse(ref) is None:
        raise ConfigError(f"baseline branch '{branch}' not found in {path}")
    manifest = load_manifest(repo, ref, cfg)
    return Research(repo, ref, manifest, configured=message)
