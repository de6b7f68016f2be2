#!/usr/bin/env bash
# autoresearchd trial wrapper. Runs detached in its trial directory; needs only bash and coreutils.
# Layout: code/ (the idea's tree), eval.tar (the baseline's frozen files), trial.env (quoted vars).
# Writes: prepare.rc/prepare.log (when the manifest has `prepare`), run.head/run.tail (capped log), run.bytes,
# run.rc, timed_out, eval.*, tamper.txt, done; per step (limits.sh) S.cpu_us, S.time, S.gpu_s, S.limit, and limits;
# with a split evaluation also eval_inputs.* (the scorer's first phase), model.* (the model runner's
# capped log: untrusted, never parsed; its accounting summed over the groups) and eval.error.
# Isolation: run and evaluate each start through their sandbox's prefix (AR_SB_RUN, AR_SB_EVAL, built
# by runners/sandbox.py) with a clean environment. run sees code/ (writable) and nothing else of this
# directory; eval/ is unpacked only once run's sandbox (its PID namespace) is gone, and the evaluator
# sees eval/, the declared artifacts (read-only) and the eval-only data. Status files stay out here.
# Pre-staged trials wait here for their slot's lock (AR_SLOT_LOCK) before `started` and the budget clock.
# Cost: a no-op trial's whole time is this script's, so it starts as few processes as it can: builtins
# read files and clocks, answers come back in variables, not $(...) (docs/benchmarks.md "Sandbox
# overhead per trial": a fork and exec is ~1-4 ms, and a trial used to start ~400 of them).
set -u
here=${0%/*}; [ "$here" = "$0" ] && here=.
cd "${here:-/}" || exit 97
T=$PWD
. "$T/trial.env"
# per-step CPU/GPU accounting and kernel limits (runners/limits.sh: functions only until lim_init)
. "$T/limits.sh"
echo $$ > "$T/pgid"
# cancelled before this wrapper could be found by its pgid (runners/base.py cancel): run nothing
[ -e "$T/cancelled" ] && exit 0

# The once-per-host prepare step (runners/prepare.sh): before the slot lock and the budget clock, so
# its time counts against neither budget; cached in <work_root>/.prepared/<key>.
if [ -n "${AR_PREPARE:-}" ]; then
  export AUTORESEARCH_PREPARED="${T%/*}/.prepared/$AR_PREPARE_KEY"
  # its source: the baseline's frozen files less the evaluator's held-out ones (run sees its output)
  rm -rf "$T/prep-src" && mkdir "$T/prep-src" && { [ ! -s "$T/eval.tar" ] || tar -x --no-same-owner -f "$T/eval.tar" -C "$T/prep-src"; }
  for h in "${AR_HELDOUT[@]}"; do rm -rf -- "$T/prep-src/$h"; done
  AR_PREPARE=$AR_PREPARE AR_SETUP=$AR_SETUP AR_PREPARE_BUDGET=$AR_PREPARE_BUDGET AR_KILL_GRACE=$AR_KILL_GRACE \
    bash "$T/prepare.sh" "${T%/*}" "$AR_PREPARE_KEY" "$T/prep-src" "$T/prepare.log" 7>&-
  rc=$?; echo "$rc" > "$T/prepare.rc"
  rm -rf "$T/prep-src"
  if [ "$rc" != 0 ]; then
    lim_now; echo "$LIM_NOW" > "$T/started"; echo "$LIM_NOW" > "$T/done"
    [ -n "${AR_EVENTS:-}" ] && echo "${T##*/}" >> "$AR_EVENTS" 2>/dev/null
    exit 0
  fi
fi

