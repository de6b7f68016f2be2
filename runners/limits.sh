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
# Cost: every trial runs this, however short, so the usual path starts as few processes as it can: files
# are read with `read`, results come back in variables (LIM_R, LIM_D, LIM_NOW), not by $(...), which
# forks (docs/benchmarks.md "Sandbox overhead per trial": a fork and exec cost ~1-4 ms each).

LIM_G2=; LIM_CPU=; LIM_MEM=; LIM_PIDS=; LIM_INNER=; LIM_R=; LIM_NOW=; LIM_V=; LIM_ENTER=
declare -A LIM_V1=()        # v1 controller -> this trial's group dir
LIM_D=()                    # lim_dirs' answer
LIM_MK=()                   # the groups lim_init makes (lim_mkgroup's list)
LIM_SWEEP=()                # the parents where lim_init looks for stale groups (lim_mkgroup's list)
LIM_SPARE=()                # groups made and not used (a v1 memory or pids group where v2 has the controller)
declare -A LIM_FRESH=()     # steps whose groups lim_mkgroup made and no step has used yet
LIM_STEPS="run eval"        # the steps whose groups lim_mkgroup makes with the trial's own (one mkdir)
# The trial's group name: its directory's name and this wrapper's PID. Two wrappers of one trial id can
# run at once under one parent group (two daemons on a host whose searches share a baseline commit, two
# work roots): named by the trial id alone they shared one group, and one's lim_end killed the other's
# run. Two live wrappers never share a PID; a retried trial's old group is the sweep's (an hour, empty).
LIM_NAME="autoresearchd-${T##*/}-$$"

lim_now() {                 # LIM_NOW: the time as `date +%s.%N` gives it (bash 5 has it without a process)
  if [ -n "${EPOCHREALTIME:-}" ]; then LIM_NOW=${EPOCHREALTIME/,/.}; else LIM_NOW=$(date +%s.%N); fi
}

lim_key() {                 # $1 file of "key value" lines, $2 key: LIM_V, its value (empty: none)
  local k v
  LIM_V=
  while read -r k v; do [ "$k" = "$2" ] && { LIM_V=${v%% *}; return 0; }; done 2>/dev/null < "$1"
  return 1
}

lim_proc() {                # LIM_MOUNTS, LIM_CGROUP: /proc/self/mounts and /proc/self/cgroup, read once.
  # mapfile reads each in one pass; a `while read` loop reads a line, seeks back to its end, and every
  # seek on /proc/self/mounts makes the kernel walk the mount table again (a third of the wrapper's
  # own CPU, with the six walks lim_init made)
  [ -n "${LIM_MOUNTS+x}" ] && return 0
  mapfile -t LIM_MOUNTS < /proc/self/mounts 2>/dev/null || LIM_MOUNTS=()
  mapfile -t LIM_CGROUP < /proc/self/cgroup 2>/dev/null || LIM_CGROUP=()
}

lim_mnt() {                 # $1 a line of /proc/self/mounts: its mnt, typ, opts (the caller's locals)
  local r=${1#* }
  mnt=${r%% *}; r=${r#* }; typ=${r%% *}; r=${r#* }; opts=${r%% *}
}

lim_v2_root() {             # LIM_R: this process's cgroup v2 directory, when there is a v2 hierarchy
  local mnt typ opts l own=
  LIM_R=; lim_proc
  for l in ${LIM_MOUNTS[@]+"${LIM_MOUNTS[@]}"}; do
    case $l in *" cgroup2 "*) lim_mnt "$l"; [ "$typ" = cgroup2 ] && break;; esac; mnt=; done
  for l in ${LIM_CGROUP[@]+"${LIM_CGROUP[@]}"}; do case $l in 0::*) own=${l#0::}; break;; esac; done
  [ -n "$mnt" ] && [ -n "$own" ] && LIM_R=$mnt${own%/}
}

lim_v1_root() {             # $1 a v1 controller: LIM_R, this process's group dir in its hierarchy
  local mnt typ opts _r cs p own= found= l
  LIM_R=; lim_proc
  for l in ${LIM_MOUNTS[@]+"${LIM_MOUNTS[@]}"}; do
    case $l in *" cgroup "*) ;; *) continue;; esac
    lim_mnt "$l"
    [ "$typ" = cgroup ] && case ",$opts," in *",$1,"*) found=$mnt; break;; esac
  done
  # /proc/self/cgroup: "id:controller,controller:path" (the path may hold a colon: it is the rest)
  for l in ${LIM_CGROUP[@]+"${LIM_CGROUP[@]}"}; do
    _r=${l#*:}; cs=${_r%%:*}; p=${_r#*:}; case ",$cs," in *",$1,"*) own=$p; break;; esac; done
  [ -n "$found" ] && [ -n "$own" ] && LIM_R=$found${own%/}
}

