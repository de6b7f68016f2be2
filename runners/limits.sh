# autoresearchd: per-step compute accounting and resource limits, sourced by trial.sh (bash only).
# Each step that trial.sh starts through run_budgeted (run, evaluate) gets:
#   - its CPU time, for its whole process tree: a cgroup's counter where the host lets this user make
#     one (cgroup v2 cpu.stat usage_usec, else v1 cpuacct.usage), else the rusage of the children
#     trial.sh reaped during the step (bwrap's PID 1 reaps every orphan inside the sandbox, so a
#     double-forked grandchild is still counted);
#   - its wall time, and its GPU time where it has GPUs (nvidia-smi utilisation, sampled);
#   - limits the kernel enforces: memory and processes by the step's cgroup where a memory / pids
#     controller is there (v2, else v1), else by rlimits set inside the sandbox (RLIMIT_DATA,
#     RLIMIT_NPROC: in an unprivileged sandbox's own user namespace that count is the sandbox's own);
#     open files always by RLIMIT_NOFILE;
#   - evidence of a limit it hit: the cgroup's oom_kill / pids max events.
# Inputs (trial.env): AR_MEM_MB, AR_MAX_PIDS, AR_MAX_FILES (0: derived here), AR_HOST_SLOTS,
# AR_MEM_SHARE, AR_PIDS_PER_CPU, AR_MIN_PIDS, AR_GPU_SAMPLE_S.
# Writes, per step S: S.cpu_us, S.time ("t0 t1"), S.gpu_s, S.limit (kernel evidence), and once
# `limits` (what was applied and how).

LIM_G2=; LIM_CPU=; LIM_MEM=; LIM_PIDS=; LIM_INNER=
declare -A LIM_V1=()        # v1 controller -> this trial's group dir

lim_v2_root() {             # this process's cgroup v2 directory, when there is a v2 hierarchy
  local _d mnt typ _r own
  while read -r _d mnt typ _r; do [ "$typ" = cgroup2 ] && break; mnt=; done < /proc/self/mounts
  own=$(sed -n 's/^0:://p' /proc/self/cgroup 2>/dev/null)
  [ -n "$mnt" ] && [ -n "$own" ] && printf '%s%s' "$mnt" "${own%/}"
}

lim_v1_root() {             # $1 a v1 controller: this process's group dir in its hierarchy
  local _d mnt typ opts _r own found=
  while read -r _d mnt typ opts _r; do
    [ "$typ" = cgroup ] && case ",$opts," in *",$1,"*) found=$mnt; break;; esac
  done < /proc/self/mounts
  own=$(awk -F: -v c="$1" '{ n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) print $3 }' \
        /proc/self/cgroup 2>/dev/null | head -n 1)
  [ -n "$found" ] && [ -n "$own" ] && printf '%s%s' "$found" "${own%/}"
}

lim_mkgroup() {             # $1 parent dir: makes <parent>/autoresearchd-<trial>, prints it
  local g="$1/autoresearchd-${T##*/}"
  [ -w "$1/cgroup.procs" ] || return 1
  # groups a killed wrapper left (SIGKILL skips its EXIT trap): an hour old and empty (rmdir refuses
  # a group with a process; a live trial between steps gets its group back from lim_begin's mkdir -p)
  find "$1" -maxdepth 1 -name 'autoresearchd-*' -mmin +60 2>/dev/null |
    while read -r old; do rmdir "$old"/*/ "$old"; done 2>/dev/null
  rmdir "$g"/*/ 2>/dev/null; rmdir "$g" 2>/dev/null      # a retry of the same trial id
  mkdir "$g" 2>/dev/null && printf '%s' "$g"
}

