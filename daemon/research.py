"""The research repo: open the user's repo or create one from an env template, configure it so a
plain `git log` shows results, and read the manifest and the frozen evaluation harness from the
baseline commit (never from a work tree a trial could edit).
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
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.refs import (ARCHIVE_PREFIX, DAEMON_GROUPS, DAEMON_PREFIX, IDEA_BRANCHES, NOTES_REF,
                                     PROPOSALS_PREFIX, RECORDS_PREFIX, SCREENS_PREFIX, branch_ref)
from autoresearchd.tune.knobs import file_error

# Every hook the daemon installs first re-executes itself with an empty environment (PATH and the
# git dir only): a push or a ref update may come from a process that holds secrets.
# A push's objects wait in a quarantine directory until pre-receive accepts them: its three variables
# (paths, no secrets) are kept so the hook can read the objects it judges.
_HOOK_HEAD = """#!/bin/sh
# installed by autoresearchd (rewritten when it changes): %s
if [ -z "${AR_HOOK_CLEAN:-}" ]; then
  exec env -i AR_HOOK_CLEAN=1 PATH="$PATH" GIT_DIR="$(git rev-parse --absolute-git-dir)" \\
    ${GIT_QUARANTINE_PATH:+"GIT_QUARANTINE_PATH=$GIT_QUARANTINE_PATH"} \\
    ${GIT_OBJECT_DIRECTORY:+"GIT_OBJECT_DIRECTORY=$GIT_OBJECT_DIRECTORY"} \\
    ${GIT_ALTERNATE_OBJECT_DIRECTORIES:+"GIT_ALTERNATE_OBJECT_DIRECTORIES=$GIT_ALTERNATE_OBJECT_DIRECTORIES"} \\
    "$0" "$@"
fi
"""
_POKE = _HOOK_HEAD % "poke the daemon when an idea branch changes (the clock is the safety net)" + ("""\
case "$0" in *reference-transaction) [ "$1" = committed ] || exit 0 ;; esac
grep -q ' %s' || exit 0
f="$GIT_DIR/autoresearch/poke"
[ -d "$(dirname "$f")" ] && date +%%s > "$f"
exit 0
""" % IDEA_BRANCHES)
# A push is data, never configuration: it may create, move or delete idea branches and nothing else
# (docs/security.md, "A push is data: git mechanisms"). Every other ref a push could add changes what
# git reads: a replace ref swaps one object for another, a tag or a branch outside idea/ can make a
# name resolve elsewhere, a notes ref shows beside the results. The daemon's results, leases, logs,
# records and provenance marks are written by the daemon alone, so a push cannot forge a result or an
# origin; and the baseline branch (which holds the frozen evaluator every result is measured with)
# moves only by a commit or merge made in the research repo itself: a pushed evaluator would grade
# every idea after it. An idea branch must point at a commit (not a tag, tree or blob). The repo's
# owner may allow more (other branches, tags; never the daemon's refs, the baseline, replace or notes
# refs, HEAD-like names) with patterns in this git config key, e.g. `refs/heads/dev/*`: the daemon
# reads every ref by its full name, so such refs change none of its reads.
PUSH_ALLOW_KEY = "autoresearchd.pushAllow"
PUSH_MAX_KEYS = ("autoresearchd.pushMaxCommitBytes", "autoresearchd.pushMaxObjectBytes",
                 "autoresearchd.pushMaxTotalBytes", "autoresearchd.pushMaxPaths")  # defaults.PUSH_MAX_*
_GUARD = _HOOK_HEAD % "a push may write idea branches only" + ("""\
rc=0
ideanews=
base=$(cat "$GIT_DIR/autoresearch/baseline-ref" 2>/dev/null || git symbolic-ref -q HEAD)
fold_name() {
  sed "s/$(printf '\\305\\277')/s/g; s/$(printf '\\342\\204\\252')/k/g; s/$(printf '\\357\\254\\205')/st/g; \\
s/$(printf '\\357\\254\\206')/st/g" | tr -d '\\200-\\377' | tr '[:upper:]' '[:lower:]'
}
lbase=$(printf %%s "$base" | fold_name)
news=
set -f                     # the owner's patterns below are matched against ref names, never globbed
allow=$(git config --get-all %(allow)s)
while read -r old new ref; do
  opt=1                    # refusals the owner may lift for a pattern of %(allow)s
  case "$ref" in
    %(daemon)s*|%(notes)s|%(notes)s-*)
      why="only the daemon writes its results and records"; opt= ;;
    "$base")
      why="it is the baseline, whose frozen evaluator grades every idea; push idea/* branches, and move the \\
