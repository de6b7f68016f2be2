#!/usr/bin/env bash
# autoresearchd prepare step: runs the manifest's `prepare` (data download, preprocessing) at most once
# per host and input hash. Usage: prepare.sh ROOT KEY SRC LOG, with AR_PREPARE, AR_SETUP,
# AR_PREPARE_BUDGET and AR_KILL_GRACE in the environment.
# It runs in ROOT/.prepared/KEY, a fresh copy of SRC (the baseline's frozen files), which is also
# where its output stays: setup, run, evaluate and check see it as $AUTORESEARCH_PREPARED.
# ROOT/.prepared/KEY/.done marks it complete; callers wait on ROOT/.prepared/KEY.lock, so two trials
# never prepare at once, and a failed or timed-out prepare leaves no .done (the next trial retries).
set -u
root=$1 key=$2 src=$3 log=$4
case $key in ''|*/*|.*) echo "prepare: bad cache key '$key'" > "$log"; exit 94 ;; esac
d="$root/.prepared/$key"
mkdir -p "$root/.prepared" || exit 95
exec 8>> "$d.lock" || exit 95
if command -v flock > /dev/null 2>&1; then flock 8
elif command -v python3 > /dev/null 2>&1; then python3 -c 'import fcntl; fcntl.flock(8, fcntl.LOCK_EX)'
fi
if [ -e "$d/.done" ]; then
  echo "prepare: already done on this host ($d)" > "$log"
  exit 0
fi
rm -rf "$d" && mkdir -p "$d" && cp -a "$src/." "$d/" || exit 95
export AUTORESEARCH_PREPARED="$d"
cd "$d" || exit 95
# timeout(1) kills the step's process group at its budget (rc 124); the lock fd stays with us
timeout -k "${AR_KILL_GRACE:-10}" "${AR_PREPARE_BUDGET:-3600}" \
  bash -c "${AR_SETUP:+$AR_SETUP && }$AR_PREPARE" > "$d.log" 2>&1 < /dev/null 8>&-
rc=$?
tail -c 65536 "$d.log" > "$log" 2>/dev/null
[ "$rc" = 0 ] && date +%s > "$d/.done"
exit "$rc"