take_lock() {   # $1: an open descriptor; waits for its exclusive flock
  if command -v flock > /dev/null 2>&1; then flock "$1"
  elif command -v python3 > /dev/null 2>&1; then python3 -c "import fcntl; fcntl.flock($1, fcntl.LOCK_EX)"
  fi
}
# The slot lock: held on fd 9 until this wrapper exits (however it exits: the kernel drops it), so a
# trial staged behind the running one starts the moment the slot frees. Children do not inherit it.
# Order: flock wakes its waiters in no set order, and a wrapper launched later may reach the lock
# first, so the trials staged on one slot queue (docs/hosts.md, "The slot's queue"). The submit
# (runners/base.py queued) numbered this trial k (`seq`) and took the lock of its entry in the slot's
# ring of turns (<slot>.q/<k mod 256>, emptied) on fd 7. This wrapper waits on k-1's turn (released
# once that trial holds the slot, or when it ends); where k-1 ended without taking the slot (its entry
# does not say `slotted`: cancelled, its prepare failed, killed), on k-2's, and so on. The entries
# live outside trial directories, so a trial cleaned away leaves its turn; every wait is on a smaller
# number, so no two trials wait on each other. Then the slot; then its own turn says `slotted`, and goes.
if [ -n "${AR_SLOT_LOCK:-}" ]; then
  q=${AR_SLOT_LOCK%.lock}.q k=; [ ! -r "$T/seq" ] || read -r k < "$T/seq"
  case $k in ''|*[!0-9]*|0?*|?????????*) k=0;; esac
  j=$(( k - 1 )) last=$(( k - 255 ))
  while [ "$j" -gt 0 ] && [ "$j" -ge "$last" ] && { exec 6< "$q/$(( j % 256 ))"; } 2> /dev/null; do
    take_lock 6; said=; read -r said <&6
    [ "$said" != slotted ] || break
    j=$(( j - 1 ))
  done
  exec 6<&-
  exec 9>> "$AR_SLOT_LOCK" || exit 96
  take_lock 9
  [ "$k" = 0 ] || echo slotted >&7
  exec 7>&-
fi
[ -e "$T/cancelled" ] && exit 0           # cancelled while it waited for the slot
lim_now; echo "$LIM_NOW" > "$T/started"
# the limits and the accounting's mechanisms (runners/limits.sh): decided once, before any step
lim_init

# capped log: keep the head and the tail, drain the rest so the writer never blocks or dies. head's
# stdout is made unbuffered where stdbuf exists: otherwise stdio holds a running trial's log until exit.
unbuf=(); command -v stdbuf > /dev/null 2>&1 && unbuf=(stdbuf -o0)
# (tail is exec'd: the subshell that runs cap becomes it, no fork for it)
cap() { "${unbuf[@]}" head -c "$AR_LOG_HEAD" > "$1.head"; exec tail -c "$AR_LOG_TAIL" > "$1.tail"; }