lim_init() {                # once per trial: the limits' values, and which mechanism enforces each
  local slots=$(( ${AR_HOST_SLOTS:-1} > 0 ? ${AR_HOST_SLOTS:-1} : 1 )) kb lim own cpus hard r c
  local mem=${AR_MEM_MB:-0} pids=${AR_MAX_PIDS:-0} files=${AR_MAX_FILES:-0}
  if [ "$mem" -le 0 ] 2>/dev/null; then     # a share of the host's memory (or of the cgroup we run in)
    kb=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo 2>/dev/null); kb=${kb:-0}
    own=$(lim_v2_root); lim=
    [ -n "$own" ] && [ -r "$own/memory.max" ] && lim=$(cat "$own/memory.max")
    [ -z "$lim" ] && own=$(lim_v1_root memory) && [ -r "$own/memory.limit_in_bytes" ] && lim=$(cat "$own/memory.limit_in_bytes")
    case $lim in ''|max|*[!0-9]*) ;; *) [ $(( lim / 1024 )) -lt "$kb" ] && kb=$(( lim / 1024 ));; esac
    mem=$(awk -v kb="$kb" -v s="${AR_MEM_SHARE:-0.8}" -v n="$slots" 'BEGIN { printf "%d", kb * s / n / 1024 }')
    [ "$mem" -gt 0 ] || mem=1024
  fi
  if [ "$pids" -le 0 ] 2>/dev/null; then
    cpus=$(nproc 2>/dev/null || echo 1)
    pids=$(( ${AR_PIDS_PER_CPU:-256} * cpus / slots )); [ "$pids" -ge "${AR_MIN_PIDS:-512}" ] || pids=${AR_MIN_PIDS:-512}
  fi
  [ "$files" -gt 0 ] 2>/dev/null || files=4096
  hard=$(ulimit -H -n); [ "$hard" = unlimited ] || [ "$files" -le "$hard" ] || files=$hard
  LIM_MEM_MB=$mem LIM_PIDS_N=$pids LIM_FILES_N=$files
  trap lim_fini EXIT
  # cgroup v2: a group of our own under this process's cgroup; the controllers it may use
  if r=$(lim_v2_root) && [ -n "$r" ] && LIM_G2=$(lim_mkgroup "$r"); then
    for c in memory pids; do echo "+$c" > "$LIM_G2/cgroup.subtree_control"; done 2>/dev/null
    LIM_CPU=cgroup2
    c=" $(cat "$LIM_G2/cgroup.subtree_control" 2>/dev/null) "
    [ "${c#* memory }" != "$c" ] && LIM_MEM=cgroup2
    [ "${c#* pids }" != "$c" ] && LIM_PIDS=cgroup2
  fi
  # cgroup v1, for what v2 does not give (a hybrid host: the controllers are bound to v1)
  for c in cpuacct memory pids; do
    case $c in cpuacct) [ -n "$LIM_CPU" ] && continue;; memory) [ -n "$LIM_MEM" ] && continue;;
      pids) [ -n "$LIM_PIDS" ] && continue;; esac
    r=$(lim_v1_root "$c") && [ -n "$r" ] && r=$(lim_mkgroup "$r") || continue
    LIM_V1[$c]=$r
    case $c in cpuacct) LIM_CPU=cgroup1;; memory) LIM_MEM=cgroup1;; pids) LIM_PIDS=cgroup1;; esac
  done
  # what no cgroup covers is an rlimit, set inside the sandbox (its own user namespace): the ulimit
  # values are lowered only, so they always apply
  LIM_INNER="ulimit -S -H -n $files"
  [ -n "$LIM_MEM" ] || { LIM_MEM=rlimit; LIM_INNER+=" -d $(( mem * 1024 ))"; }
  [ -n "$LIM_PIDS" ] || { LIM_PIDS=rlimit; LIM_INNER+=" -u $pids"; }
  LIM_INNER+=" || { echo 'autoresearchd: could not set the trial limits (ulimit)' >&2; exit 125; }; "
  printf 'memory_mb %s %s\npids %s %s\nopen_files %s rlimit\ncpu %s\n' "$mem" "$LIM_MEM" "$pids" "$LIM_PIDS" \
    "$files" "${LIM_CPU:-rusage}" > "$T/limits"
}