lim_cpus() {                # LIM_N: the CPUs this process may run on (what nproc counts), without a process
  local l r= a b st=()
  LIM_N=0
  # mapfile: one pass (a `while read` loop seeks back per line, and /proc makes the file again each time)
  mapfile -t st 2>/dev/null < /proc/self/status
  for l in ${st[@]+"${st[@]}"}; do case $l in Cpus_allowed_list:*) r=${l#Cpus_allowed_list:}; r=${r//[$' \t']/}; break;; esac; done
  [ -n "$r" ] || { LIM_N=$(nproc 2>/dev/null || echo 1); return; }      # no /proc (not Linux): nproc
  for r in ${r//,/ }; do      # "0-3,8,10-11"
    a=${r%-*}; b=${r#*-}; LIM_N=$(( LIM_N + 10#$b - 10#$a + 1 ))
  done
  [ "$LIM_N" -gt 0 ] || LIM_N=1
}

lim_stale() {               # $1 parent dir: added to LIM_SWEEP where a trial's group is there
  # groups a killed wrapper left (SIGKILL skips its EXIT trap): lim_init's sweep looks here only where
  # some trial's group is there at all (the glob costs no process)
  local old
  for old in "$1"/autoresearchd-*; do [ -d "$old" ] && { LIM_SWEEP+=("$1"); break; }; done
}

lim_mkgroup() {             # $1 parent dir: LIM_R=<parent>/autoresearchd-<trial>, and adds it and a
  # group in it per step of LIM_STEPS to LIM_MK, which lim_init makes with one mkdir for all hierarchies
  local g="$1/$LIM_NAME"
  LIM_R=
  [ -w "$1/cgroup.procs" ] || return 1
  lim_stale "$1"
  [ -d "$g" ] && { rmdir "$g"/*/ 2>/dev/null; rmdir "$g" 2>/dev/null; }     # a killed wrapper's, its PID reused
  [ -d "$g" ] && return 1     # still there: not ours to use
  local s
  LIM_MK+=("$g"); for s in $LIM_STEPS; do LIM_MK+=("$g/$s"); done
  LIM_R=$g
}

lim_init() {                # once per trial: the limits' values, and which mechanism enforces each
  local slots=$(( ${AR_HOST_SLOTS:-1} > 0 ? ${AR_HOST_SLOTS:-1} : 1 )) kb lim own cpus hard r c share i f
  local mem=${AR_MEM_MB:-0} pids=${AR_MAX_PIDS:-0} files=${AR_MAX_FILES:-0}
  if [ "$mem" -le 0 ] 2>/dev/null; then     # a share of the host's memory (or of the cgroup we run in)
    lim_key /proc/meminfo MemTotal:; kb=${LIM_V:-0}
    lim_v2_root; own=$LIM_R; lim=
    [ -n "$own" ] && [ -r "$own/memory.max" ] && read -r lim < "$own/memory.max"
    [ -z "$lim" ] && lim_v1_root memory && own=$LIM_R && [ -r "$own/memory.limit_in_bytes" ] && read -r lim < "$own/memory.limit_in_bytes"
    case $lim in ''|max|*[!0-9]*) ;; *) [ $(( lim / 1024 )) -lt "$kb" ] && kb=$(( lim / 1024 ));; esac
    share=${AR_MEM_SHARE:-0.8}
    case $share in
      *[!0-9.]*|*.*.*|.|'') mem=$(awk -v kb="$kb" -v s="$share" -v n="$slots" 'BEGIN { printf "%d", kb * s / n / 1024 }');;
      *) # a plain decimal: in integer millionths, so bash works it out (kb * share / slots / 1024)
         i=${share%%.*}; f=; [ "$i" = "$share" ] || f=${share#*.}; f=${f}000000; f=${f:0:6}
         mem=$(( kb * (10#${i:-0} * 1000000 + 10#$f) / (1000000 * slots * 1024) ));;
    esac
    [ "$mem" -gt 0 ] || mem=1024
  fi
  if [ "$pids" -le 0 ] 2>/dev/null; then
    lim_cpus; cpus=$LIM_N
    pids=$(( ${AR_PIDS_PER_CPU:-256} * cpus / slots )); [ "$pids" -ge "${AR_MIN_PIDS:-512}" ] || pids=${AR_MIN_PIDS:-512}
  fi
  [ "$files" -gt 0 ] 2>/dev/null || files=4096
  ulimit -H -n > "$T/.ulimit"; read -r hard < "$T/.ulimit"     # (no $(...): a fork)
  [ "$hard" = unlimited ] || [ "$files" -le "$hard" ] || files=$hard
  LIM_MEM_MB=$mem LIM_PIDS_N=$pids LIM_FILES_N=$files
  trap lim_fini EXIT
  # the groups of our own, in each hierarchy where this user may make one (v2 under this process's
  # cgroup; v1 per controller: a hybrid host binds its controllers there, so v2 cannot have them), all
  # made by one mkdir; which of them is used is decided once they are there
  local g2= ; declare -A v1=()
  LIM_MK=()
  lim_v2_root && [ -n "$LIM_R" ] && lim_mkgroup "$LIM_R" && g2=$LIM_R
  for c in cpuacct memory pids; do
    lim_v1_root "$c" && [ -n "$LIM_R" ] || continue
    # where our v2 group is made, v2 counts the CPU: a v1 cpuacct group would go unused (the kernel's
    # work to make and remove three groups a trial); its stale groups (earlier wrappers made them)
    # are still swept. (Should the v2 mkdir fail, the CPU is the reaped children's rusage.)
    [ "$c" = cpuacct ] && [ -n "$g2" ] && { [ ! -w "$LIM_R/cgroup.procs" ] || lim_stale "$LIM_R"; continue; }
    # two controllers in one hierarchy share its group (listed once)
    for r in ${v1[@]+"${v1[@]}"}; do [ "$r" = "$LIM_R/$LIM_NAME" ] && { v1[$c]=$r; continue 2; }; done
    lim_mkgroup "$LIM_R" && v1[$c]=$LIM_R
  done
  # the sweep of stale groups: an hour old and empty (rmdir refuses a group with a process; a live
  # trial's step finds its group gone and lim_begin makes it again), one find for every hierarchy
  if [ ${#LIM_SWEEP[@]} -gt 0 ]; then
    while read -r r; do rmdir "$r"/*/ "$r"; done 2>/dev/null < <(find "${LIM_SWEEP[@]}" -maxdepth 1 -name 'autoresearchd-*' -mmin +60 2>/dev/null)
  fi
  [ ${#LIM_MK[@]} -eq 0 ] || mkdir "${LIM_MK[@]}" 2>/dev/null
  # cgroup v2: the controllers our group may use
  if [ -n "$g2" ] && [ -d "$g2" ]; then
    LIM_G2=$g2
    for c in memory pids; do echo "+$c" > "$LIM_G2/cgroup.subtree_control"; done 2>/dev/null
    LIM_CPU=cgroup2
    c=; read -r c 2>/dev/null < "$LIM_G2/cgroup.subtree_control"; c=" $c "
    [ "${c#* memory }" != "$c" ] && LIM_MEM=cgroup2
    [ "${c#* pids }" != "$c" ] && LIM_PIDS=cgroup2
  fi
  # cgroup v1, for what v2 does not give (a hybrid host: the controllers are bound to v1)
  for c in cpuacct memory pids; do
    [ -n "${v1[$c]:-}" ] && [ -d "${v1[$c]}" ] || continue
    case $c in cpuacct) [ -n "$LIM_CPU" ];; memory) [ -n "$LIM_MEM" ];; pids) [ -n "$LIM_PIDS" ];; esac &&
      { LIM_SPARE+=("${v1[$c]}"); continue; }     # made, not used: lim_fini removes it with the rest
    LIM_V1[$c]=${v1[$c]}
    case $c in cpuacct) LIM_CPU=cgroup1;; memory) LIM_MEM=cgroup1;; pids) LIM_PIDS=cgroup1;; esac
  done
  local s; for s in $LIM_STEPS; do LIM_FRESH[$s]=1; done
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