baseline by a commit or merge made in the research repo itself"; opt= ;;
    %(ideas)s?*)
      why= ;;
    refs/replace/*)
      why="a replace ref substitutes one object for another in every git read"; opt= ;;
    refs/notes/*)
      why="notes are the daemon's: a pushed notes ref would show beside its results"; opt= ;;
    refs/tags/*)
      why="tags are not ideas, and a tag named like a branch makes that name ambiguous" ;;
    HEAD|*/HEAD|*_HEAD)
      why="a HEAD-like name is ambiguous"; opt= ;;
    refs/heads/*)
      why="only branches under idea/ are ideas; other branches belong to the research repo" ;;
    *)
      why="only idea branches (%(ideas)s...) may be pushed" ;;
  esac
  # on a case-insensitive filesystem (macOS, Windows) a loose ref that differs only in letter case IS
  # the guarded ref: refs/heads/MAIN moves main, refs/Autoresearch/... writes the daemon's records
  # (case-insensitive filesystems fold more than ASCII letters: APFS and NTFS take U+017F long s for s,
  # U+212A Kelvin for k, and HFS+ ignores zero-width and direction characters, as git's fsck knows for
  # `.git`: folded to the letters, every other non-ASCII byte dropped, such a name compares as ASCII)
  lref=$(printf %%s "$ref" | fold_name)
  case "$lref" in
    %(daemon)s*|%(notes)s|%(notes)s-*|"$lbase"|refs/replace/*|refs/notes/*)
      if [ "$lref" != "$ref" ]; then
        why="it differs only in letter case from a ref the daemon guards, or in characters that a case-insensitive \
filesystem folds or ignores (the same file there)"; opt=
      fi ;;
  esac
  # a ref named like a directory above the refs the daemon writes or guards (refs/autoresearch, refs/notes,
  # refs/heads/idea, refs/heads) is a file where git needs that directory: none of them could be written
  for g in %(daemon)s %(notes)s %(ideas)s "$lbase"; do
    case "$g" in "$lref"/*)
      why="it would take the name of the directory that holds $g"; opt= ;;
    esac
  done
  # the daemon names its own idea branches idea/<group>/<slug>-<id> (groups eNNN and human): a pushed
  # branch named like a group is a file where git needs a directory, and one created under a group can
  # be a directory where the daemon's next branch must go; either makes that branch fail to be written
  # and its implementation be retried, paid for, and fail again
  case "$lref" in %(ideas)s?*)
    grp=${lref#%(ideas)s}
    if printf %%s "${grp%%%%/*}" | grep -qE '%(groups)s' && [ -n "$(printf %%s "$new" | tr -d 0)" ]; then
      if [ "${grp%%%%/*}" = "$grp" ]; then
        why="the daemon names its own branches under $ref/: a branch of that name would block them"; opt=
      elif [ -z "$(printf %%s "$old" | tr -d 0)" ]; then
        why="the daemon names its own new branches under idea/${grp%%%%/*}/: push yours under another name, \
such as idea/<you>/..."; opt=
      fi
    fi ;;
  esac
  if [ -n "$why" ] && [ -n "$opt" ]; then
    for p in $allow; do
      case "$ref" in $p) why= ;; esac
    done
  fi
  if [ -z "$why" ] && [ -n "$(printf %%s "$new" | tr -d 0)" ] && [ "${ref#refs/tags/}" = "$ref" ]; then
    t=$(git --no-replace-objects cat-file -t "$new" 2>/dev/null)
    [ "$t" = commit ] || why="it would point at a ${t:-missing object}, not a commit"
  fi
  if [ -n "$why" ]; then
    echo "autoresearchd: refusing to update $ref by push: $why" >&2
    rc=1
  elif [ -n "$(printf %%s "$new" | tr -d 0)" ]; then
    news="$news $new"
    case "$ref" in %(ideas)s?*) ideanews="$ideanews$new $ref
" ;; esac
  fi
done
# A result note, a proposal's or a record's trailers belong to a commit, not to a ref: an idea branch at
# a commit the daemon keeps as something else (a proposal, a record, a screened run, an old baseline)
# would take them over (an old evaluator's result judged as an idea's, a proposal's LLM spend dropped).
# The population shows no such idea (population.not_an_idea, ref_rank); this says why. A commit measured
# as an idea before (kept under archive/) and the baseline's own commit may be pushed again. One listing
# of the daemon's refs and one of its notes, whatever the number of refs pushed.
if [ $rc = 0 ] && [ -n "$ideanews" ]; then
  basec=$(git --no-replace-objects rev-parse -q --verify "$base^{commit}")
  taken=$( { printf '%%s--\\n' "$ideanews"
             git for-each-ref --format='%%(objectname) %%(refname)' %(kept)s; echo --
             git notes --ref=%(notes)s list 2>/dev/null; } |
    awk -v b="$basec" 'sec == 0 && $0 == "--" { sec = 1; next } sec == 1 && $0 == "--" { sec = 2; next }
      sec == 0 { want[$1] = $2; next }
      sec == 1 && $2 ~ /^%(archive_re)s/ { kept[$1] = 1; next }
      sec == 1 && ($1 in want) { print want[$1] " it points at the commit of " $2; exit }
      sec == 2 && ($2 in want) && !($2 in kept) && $2 != b { print want[$2] " it points at an old baseline"; exit }')
  if [ -n "$taken" ]; then
    echo "autoresearchd: refusing to update ${taken%%%% *} by push: ${taken#* }, whose result and provenance are \\
that commit's; push a commit of your own (git commit --allow-empty on it)" >&2
    rc=1
  fi
fi
# What the accepted refs bring, once inflated: receive.maxInputSize caps the pack compressed, and a zlib
# or delta bomb inflates far past it (defaults.PUSH_MAX_*). Sizes come from object headers: no blob is
# inflated here.
if [ $rc = 0 ] && [ -n "$news" ]; then
  maxc=$(git config --type=int --get %(kc)s || echo %(dc)d)
  maxo=$(git config --type=int --get %(ko)s || echo %(do)d)
  maxt=$(git config --type=int --get %(kt)s || echo %(dt)d)
  big=$(git --no-replace-objects rev-list --objects --no-object-names $news --not --all |
    git --no-replace-objects cat-file --batch-check='%%(objectsize) %%(objecttype) %%(objectname)' |
    awk -v c="$maxc" -v o="$maxo" -v t="$maxt" '
      ($2 == "commit" || $2 == "tag") && $1 > c { print "the " $2 " " $3 " is " $1 " bytes, over " c; exit }
      ($2 == "blob" || $2 == "tree") && $1 > o { print "the " $2 " " $3 " is " $1 " bytes, over " o; exit }
      { s += $1 } s > t { print "its new objects come to over " t " bytes"; exit }')
  if [ -n "$big" ]; then
    echo "autoresearchd: refusing the push: $big once inflated (git config %(kc)s, %(ko)s, %(kt)s)" >&2
    rc=1
  fi
  # a tree may name one subtree many times, and that one many times again: a few KiB of trees can list
  # 10^10 paths (a "git bomb"), which the gate's diff and the export would walk. Count each tip's paths,
  # directories included (listed as they are entered, so empty ones count too), and stop at the cap.
  maxp=$(git config --type=int --get %(kp)s || echo %(dp)d)
  for n in $news; do
    [ $rc = 0 ] || break
    c=$(git --no-replace-objects ls-tree -r -t --name-only "$n" 2>/dev/null | head -n $((maxp + 1)) | wc -l)
    if [ "$c" -gt "$maxp" ]; then
      echo "autoresearchd: refusing the push: the tree of $n lists more than $maxp paths (git config %(kp)s)" >&2
      rc=1
    fi
  done
fi
exit $rc
""" % {"daemon": DAEMON_PREFIX, "notes": NOTES_REF, "ideas": IDEA_BRANCHES, "allow": PUSH_ALLOW_KEY,
       "groups": DAEMON_GROUPS, "kp": PUSH_MAX_KEYS[3], "dp": defaults.PUSH_MAX_PATHS,
       "kc": PUSH_MAX_KEYS[0], "ko": PUSH_MAX_KEYS[1], "kt": PUSH_MAX_KEYS[2],
       "kept": " ".join((ARCHIVE_PREFIX, PROPOSALS_PREFIX, RECORDS_PREFIX, SCREENS_PREFIX)),
       "archive_re": ARCHIVE_PREFIX.replace("/", "\\/"), "dc": defaults.PUSH_MAX_COMMIT_BYTES, "do": defaults.PUSH_MAX_OBJECT_BYTES, "dt": defaults.PUSH_MAX_TOTAL_BYTES})
HOOKS = {"reference-transaction": _POKE, "post-receive": _POKE, "pre-receive": _GUARD}


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