lim_kids_us() {             # LIM_US: CPU time of the children trial.sh has reaped so far, in us
  # (no command substitution here or in its callers: a subshell's `times` is its own, not ours)
  local a b x m s
  times > "$T/.times"; { read -r _; read -r a b; } < "$T/.times"
  LIM_US=0
  for x in "$a" "$b"; do
    m=${x%%m*}; s=${x#*m}; s=${s%s}; s=${s/,/.}
    LIM_US=$(( LIM_US + 10#$m * 60000000 + 10#${s%.*} * 1000000 + 10#${s#*.} * 1000 ))
  done
}

lim_dirs() {                # $1 step: its group dirs (v2 first)
  [ -n "$LIM_G2" ] && printf '%s\n' "$LIM_G2/$1"
  local c; for c in "${!LIM_V1[@]}"; do printf '%s\n' "${LIM_V1[$c]}/$1"; done
}

lim_begin() {               # $1 step name: make its groups, set their limits, start the clocks
  local s=$1 d
  [ -n "${LIM_MEM_MB:-}" ] || lim_init
  while read -r d; do [ -n "$d" ] && mkdir -p "$d" 2>/dev/null; done < <(lim_dirs "$s")
  if [ "$LIM_MEM" = cgroup2 ]; then echo "$(( LIM_MEM_MB * 1048576 ))" > "$LIM_G2/$s/memory.max"
    echo 0 > "$LIM_G2/$s/memory.swap.max" 2>/dev/null; fi
  [ "$LIM_PIDS" = cgroup2 ] && echo "$LIM_PIDS_N" > "$LIM_G2/$s/pids.max"
  if [ "$LIM_MEM" = cgroup1 ]; then echo "$(( LIM_MEM_MB * 1048576 ))" > "${LIM_V1[memory]}/$s/memory.limit_in_bytes"
    echo "$(( LIM_MEM_MB * 1048576 ))" > "${LIM_V1[memory]}/$s/memory.memsw.limit_in_bytes" 2>/dev/null; fi
  [ "$LIM_PIDS" = cgroup1 ] && echo "$LIM_PIDS_N" > "${LIM_V1[pids]}/$s/pids.max"
  lim_kids_us; LIM_KIDS0=$LIM_US
  LIM_T0=$(date +%s.%N)
  lim_gpu_start "$s"
}

lim_enter() {               # $1 step: shell text the step's first process runs to join its groups
  local d out=
  while read -r d; do [ -n "$d" ] && out+="echo \$\$ > $(printf '%q' "$d/cgroup.procs") && "; done < <(lim_dirs "$1")
  [ -n "$out" ] && printf '{ %s:; } 2>/dev/null || { echo "autoresearchd: could not join the trial cgroup" >&2; exit 125; }; ' "$out"
}

lim_gpu_start() {           # sample the step's GPUs' utilisation while it runs (outside its groups)
  LIM_GPU_PID=
  [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && command -v nvidia-smi > /dev/null 2>&1 || return 0
  local f="$T/$1.gpu" dt=${AR_GPU_SAMPLE_S:-1} me=$$
  : > "$f"
  # a grandchild (not reaped by trial.sh, so its CPU is not the step's); it ends with trial.sh
  ( exec 9>&- > /dev/null 2>&1 < /dev/null
    { while kill -0 "$me" 2>/dev/null; do
        nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -i "$CUDA_VISIBLE_DEVICES" \
          | awk -v dt="$dt" '{ s += $1 } END { printf "%.3f\n", s / 100 * dt }' >> "$f"
        sleep "$dt"; done; } &
    echo $! > "$T/$1.gpu.pid" )
  read -r LIM_GPU_PID < "$T/$1.gpu.pid" 2>/dev/null
}

lim_end() {                 # $1 step: its CPU, wall and GPU time, the limits it hit; no process left
  local s=$1 d us= t1 n x
  t1=$(date +%s.%N)
  [ -n "${LIM_GPU_PID:-}" ] && kill "$LIM_GPU_PID" 2>/dev/null
  [ -f "$T/$s.gpu" ] && awk '{ s += $1 } END { printf "%.3f\n", s }' "$T/$s.gpu" > "$T/$s.gpu_s"
  case $LIM_CPU in
    cgroup2) us=$(awk '$1 == "usage_usec" { print $2 }' "$LIM_G2/$s/cpu.stat" 2>/dev/null);;
    cgroup1) n=$(cat "${LIM_V1[cpuacct]}/$s/cpuacct.usage" 2>/dev/null) && us=$(( n / 1000 ));;
  esac
  [ -n "$us" ] || { lim_kids_us; us=$(( LIM_US - LIM_KIDS0 )); }
  echo "$us" > "$T/$s.cpu_us"
  echo "$LIM_T0 $t1" > "$T/$s.time"
  : > "$T/$s.limit"
  case $LIM_MEM in
    cgroup2) n=$(awk '$1 == "oom_kill" { print $2 }' "$LIM_G2/$s/memory.events" 2>/dev/null);;
    cgroup1) n=$(awk '$1 == "oom_kill" { print $2 }' "${LIM_V1[memory]}/$s/memory.oom_control" 2>/dev/null);;
    *) n=;;
  esac
  [ "${n:-0}" -gt 0 ] 2>/dev/null && echo "memory oom_kill $n (limit ${LIM_MEM_MB} MB)" >> "$T/$s.limit"
  case $LIM_PIDS in
    cgroup2) n=$(awk '$1 == "max" { print $2 }' "$LIM_G2/$s/pids.events" 2>/dev/null);;
    cgroup1) n=$(awk '$1 == "max" { print $2 }' "${LIM_V1[pids]}/$s/pids.events" 2>/dev/null);;
    *) n=;;
  esac
  [ "${n:-0}" -gt 0 ] 2>/dev/null && echo "pids max $n (limit ${LIM_PIDS_N})" >> "$T/$s.limit"
  # whatever of the step is still alive (a daemonised child of an unsandboxed run) goes now
  while read -r d; do
    [ -d "$d" ] || continue
    if [ -e "$d/cgroup.kill" ]; then echo 1 > "$d/cgroup.kill" 2>/dev/null
    else for x in 1 2 3; do read -r n < "$d/cgroup.procs" 2>/dev/null || break
      xargs -r kill -KILL < "$d/cgroup.procs" 2>/dev/null; done; fi
    for x in 1 2 3 4 5 6 7 8 9 10; do rmdir "$d" 2>/dev/null && break; sleep 0.2; done
  done < <(lim_dirs "$s")
}

lim_fini() {                # the trial's own groups, once its steps are over (trap EXIT: also when
  local g d                 # the wrapper dies mid-step; then the step's processes are killed first)
  for g in ${LIM_G2:+"$LIM_G2"} "${LIM_V1[@]}"; do
    for d in "$g"/*/; do [ -d "$d" ] || continue
      if [ -e "$d/cgroup.kill" ]; then echo 1 > "$d/cgroup.kill"; else xargs -r kill -KILL < "$d/cgroup.procs"; fi
      sleep 0.2; rmdir "$d"; done 2>/dev/null
    rmdir "$g" 2>/dev/null
  done
  return 0
}