lim_dirs() {                # $1 step: LIM_D, its group dirs (v2 first)
  local c
  LIM_D=()
  [ -n "$LIM_G2" ] && LIM_D+=("$LIM_G2/$1")
  for c in "${!LIM_V1[@]}"; do LIM_D+=("${LIM_V1[$c]}/$1"); done
  return 0
}

lim_begin() {               # $1 step name: make its groups, set their limits, start the clocks
  local s=$1
  [ -n "${LIM_MEM_MB:-}" ] || lim_init
  lim_dirs "$s"
  local d miss=
  for d in ${LIM_D[@]+"${LIM_D[@]}"}; do [ -d "$d" ] || miss=1; done
  if [ -n "${LIM_FRESH[$s]:-}" ]; then unset 'LIM_FRESH[$s]'     # made by lim_init's mkdir, unused
    [ -z "$miss" ] || mkdir -p "${LIM_D[@]}" 2>/dev/null
  elif [ ${#LIM_D[@]} -gt 0 ]; then
    # a step that ran before (the model runner, once per group) gets fresh groups, so its counters
    # start at zero: lim_end left its old ones, emptied (a killed process takes a moment to leave)
    lim_rmdirs "${LIM_D[@]}"
    mkdir -p "${LIM_D[@]}" 2>/dev/null
  fi
  if [ "$LIM_MEM" = cgroup2 ]; then echo "$(( LIM_MEM_MB * 1048576 ))" > "$LIM_G2/$s/memory.max"
    echo 0 > "$LIM_G2/$s/memory.swap.max" 2>/dev/null; fi
  [ "$LIM_PIDS" = cgroup2 ] && echo "$LIM_PIDS_N" > "$LIM_G2/$s/pids.max"
  if [ "$LIM_MEM" = cgroup1 ]; then echo "$(( LIM_MEM_MB * 1048576 ))" > "${LIM_V1[memory]}/$s/memory.limit_in_bytes"
    echo "$(( LIM_MEM_MB * 1048576 ))" > "${LIM_V1[memory]}/$s/memory.memsw.limit_in_bytes" 2>/dev/null; fi
  [ "$LIM_PIDS" = cgroup1 ] && echo "$LIM_PIDS_N" > "${LIM_V1[pids]}/$s/pids.max"
  lim_kids_us; LIM_KIDS0=$LIM_US
  lim_now; LIM_T0=$LIM_NOW
  lim_gpu_start "$s"
}

lim_enter() {               # $1 step: LIM_ENTER, shell text the step's first process runs to join its groups
  local d q out=
  LIM_ENTER=
  lim_dirs "$1"
  # $BASHPID: the text runs in trial.sh's subshell that becomes the step ($$ there is trial.sh's own)
  for d in ${LIM_D[@]+"${LIM_D[@]}"}; do printf -v q '%q' "$d/cgroup.procs"; out+="echo \$BASHPID > $q && "; done
  [ -z "$out" ] || printf -v LIM_ENTER '{ %s:; } 2>/dev/null || { echo "autoresearchd: could not join the trial cgroup" >&2; exit 125; }; ' "$out"
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
  lim_now; t1=$LIM_NOW
  [ -n "${LIM_GPU_PID:-}" ] && kill "$LIM_GPU_PID" 2>/dev/null
  [ -f "$T/$s.gpu" ] && awk '{ s += $1 } END { printf "%.3f\n", s }' "$T/$s.gpu" > "$T/$s.gpu_s"
  case $LIM_CPU in
    cgroup2) lim_key "$LIM_G2/$s/cpu.stat" usage_usec && us=$LIM_V;;
    cgroup1) n=; read -r n 2>/dev/null < "${LIM_V1[cpuacct]}/$s/cpuacct.usage" && [ -n "$n" ] && us=$(( n / 1000 ));;
  esac
  [ -n "$us" ] || { lim_kids_us; us=$(( LIM_US - LIM_KIDS0 )); }
  echo "$us" > "$T/$s.cpu_us"
  echo "$LIM_T0 $t1" > "$T/$s.time"
  : > "$T/$s.limit"
  case $LIM_MEM in
    cgroup2) lim_key "$LIM_G2/$s/memory.events" oom_kill; n=$LIM_V;;
    cgroup1) lim_key "${LIM_V1[memory]}/$s/memory.oom_control" oom_kill; n=$LIM_V;;
    *) n=;;
  esac
  [ "${n:-0}" -gt 0 ] 2>/dev/null && echo "memory oom_kill $n (limit ${LIM_MEM_MB} MB)" >> "$T/$s.limit"
  case $LIM_PIDS in
    cgroup2) lim_key "$LIM_G2/$s/pids.events" max; n=$LIM_V;;
    cgroup1) lim_key "${LIM_V1[pids]}/$s/pids.events" max; n=$LIM_V;;
    *) n=;;
  esac
  [ "${n:-0}" -gt 0 ] 2>/dev/null && echo "pids max $n (limit ${LIM_PIDS_N})" >> "$T/$s.limit"
  # whatever of the step is still alive (a daemonised child of an unsandboxed run) goes now
  lim_dirs "$s"
  for d in ${LIM_D[@]+"${LIM_D[@]}"}; do
    [ -d "$d" ] || continue
    if [ -e "$d/cgroup.kill" ]; then echo 1 > "$d/cgroup.kill" 2>/dev/null
    else for x in 1 2 3; do read -r n 2>/dev/null < "$d/cgroup.procs" || break
      xargs -r kill -KILL < "$d/cgroup.procs" 2>/dev/null; done; fi
  done
  # and is gone before the next step starts (a killed process takes a moment to leave; read by a
  # builtin, so an empty group costs no process); the emptied groups stay until lim_fini removes all
  # of the trial's groups with one rmdir (or lim_begin, when this step runs again)
  for d in ${LIM_D[@]+"${LIM_D[@]}"}; do
    for x in 1 2 3 4 5 6 7 8 9 10; do
      n=; read -r n 2>/dev/null < "$d/cgroup.procs"; [ -z "$n" ] && break; sleep 0.2
    done
  done
}

