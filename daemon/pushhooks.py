"""The hooks the daemon installs in the research repo, as their texts: `pre-receive`, the push guard (a
push may write idea branches only; docs/security.md, "A push is data: git mechanisms"), and the pokes
(`reference-transaction`, `post-receive`) that wake the daemon when an idea branch changes.
`research.configure` writes them and keeps them current.
"""

from __future__ import annotations

from autoresearchd import defaults
from autoresearchd.store.refs import (ARCHIVE_PREFIX, DAEMON_GROUPS, DAEMON_PREFIX, IDEA_BRANCHES, NOTES_REF,
                                      PROPOSALS_PREFIX, RECORDS_PREFIX, SCREENS_PREFIX)

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
                 "autoresearchd.pushMaxTotalBytes", "autoresearchd.pushMaxPaths", "autoresearchd.pushMaxTotalPaths")  # defaults.PUSH_MAX_*
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
  case "$ref" in
    *[!\\ -~]*) lref=$(printf %%s "$ref" | fold_name) ;;
    *) lref=$(printf %%s "$ref" | tr '[:upper:]' '[:lower:]') ;;     # ASCII: two processes fewer a ref
  esac
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
  # The cap is per tip, and many tips may share one wide tree (a push of a few KiB): the paths of all the
  # tips together are capped too, each commit counted once (the daemon diffs each arriving tip).
  maxp=$(git config --type=int --get %(kp)s || echo %(dp)d)
  maxtp=$(git config --type=int --get %(ktp)s || echo %(dtp)d)
  tot=0
  counted=
  for n in $news; do
    [ $rc = 0 ] || break
    case "$counted " in *" $n "*) continue ;; esac
    counted="$counted $n"
    c=$(git --no-replace-objects ls-tree -r -t --name-only "$n" 2>/dev/null | head -n $((maxp + 1)) | wc -l)
    tot=$((tot + c))
    if [ "$c" -gt "$maxp" ]; then
      echo "autoresearchd: refusing the push: the tree of $n lists more than $maxp paths (git config %(kp)s)" >&2
      rc=1
    elif [ "$tot" -gt "$maxtp" ]; then
      echo "autoresearchd: refusing the push: the trees of its commits list more than $maxtp paths together \
(git config %(ktp)s)" >&2
      rc=1
    fi
  done
fi
exit $rc
""" % {"daemon": DAEMON_PREFIX, "notes": NOTES_REF, "ideas": IDEA_BRANCHES, "allow": PUSH_ALLOW_KEY,
       "groups": DAEMON_GROUPS, "kp": PUSH_MAX_KEYS[3], "dp": defaults.PUSH_MAX_PATHS,
       "ktp": PUSH_MAX_KEYS[4], "dtp": defaults.PUSH_MAX_TOTAL_PATHS,
       "kc": PUSH_MAX_KEYS[0], "ko": PUSH_MAX_KEYS[1], "kt": PUSH_MAX_KEYS[2],
       "kept": " ".join((ARCHIVE_PREFIX, PROPOSALS_PREFIX, RECORDS_PREFIX, SCREENS_PREFIX)),
       "archive_re": ARCHIVE_PREFIX.replace("/", "\\/"), "dc": defaults.PUSH_MAX_COMMIT_BYTES, "do": defaults.PUSH_MAX_OBJECT_BYTES, "dt": defaults.PUSH_MAX_TOTAL_BYTES})
HOOKS = {"reference-transaction": _POKE, "post-receive": _POKE, "pre-receive": _GUARD}
