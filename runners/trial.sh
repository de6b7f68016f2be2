#!/usr/bin/env bash
# autoresearchd trial wrapper. Runs detached in its trial directory; needs only bash and coreutils.
# Layout: code/ (the idea's tree), eval/ (frozen harness from the baseline), trial.env (quoted vars).
# Writes: prepare.rc/prepare.log (when the manifest has `prepare`), run.head/run.tail (capped log), run.bytes, run.rc, timed_out, eval.*, tamper.txt, done.
# Pre-staged trials wait here for their slot's lock (AR_SLOT_LOCK) before `started` and the budget clock.
set -u
cd "$(dirname "$0")" || exit 97
T=$PWD
. "$T/trial.env"
echo $$ > "$T/pgid"

# The once-per-host prepare step (runners/prepare.sh): before the slot lock and the budget clock, so
# its time counts against neither budget; cached in <work_root>/.prepared/<key>.
if [ -n "${AR_PREPARE:-}" ]; then
  export AUTORESEARCH_PREPARED="${T%/*}/.prepared/$AR_PREPARE_KEY"
  AR_PREPARE=$AR_PREPARE AR_SETUP=$AR_SETUP AR_PREPARE_BUDGET=$AR_PREPARE_BUDGET AR_KILL_GRACE=$AR_KILL_GRACE \
    bash "$T/prepare.sh" "${T%/*}" "$AR_PREPARE_KEY" "$T/eval" "$T/prepare.log"
  echo $? > "$T/prepare.rc"
  if [ "$(cat "$T/prepare.rc")" != 0 ]; then
    date +%s.%N > "$T/started"; date +%s.%N > "$T/done"
    [ -n "${AR_EVENTS:-}" ] && echo "${T##*/}" >> "$AR_EVENTS" 2>/dev/null
    exit 0
  fi
fi

# The slot lock: held on fd 9 until this wrapper exits (however it exits: the kernel drops it), so a
# trial staged behind the running one starts the moment the slot frees. Children do not inherit it.
if [ -n "${AR_SLOT_LOCK:-}" ]; then
  exec 9>> "$AR_SLOT_LOCK" || exit 96
  if command -v flock > /dev/null 2>&1; then flock 9
  elif command -v python3 > /dev/null 2>&1; then python3 -c 'import fcntl; fcntl.flock(9, fcntl.LOCK_EX)'
  fi
fi
date +%s.%N > "$T/started"

# capped log: keep the head and the tail, drain the rest so the writer never blocks or dies
cap() { { head -c "$AR_LOG_HEAD" > "$1.head"; tail -c "$AR_LOG_TAIL" > "$1.tail"; } ; }

checksum_frozen() {
  ( cd "$T/code" && for f in "${AR_FROZEN[@]}"; do
      if [ -e "$f" ] || [ -L "$f" ]; then sha256sum -- "$f" 2>/dev/null || echo "unreadable  $f"; else echo "absent  $f"; fi
    done ) > "$1"
}

run_budgeted() {  # $1 budget seconds, $2 log prefix, $3 command string; records rc and time-out
  local budget=$1 log=$2 cmd=$3
  setsid bash -c "$cmd" 9>&- > >(exec 9>&-; cap "$T/$log") 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" > "$T/$log.pid"
  # the watchdog's sleeps are waited on, so killing the watchdog ends them too (no orphan `sleep`)
  ( exec 9>&-; trap 'kill "$s" 2>/dev/null; exit 0' TERM
    sleep "$budget" & s=$!; wait "$s"
    if kill -0 "$pid" 2>/dev/null; then echo 1 > "$T/$log.timed_out";
      kill -TERM -- "-$pid" 2>/dev/null; sleep "$AR_KILL_GRACE" & s=$!; wait "$s"; kill -KILL -- "-$pid" 2>/dev/null; fi ) &
  local watchdog=$!
  wait "$pid"; local rc=$?
  kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null
  kill -KILL -- "-$pid" 2>/dev/null   # stray children of the run's own process group
  wait 2>/dev/null                     # let the log cap drain
  echo "$rc" > "$T/$log.rc"
}

mkdir -p "$T/artifacts"
checksum_frozen "$T/frozen.before"
cd "$T/code"
export AUTORESEARCH_RESULT="$T/run_result.json" AUTORESEARCH_ARTIFACTS="$T/artifacts"
run_budgeted "$AR_BUDGET" run "${AR_SETUP:+$AR_SETUP && }$AR_RUN"
cd "$T"
checksum_frozen "$T/frozen.after"
cmp -s "$T/frozen.before" "$T/frozen.after" || diff "$T/frozen.before" "$T/frozen.after" > "$T/tamper.txt"
for f in sitecustomize.py usercustomize.py; do
  found=$(find "$T/code" -name "$f" -newer "$T/started" 2>/dev/null | head -n 3)
  [ -n "$found" ] && echo "run wrote $found" >> "$T/tamper.txt"
done

if [ -n "${AR_EVALUATE:-}" ] && [ "$(cat "$T/run.rc")" = 0 ] && [ ! -e "$T/run.timed_out" ]; then
  # Trust nothing from run but the declared artifacts: copy them out of code/ into a fresh dir,
  # then evaluate from the frozen harness with a clean environment (no PYTHONPATH, no user site).
  for a in "${AR_ARTIFACTS[@]}"; do
    if [ -e "$T/code/$a" ] && [ ! -L "$T/code/$a" ]; then
      mkdir -p "$T/artifacts/$(dirname "$a")"; cp -r "$T/code/$a" "$T/artifacts/$a"
    fi
  done
  cd "$T/eval"
  q() { printf '%q' "$1"; }
  cmd="${AR_SETUP:+$AR_SETUP && }$AR_EVALUATE"
  run_budgeted "$AR_EVAL_BUDGET" eval "env -i PATH=$(q "$AR_PATH") HOME=$(q "$HOME") LANG=C.UTF-8 \
PYTHONNOUSERSITE=1 PYTHONSAFEPATH=1 PYTHONDONTWRITEBYTECODE=1 \
CUDA_VISIBLE_DEVICES=$(q "${CUDA_VISIBLE_DEVICES:-}") AUTORESEARCH_SEED=$(q "$AUTORESEARCH_SEED") \
AUTORESEARCH_ARTIFACTS=$(q "$T/artifacts") AUTORESEARCH_RESULT=$(q "$T/eval_result.json") \
AUTORESEARCH_PREPARED=$(q "${AUTORESEARCH_PREPARED:-}") \
$AR_DATA_ENV bash -c $(q "$cmd")"
fi
date +%s.%N > "$T/finished"
mv -f "$T/finished" "$T/done"
# wake the daemon's event waiter for this host (runners.base.ShellRunner.wait_event)
[ -n "${AR_EVENTS:-}" ] && echo "${T##*/}" >> "$AR_EVENTS" 2>/dev/null
exit 0