# What run left at a frozen path is read here, outside every sandbox and budget: a fifo would block
# sha256sum forever (holding the slot), a link to /dev/zero or a sparse 1 TiB file would be read for
# hours. So only regular files (after links) are opened, each sha256sum under RLIMIT_CPU (AR_FROZEN_CPU:
# a subshell that execs it, the fork the command took anyway); the rest is named, never opened.
checksum_frozen() {  # one sha256sum for all; file by file (naming the absent, odd, unreadable) where it fails
  [ ${#AR_FROZEN[@]} -gt 0 ] || { : > "$1"; return; }
  # in this shell, not a ( cd ) subshell (a fork per call); it goes back to where it was
  local back=$PWD f odd=
  if cd "$T/code" 2>/dev/null; then
    for f in "${AR_FROZEN[@]}"; do [ ! -e "$f" ] || [ -f "$f" ] || { odd=1; break; }; done   # builtins only
    { [ -z "$odd" ] &&
      ( ulimit -t "${AR_FROZEN_CPU:-10}" 2>/dev/null; exec sha256sum -- "${AR_FROZEN[@]}" ) > "$1" 2>/dev/null; } ||
      for f in "${AR_FROZEN[@]}"; do
        if [ -e "$f" ] && [ ! -f "$f" ]; then echo "not a regular file  $f"
        elif [ -e "$f" ] || [ -L "$f" ]; then
          ( ulimit -t "${AR_FROZEN_CPU:-10}" 2>/dev/null; exec sha256sum -- "$f" ) 2>/dev/null || echo "unreadable  $f"
        else echo "absent  $f"; fi
      done > "$1"
  fi
  cd "$back" || exit 97
  [ -e "$1" ] || : > "$1"      # no code/ at all: an empty list, as before
}

# fd 8: a pipe nobody writes to, opened once (both ends in one descriptor), where /dev/fd allows: the
# watchdog waits on it with `read -t`, a builtin, where it started a `sleep` per wait (a fork and an
# exec each); it has then no child, and TERM (its default action) ends it at once
WD=
wd_wait() {      # $1 seconds
  if [ -n "$WD" ]; then read -r -t "$1" -u 8 wd_x
  else trap 'kill "$s" 2>/dev/null; exit 0' TERM; sleep "$1" & s=$!; wait "$s"; fi    # (no orphan `sleep`)
}
run_budgeted() {  # $1 budget seconds, $2 log prefix, $3 command string; records rc and time-out
  local budget=$1 log=$2 cmd=$3 s= capfd capid x
  [ -n "$WD" ] || { { exec 8<> <(:); } 2>/dev/null && WD=1; }
  lim_begin "$log"; lim_enter "$log"
  # the log cap, opened first so that its PID is known ($! of the process substitution): `wait` with no
  # argument does not wait for a process substitution, so `done` could be written while the cap still
  # wrote the step's log (an evaluator's score missing from eval.head under load)
  exec {capfd}> >(exec 9>&- 8<&-; cap "$T/$log"); capid=$!
  # the step's first process is this subshell: it joins the step's groups with builtins (LIM_ENTER),
  # then setsid execs the command line in its place (no fork: the subshell leads no process group), so
  # $! is the step's session and group; one bash start fewer than `setsid bash -c` ($3 is one simple
  # command, quoted by sandboxed()). Neither it nor the log cap keeps the slot lock or fd 8.
  ( eval "$LIM_ENTER"; eval "exec setsid $cmd" ) 9>&- 8<&- >&"$capfd" 2>&1 {capfd}>&- < /dev/null &
  local pid=$!
  echo "$pid" > "$T/$log.pid"
  ( exec 9>&- {capfd}>&-; wd_wait "$budget"
    if kill -0 "$pid" 2>/dev/null; then echo 1 > "$T/$log.timed_out";
      kill -TERM -- "-$pid" 2>/dev/null; wd_wait "$AR_KILL_GRACE"; kill -KILL -- "-$pid" 2>/dev/null; fi ) &
  local watchdog=$!
  exec {capfd}>&-                      # (the cap must not wait for this shell: it writes nothing there)
  wait "$pid"; local rc=$?
  kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null
  kill -KILL -- "-$pid" 2>/dev/null   # stray children of the run's own process group
  wait 2>/dev/null
  lim_end "$log"                       # its CPU/wall/GPU time, the limit it hit; its cgroup emptied
  # the log cap ends once the last writer is gone (lim_end killed what was left in the step's groups):
  # its files are whole before the step's rc, and so `done`, is written. Bounded (5 s): an escaped
  # process of an unsandboxed step with no cgroup may hold the pipe open
  for x in {1..100}; do kill -0 "$capid" 2>/dev/null || break
    if [ -n "$WD" ]; then read -r -t 0.05 -u 8 wd_x; else sleep 0.05; fi; done
  echo "$rc" > "$T/$log.rc"
}

# SB_CMD, one command line: the sandbox prefix (array named $1), a clean environment ($3...), bash -c $2
sandboxed() {
  local -n pre=$1; local cmd=$2; shift 2
  # LIM_INNER (limits.sh): the rlimits, set inside the sandbox (its own user namespace counts its
  # processes). The trailing `exit $?` keeps that bash from exec-ing the command: as the sandbox's
  # PID 1 it stays, reaps every orphan and so carries their CPU time out (limits.sh, rusage).
  # One printf quotes every word (its format repeats): no fork per word (a bwrap prefix has ~130)
  local n=${#pre[@]}
  if [ "$n" -gt 0 ] && [ "${pre[n-1]}" = -- ] && [[ " ${pre[*]} " == *" --clearenv "* ]]; then
    # bwrap (runners/sandbox.py: its prefix clears the environment and ends with `--`): the variables
    # become its --setenv pairs, so the step starts `bash` itself, not an `env -i` that execs it (one
    # exec fewer a step); the same environment (bash adds PWD, SHLVL and _ either way), the same
    # `bash` (bwrap looks it up on the PATH set here, as env did)
    local kv sets=()
    for kv; do sets+=(--setenv "${kv%%=*}" "${kv#*=}"); done
    printf -v SB_CMD '%q ' "${pre[@]:0:n-1}" "${sets[@]}" -- bash -c "${LIM_INNER:-}$cmd"$'\n''exit $?'
  elif [ "$n" -gt 1 ] && [ "${pre[n-2]}" = env ] && [ "${pre[n-1]}" = -i ]; then
    # `none` (its prefix ends with a bare `env -i`): the variables go there, not to a second `env -i`
    printf -v SB_CMD '%q ' "${pre[@]}" "$@" bash -c "${LIM_INNER:-}$cmd"$'\n''exit $?'
  else
    printf -v SB_CMD '%q ' "${pre[@]}" env -i "$@" bash -c "${LIM_INNER:-}$cmd"$'\n''exit $?'
  fi
}
# what both steps get: nothing of the host's environment but these (never a secret)
# PYTHONUNBUFFERED: a Python run's output reaches run.head while it runs (a pipe is block-buffered)
base_env=(PATH="$PATH" LANG=C.UTF-8 PYTHONUNBUFFERED=1 AUTORESEARCH_SEED="$AUTORESEARCH_SEED" AUTORESEARCH_TRIAL="$AUTORESEARCH_TRIAL"
          AUTORESEARCH_TIME_BUDGET_S="$AUTORESEARCH_TIME_BUDGET_S" "${AR_DATA[@]}")
[ -n "${CUDA_VISIBLE_DEVICES+x}" ] && base_env+=(CUDA_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES")
[ -n "${AUTORESEARCH_PREPARED:-}" ] && base_env+=(AUTORESEARCH_PREPARED="$AUTORESEARCH_PREPARED")
for v in "${AR_PASS_ENV[@]}"; do [ -n "${!v+x}" ] && base_env+=("$v=${!v}"); done

# The split evaluation (manifest `model`; docs/security.md "A model is code: the split evaluation"):
# 1. the scorer's `inputs` phase writes input groups io/in/<g>/ and keeps its secrets in eval/;
# 2. the model runner, once per group in a fresh sandbox (AR_SB_MODEL) that sees model/ (the frozen
#    files less the evaluator-only ones), the artifacts and io/cur/in, read-only, and writes io/cur/out
#    only, bounded by RLIMIT_FSIZE and a total checked here; its log (model.*) is never parsed;
# 3. the scorer's `score` phase reads io/out/<g>/ and prints the only parsed output (eval.*).
# The budget is one: every step gets what AR_EVAL_BUDGET has left. A failed step stops the evaluation
# with eval.rc and a one-line reason in eval.error (written here, never by the sandboxed steps).
eval_left() { local l=$(( eval_end - $(date +%s) )); [ "$l" -gt 0 ] && echo "$l" || echo 1; }
split_fail() { echo "$1" > "$T/eval.rc"; printf '%s\n' "$2" > "$T/eval.error"; }
model_group() {  # $1 group name: a fresh model/ and io/cur/{in,out}, one sandboxed run, the checks
  local g=$1 io="$T/io" rc lim=$(( AR_MODEL_OUTPUT_KB * 1024 )) sz big odd h
  rm -rf "$T/model" "$io/cur" && mkdir -p "$T/model" "$io/cur/out" || return 1
  { [ ! -s "$T/eval.tar" ] || tar -x --no-same-owner -f "$T/eval.tar" -C "$T/model"; } || return 1
  for h in "${AR_HELDOUT[@]}"; do rm -rf -- "$T/model/$h"; done
  mv -- "$io/in/$g" "$io/cur/in" || return 1
  # limits.sh writes the step's accounting afresh each run: keep the earlier groups' to add them up
  local p_us=0 p_t0= p_gpu=0 p_lim= _x
  [ -s "$T/model.cpu_us" ] && read -r p_us < "$T/model.cpu_us"
  [ -s "$T/model.time" ] && read -r p_t0 _x < "$T/model.time"
  [ -s "$T/model.gpu_s" ] && read -r p_gpu < "$T/model.gpu_s"
  [ -s "$T/model.limit" ] && p_lim=$(cat "$T/model.limit")
  cd "$T/model"
  sandboxed AR_SB_MODEL "ulimit -f $AR_MODEL_OUTPUT_KB && ${AR_SETUP:+$AR_SETUP && }$AR_MODEL" \
    "${base_env[@]}" HOME="$T/model" PYTHONNOUSERSITE=1 PYTHONSAFEPATH=1 PYTHONDONTWRITEBYTECODE=1 \
    AUTORESEARCH_ARTIFACTS="$T/artifacts" AUTORESEARCH_MODEL_IN="$io/cur/in" AUTORESEARCH_MODEL_OUT="$io/cur/out" \
    AUTORESEARCH_MODEL_GROUP="$g"
  run_budgeted "$(eval_left)" model "$SB_CMD"
  cd "$T"
  if [ -n "$p_t0" ]; then     # one model step over all groups: CPU and GPU summed, wall first to last
    [ -s "$T/model.cpu_us" ] && { read -r _x < "$T/model.cpu_us"; echo $(( _x + p_us )) > "$T/model.cpu_us"; }
    [ -s "$T/model.time" ] && { read -r _x _x < "$T/model.time"; echo "$p_t0 $_x" > "$T/model.time"; }
    [ -s "$T/model.gpu_s" ] && { read -r _x < "$T/model.gpu_s"; awk -v a="$_x" -v b="$p_gpu" 'BEGIN { printf "%.3f\n", a + b }' > "$T/model.gpu_s"; }
    [ -n "$p_lim" ] && { printf '%s\n' "$p_lim"; cat "$T/model.limit" 2>/dev/null; } > "$T/model.limit.new" && mv -f "$T/model.limit.new" "$T/model.limit"
  fi
  rc=$(cat "$T/model.rc")
  sz=$(find "$io/cur/out" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}')
  big=$(find "$io/cur/out" -type f -printf '%s\n' 2>/dev/null | sort -n | tail -n 1)
  odd=$(find "$io/cur/out" ! -type f ! -type d 2>/dev/null | head -n 1)
  mv -- "$io/cur/in" "$io/in/$g" && mv -- "$io/cur/out" "$io/out/$g" && rm -rf "$T/model"
  if [ -e "$T/model.timed_out" ]; then : > "$T/eval.timed_out"
    split_fail 124 "the model runner (group $g) ran past the evaluation budget of ${AR_EVAL_BUDGET}s"
  elif [ "${big:-0}" -ge "$lim" ] || [ "$sz" -gt "$lim" ]; then
    split_fail 3 "the model runner (group $g) wrote ${sz} bytes, at or over the bound model_output_mb = $(( lim / 1048576 )) (exit $rc)"
  elif [ -n "$odd" ]; then
    # (not its name: the model chose it, and this reason reaches the note)
    split_fail 3 "the model runner (group $g) left something other than a plain file (a link, a pipe) in its output"
  elif [ "$rc" != 0 ]; then
    split_fail "$rc" "the model runner (group $g) exited $rc (its output is in the model runner's log, untrusted)"
  else return 0; fi
  return 1
}
split_eval() {
  local io="$T/io" d g
  eval_end=$(( $(date +%s) + AR_EVAL_BUDGET ))
  rm -rf "$io" && mkdir -p "$io/in" "$io/out" || { split_fail 1 "could not make the evaluation's io directory"; return; }
  cd "$T/eval"
  sandboxed AR_SB_EVAL "${AR_SETUP:+$AR_SETUP && }$AR_EVALUATE" "${eval_env[@]}" AUTORESEARCH_EVAL_PHASE=inputs \
    AUTORESEARCH_MODEL_IO="$io"
  run_budgeted "$(eval_left)" eval_inputs "$SB_CMD"
  cd "$T"
  if [ -e "$T/eval_inputs.timed_out" ]; then : > "$T/eval.timed_out"
    split_fail 124 "the scorer's inputs phase ran past the evaluation budget of ${AR_EVAL_BUDGET}s"; return
  elif [ "$(cat "$T/eval_inputs.rc")" != 0 ]; then
    split_fail "$(cat "$T/eval_inputs.rc")" "the scorer's inputs phase exited $(cat "$T/eval_inputs.rc")"; return
  fi
  for d in "$io/in"/*; do
    g=${d##*/}
    [ -d "$d" ] && [ ! -L "$d" ] || continue
    model_group "$g" || { [ -e "$T/eval.error" ] || split_fail 1 "could not stage model runner group $g"; return; }
  done
  cd "$T/eval"
  sandboxed AR_SB_EVAL "${AR_SETUP:+$AR_SETUP && }$AR_EVALUATE" "${eval_env[@]}" AUTORESEARCH_EVAL_PHASE=score \
    AUTORESEARCH_MODEL_IO="$io"
  run_budgeted "$(eval_left)" eval "$SB_CMD"
  cd "$T"
  rm -rf "$io"
}

[ -d "$T/artifacts" ] || mkdir -p "$T/artifacts"
checksum_frozen "$T/frozen.before"
cd "$T/code"
# the learning curve (runners/progress.py): a committed file of that name is no curve of this run
{ [ ! -e "$T/code/$AR_PROGRESS" ] && [ ! -L "$T/code/$AR_PROGRESS" ]; } || rm -rf -- "$T/code/$AR_PROGRESS"
sandboxed AR_SB_RUN "${AR_SETUP:+$AR_SETUP && }$AR_RUN" "${base_env[@]}" ${AR_KNOBS[@]+"${AR_KNOBS[@]}"} HOME="$T/code" \
  AUTORESEARCH_ARTIFACTS="$T/code" AUTORESEARCH_RESULT="$T/code/.autoresearch_result.json" AUTORESEARCH_PROGRESS="$T/code/$AR_PROGRESS"
run_budgeted "$AR_BUDGET" run "$SB_CMD"
cd "$T"
checksum_frozen "$T/frozen.after"
# the two checksum lists compared in the shell (cmp is a process); diff only when they differ
IFS= read -r -d '' fb < "$T/frozen.before"; IFS= read -r -d '' fa < "$T/frozen.after"
[ "$fb" = "$fa" ] || diff "$T/frozen.before" "$T/frozen.after" > "$T/tamper.txt"
# one find for both names, a line each, at most six
n=0
while IFS= read -r found; do
  echo "run wrote $found" >> "$T/tamper.txt"; n=$(( n + 1 )); [ "$n" -lt 6 ] || break
done < <(find "$T/code" \( -name sitecustomize.py -o -name usercustomize.py \) -newer "$T/started" 2>/dev/null)
C=
# a plain file or directory at exactly code/$1: no link on the way, none inside
plain() {
  local r
  [ -n "$C" ] || C=$(readlink -f -- "$T/code")
  r=$(readlink -f -- "$C/$1") && [ "$r" = "$C/${1#./}" ] && [ -z "$(find "$r" -type l 2>/dev/null | head -n 1)" ]
}
r="$T/code/.autoresearch_result.json"
[ -f "$r" ] && plain .autoresearch_result.json && head -c 1000000 "$r" > "$T/run_result.json"
# the curve, bounded as the live reader bounds it (its first and last halves when bigger)
pf="$T/code/$AR_PROGRESS"
if [ -f "$pf" ] && plain "$AR_PROGRESS"; then
  psz=$(stat -c %s -- "$pf" 2>/dev/null || echo 0); ph=$(( AR_PROGRESS_MAX / 2 ))
  if [ "$psz" -le "$AR_PROGRESS_MAX" ]; then head -c "$AR_PROGRESS_MAX" -- "$pf"
  else head -c "$ph" -- "$pf"; echo; tail -c "$ph" -- "$pf"; fi > "$T/progress.jsonl" 2>/dev/null
fi

run_rc=; read -r run_rc < "$T/run.rc"
if [ -n "${AR_EVALUATE:-}" ] && [ "$run_rc" = 0 ] && [ ! -e "$T/run.timed_out" ]; then
  # run is over (sandboxed: its PID namespace is gone, so none of its processes is left). Take only
  # the declared artifacts out of code/, then unpack the evaluator from the baseline's frozen files.
  for a in "${AR_ARTIFACTS[@]}"; do
    [ -e "$T/code/$a" ] || [ -L "$T/code/$a" ] || continue
    if plain "$a"; then mkdir -p "$T/artifacts/$(dirname "$a")"; mv -- "$T/code/$a" "$T/artifacts/$a"
    else echo "run wrote a link at or inside artifact $a" >> "$T/tamper.txt"; fi
  done
  { [ ! -e "$T/eval" ] && [ ! -L "$T/eval" ] || rm -rf "$T/eval"; } && mkdir "$T/eval" &&
    { [ ! -s "$T/eval.tar" ] || tar -x --no-same-owner -f "$T/eval.tar" -C "$T/eval"; }
  eval_env=("${base_env[@]}" HOME="$T/eval" PYTHONNOUSERSITE=1 PYTHONSAFEPATH=1 PYTHONDONTWRITEBYTECODE=1
            AUTORESEARCH_ARTIFACTS="$T/artifacts" "${AR_EVAL_DATA[@]}")
  if [ -n "${AR_MODEL:-}" ]; then
    split_eval
  else
    cd "$T/eval"
    sandboxed AR_SB_EVAL "${AR_SETUP:+$AR_SETUP && }$AR_EVALUATE" "${eval_env[@]}"
    run_budgeted "$AR_EVAL_BUDGET" eval "$SB_CMD"
    cd "$T"
  fi
fi
lim_fini; trap - EXIT
lim_now; echo "$LIM_NOW" > "$T/finished"
mv -f "$T/finished" "$T/done"
# wake the daemon's event waiter for this host (runners.base.ShellRunner.wait_event)
[ -n "${AR_EVENTS:-}" ] && echo "${T##*/}" >> "$AR_EVENTS" 2>/dev/null
exit 0