lim_rmdirs() {              # $@ group dirs, emptied: removed, one rmdir for all; a killed process takes a moment to leave
  local left=("$@") still d x
  for x in 1 2 3 4 5 6 7 8 9 10; do
    still=(); for d in "${left[@]}"; do [ -d "$d" ] && still+=("$d"); done; left=(${still[@]+"${still[@]}"})
    [ ${#left[@]} -eq 0 ] && break
    rmdir "${left[@]}" 2>/dev/null && break
    sleep 0.2
  done
}

lim_fini() {                # the trial's own groups, once its steps are over (trap EXIT: also when
  local g d gs=() subs=()    # the wrapper dies mid-step; then the step's processes are killed first)
  for g in ${LIM_G2:+"$LIM_G2"} "${LIM_V1[@]}" ${LIM_SPARE[@]+"${LIM_SPARE[@]}"}; do
    [ -d "$g" ] || continue
    for d in "$g"/*/; do [ -d "$d" ] && subs+=("${d%/}"); done
    gs+=("$g")
  done
  [ ${#gs[@]} -eq 0 ] && return 0
  # the usual end: every step's group empty (lim_end emptied it), so one rmdir removes them all
  rmdir ${subs[@]+"${subs[@]}"} "${gs[@]}" 2>/dev/null && return 0
  for d in ${subs[@]+"${subs[@]}"}; do [ -d "$d" ] || continue     # a step still running: its processes go first
    if [ -e "$d/cgroup.kill" ]; then echo 1 > "$d/cgroup.kill"; else xargs -r kill -KILL < "$d/cgroup.procs"; fi
  done 2>/dev/null
  lim_rmdirs ${subs[@]+"${subs[@]}"} "${gs[@]}"
  return 0
}
