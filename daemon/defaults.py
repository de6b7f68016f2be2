"""Every default value of the daemon, in one place (rq style). Config models read from here.
Ref names are not defaults (nothing configures them): they live in store/refs.py."""

import hashlib
import os

STATE_DIR = ".autoresearch"                    # inside the research repo's git dir
CONFIG_NAME = ".autoresearch.toml"
NOTE_SCHEMA = 1
"""Version of the result-note format a note's `schema` line names (store/notes.py: one reader each)."""
TRAILER_VERSION = 1
"""Version of the idea-commit trailers a `Trailer-Version` line names (store/trailers.py); absent: 1."""
LEASE_VERSION = 1
"""Version of the run-lease format each lease's `version` names (store/notes.py); absent: 1."""
# A lock file left by a git process that was killed (kill -9 of the daemon's process group, OOM, power
# loss) would block that ref forever. Git holds a ref lock for milliseconds, so one this old is stale.
STALE_LOCK_S = 10.0
GIT_LOCK_TRIES = 40
"""Tries of a git write another git's lock refused, or another writer's move of its ref (store/gitproc.py
lock_retry): each waits GIT_LOCK_WAIT_STEP_S longer than the one before, about 16 s in all."""
GIT_LOCK_WAIT_STEP_S = 0.02
"""How much longer each wait of lock_retry is than the one before (the first waits this long)."""
GIT_LOCK_SAY_S = 0.5
"""A git write that has waited this long for another process's lock says so in the log, once."""
# The receive-side git config `init`/`start` write into the research repo, each only where the repo
# (or the user's global config) sets nothing for it (docs/security.md, "A push is data"): every pushed
# object is checked by fsck (a tree entry named `..` or `.git`, a malformed commit or a `.gitmodules`
# with an option-like URL is refused), and one push brings at most 256 MiB (idea branches are small
# changes on the baseline; a bigger push is refused before it fills the disk).
RECEIVE_CONFIG = {"receive.fsckObjects": "true", "receive.maxInputSize": str(256 * 1024 * 1024)}
"""key -> value written into the research repo's config unless already set."""

# receive.maxInputSize caps a push as it travels, compressed; a zlib or delta "bomb" inflates far past
# it (a 200 KiB pack holds a 200 MiB commit message, and a delta can copy 16 MiB per 8 bytes), and the
# daemon reads every idea's commit message and, for the gate, its changed blobs. So the pre-receive hook
# also caps what a push adds once inflated: each commit or tag object (a message, not data), each blob
# or tree, and all of the push's new objects together. The owner may change them with the git config
# keys autoresearchd.pushMaxCommitBytes, autoresearchd.pushMaxObjectBytes, autoresearchd.pushMaxTotalBytes.
PUSH_MAX_COMMIT_BYTES = 1024 * 1024
"""Largest commit or tag object (headers and message) a push may add, in bytes."""
PUSH_MAX_OBJECT_BYTES = 64 * 1024 * 1024
"""Largest blob or tree a push may add, inflated, in bytes (the gate refuses files over
implementer.max_file_bytes later; this bounds what git and the gate must read to say so)."""
PUSH_MAX_TOTAL_BYTES = 1024 * 1024 * 1024
"""Largest total size of the new objects of one push, inflated, in bytes."""
PUSH_MAX_PATHS = 100_000
"""Most paths (files and directories) the tree of a pushed commit may list: a tree that names one
subtree many times lists exponentially many paths from a few KiB of objects (git config
autoresearchd.pushMaxPaths)."""
PUSH_MAX_TOTAL_PATHS = 1_000_000
"""Most paths the trees of one push's commits may list together (each commit once): many tips may share
one tree just under PUSH_MAX_PATHS, and the gate diffs each (git config autoresearchd.pushMaxTotalPaths)."""

# Closing a repo handle waits this long for its persistent `git cat-file` processes to exit after
# their stdin closes (they exit at once), then kills them: a closed handle leaves no process behind.
GIT_CLOSE_WAIT_S = 5.0

GATE_DIFF_BATCH = 8
"""Most arriving ideas whose diffs the gate reads in one `git diff-tree --stdin` and holds at once: many
pushed tips may share one tree of PUSH_MAX_PATHS paths (a push of a few KiB); unbatched, 20 of them held
1.96 million changes (1.6 GiB), growing with every ref pushed; batched, bounded whatever the number."""
GIT_SMALL_READ = 64
"""Up to this many objects, GitRepo.cat_file_batch and object_sizes read them through the persistent
`cat-file` processes (about 0.1 ms an object, no process) rather than start a `git cat-file --batch`
(2-5 ms): the gate's few changed blobs of each arriving idea, a trial's archive."""
GIT_TREE_CACHE = 4096
"""Parsed tree objects a repo handle keeps (by id; emptied when full): a trial's archive lists its
commit from them instead of a `git ls-tree`, and re-reads only the trees its idea changed; as many
commit -> tree answers (GitRepo.tree_of), and "<commit>:<path>" is looked up in them."""
REF_VALUES_KEPT = 4096
"""Ref values this process's writes told, kept per repository (store/refevents.py; emptied when full,
after which a ref is read from git again): the tick reads a harvest's notes and archive refs from them
instead of a `for-each-ref`."""

TICK_S = 2.0                 # reconcile interval
LEASE_TTL_S = 120.0          # host unreachable this long -> trial is lost
HEARTBEAT_S = 30.0
MAX_RETRIES = 2              # lost trials are requeued this many times
# Host faults (a failed submit, a full or unwritable work root, a host gone past the lease TTL) are the
# host's, not the idea's: the trial is requeued for a healthy host without spending a retry. A seed is
# given up only after this many host faults, each on a host that had just passed its probe.
MAX_HOST_FAULTS = 8
BASELINE_MOVE_SCAN = 20      # at start: first-parent ancestors of the baseline searched for an old baseline's live seeds
DIFF_BASE_SCAN = 50
"""First-parent ancestors of a pushed idea searched for the nearest measured commit its change is shown
against (store/diffbase.py); past them, its merge-base with the baseline. A push is rarely deeper."""
# Circuit breaker of a faulty host: it is probed again after 2 s, then 4, 8, ... at most 60 s; it gets
# no new trial until a probe passes (connects, the work root is writable, enough free space).
HOST_PROBE_S = (2.0, 60.0)
ENGINE_POOL_THREADS = 8
"""Threads the engine (daemon/engine/parts.py) submits trials, removes finished trial directories and
probes degraded hosts on: a submit waits on its host (ssh round trips, sbatch), so hosts are served at once."""
# Reconnecting to a host that does not answer: after 1 s, doubling, at most every 3 s, so a host that
# comes back is seen within a few seconds (docs/hosts.md), and a dead one costs one connect per 3 s.
RECONNECT_S = (1.0, 3.0)
# A trial whose wrapper has not written its pid file yet (crash between lease and submit) counts as
# starting for this long after submit, then as lost.
STARTING_GRACE_S = 60.0
LOCAL_EVENT_SETTLE_S = 0.1
"""The local runner's completion events (runners/localhost.py): after the first trial of a burst ends,
wait this long before waking the daemon, so trials that end together wake it once (the shell that
waited before took about as long to start again between two waits)."""
SSH_MAX_CHANNELS = 8         # concurrent channels per connection; OpenSSH's MaxSessions defaults to 10
# the ssh runner's slots() re-checks a host's reachability at most this often (the shell itself backs
# off reconnects to a dead host, so this stays cheap)
SSH_REACHABLE_TTL_S = 5.0
SSH_LOST_WAIT_S = 1.0
"""A command whose channel closed without an exit status: how long to wait for paramiko's transport
thread to say whether the connection died (then the host is unreachable and the command may have
run) or lives (the command was killed by a signal: exit -1). Only that rare case waits."""
TAMPER_SHOWN = 5             # tamper lines quoted in a suspicious note's reason; its `tamper` field keeps all
MIN_FREE_MB = 512            # a host's work root needs this much free space before a trial is staged
LOG_HEAD_BYTES = 256 * 1024  # kept from the start of a run's output
LOG_TAIL_BYTES = 256 * 1024  # kept from the end
KILL_GRACE_S = 10            # SIGTERM -> SIGKILL at time-out
FROZEN_HASH_CPU_S = 10
"""RLIMIT_CPU of each sha256sum of the frozen files after `run`: it reads what run left, outside every
budget (a sparse 1 TiB file is a TiB of zeros); honest frozen files hash in well under a second."""
PREPARE_BUDGET_S = 3600      # limit for the once-per-host `prepare` step (a data download may be slow)

MAX_REVISIONS = 2            # as in the paper
MAX_DIFF_BYTES = 200_000
MAX_FILE_BYTES = 1_000_000
CHECK_TIMEOUT_S = 120

# Coding-agent implementers (implementer.kind = claude-code | codex; daemon/implement/agent_*.py). A session is
# one CLI run in a scratch worktree; these are its own limits, on top of the LLM budget.
IMPLEMENTER_KIND = "diff"    # diff (one LLM call writes a unified diff) | claude-code | codex
AGENT_WALL_S = 1200.0        # a session still running after this is stopped (process group killed)
AGENT_MAX_TURNS = 40         # model requests per session
AGENT_MAX_USD = 2.0          # a session whose spend passes this is stopped
AGENT_KILL_GRACE_S = 3.0     # SIGTERM -> SIGKILL when a session is stopped
AGENT_TOOLS = "Bash,Read,Edit,Write,Glob,Grep"   # Claude Code's allowed tools (no web, no sub-agents)

LLM_TIMEOUT_S = 300.0
LLM_MAX_RETRIES = 4
LLM_BACKOFF_S = 1.0
LLM_MAX_RETRY_AFTER_S = 120.0   # a provider's Retry-After is honoured up to this long
# the model each provider uses when [llm] model is not set
LLM_MODELS = {"anthropic": "claude-sonnet-5-5", "openai": "gpt-5.5"}
LLM_CONCURRENCY = 4
LLM_MAX_TOKENS = 8192
# USD per million (input, output) tokens of the default models, so `budget_usd` holds with no
# [llm.prices] table. Published-style list prices at the time of writing: check the vendor's
# price page and override them in [llm.prices."MODEL"] (a config entry wins over these).
LLM_PRICES = {
    LLM_MODELS["anthropic"]: (3.0, 15.0),
    LLM_MODELS["openai"]: (1.25, 10.0),
}

IDEAS_PER_EPOCH = 80
# The exploit share of epoch 1; it grows by 0.1 every 2 epochs up to 0.8 (the paper started at 0.5).
# Chosen on the search simulator (docs/policies.md): the one change that put our default's mean above
# the paper's rule there (a world whose effects are mostly additive, which rewards exploitation).
EXPLOIT_START = 0.7
IDEAS_PER_BATCH = 10
MAX_PARENTS_SHOWN = 100
QUEUE_BUFFER = 2             # ideas kept ready beyond the free slots
BASELINE_SEEDS = 3
NOISE_MULT = 2.0             # promotions by less than this many baseline stds need confirmation
CONFIRM_SEEDS = 2
# noise_pool: the seed noise behind every margin is pooled over the baseline's seeds and the confirmation
# seeds of every idea confirmed so far (engine/judge.noise_estimate), not the baseline's seeds alone.
# A confirmation's margin is pooled either way (issue 29); this switch adds a single run's margin.
# Off: on the search simulator it did not find more (docs/policies.md).
NOISE_POOL = False
# A would-be new best is confirmed (confirm_seeds fresh runs) only when its single run beats the best
# (the baseline, before any) by more than CONFIRM_MIN standard errors of a single run against it; a
# smaller lead is a likely lucky draw (half of all no-op ideas beat the baseline once) and is left
# `improved` or `within_noise`, its seeds saved for new ideas (chosen on the search simulator,
# docs/policies.md). 0 = confirm any lead (the earlier rule).
CONFIRM_MIN = 1.0
DUPLICATE_THRESHOLD = 90.0   # rapidfuzz token_set_ratio
MAX_FOLLOWUPS = 2            # extra LLM calls per proposal batch (a malformed or short answer)
MAX_PARENT_IDS = 3           # parents an exploit idea records, at most
GREEDY_RECENT_FAILURES = 10  # recent failures the greedy policy shows
PROMPT_MAX_IDEA_CHARS = 1500   # one idea shown in a prompt is cut here (the paper showed whole ideas)
PROMPT_MAX_ERROR_CHARS = 300   # a failed idea's error, as a prompt shows it
PROMPT_MAX_AVOID_TITLES = 300  # the newest titles a prompt lists as already tried

# Search mechanisms (issue 21), measured in bench/search_sim.py; see docs/policies.md for the table.
ISLANDS = 1                  # exploit sub-populations; 1 = one population (the paper's search)
MIGRATION_EPOCHS = 2         # with islands: confirmed winners visit every island each this many epochs
INSPIRATION = "sample"       # exploit shows a uniform sample of the winners; "top_diverse": best + diverse rest
# exploit_demoted: a demoted idea (pending, then not confirmed as the new best) stays an exploit parent,
# shown with its mean over all its seeds, when that mean beats the baseline (demoted says "not the new
# best", not "no gain"). Off: on the search simulator it did not find more (docs/policies.md).
EXPLOIT_DEMOTED = False
NOVELTY_THRESHOLD = None     # token_set_ratio of the novelty gate; None = off (only real duplicates dropped)
NOVELTY_MIN_JACCARD = 0.55   # content-word overlap a pair needs before the gate compares it
NOVELTY_JUDGE = False        # ask the LLM whether a gated pair is really the same experiment
# The lessons scratchpad: every LESSONS_EVERY new results, one LLM call (purpose `lessons`) condenses the
# earlier lessons and those results into a short "what worked, what failed and why" block, kept under
# LESSONS_REF (store/refs.py) and shown in every ideation prompt. 0 = off.
LESSONS_EVERY = 0
LESSONS_MAX_CHARS = 2400     # the kept block is cut here (about 600 tokens), so it never crowds a prompt
LESSONS_MAX_TOKENS = 1024    # answer limit of the lessons call
# Size cap of an ideation prompt, in tokens (estimated as characters / CHARS_PER_TOKEN): the shown ideas,
# the titles to avoid and the greedy lineage are cut (whole entries, the most relevant kept) to fit.
# None = no cap beyond max_parents and the per-idea cut (the paper's prompts).
PROMPT_TOKEN_BUDGET = None
CHARS_PER_TOKEN = 4
# The model ensemble ([llm] ensemble): UCB1 on improvement per dollar picks the model of each proposal
# batch. Each model first proposes ENSEMBLE_MIN_TRIES ideas (measured or not) before the bandit compares
# them; ENSEMBLE_UCB_C weighs the exploration bonus (in units of the best mean gain).
ENSEMBLE_MIN_TRIES = 10
ENSEMBLE_UCB_C = 1.0
# ... and an idea's cost is its proposal's LLM spend plus its trials' GPU time (note gpu_s) at this price
# per GPU-hour, so "improvement per dollar" counts the runs, which usually cost far more than the
# proposal (a rough rental price of one data-centre GPU-hour; set your own). Trials without GPUs add 0.
ENSEMBLE_GPU_USD_PER_HOUR = 2.0

LOCAL_SLOTS = 1
HUMAN_PRIORITY = True

# the read-only views
IDEAS_RICH_ROWS = 300        # `ideas` prints plain columns beyond this many rows (rich lays out big tables slowly)
IDEAS_WIDE_TABLE = 130       # below this many terminal columns `ideas` shows the narrow set
REPORT_TOP_K = 20            # ideas in the report's leaderboard
# results measured against an old baseline are kept apart (docs/policies.md, "A moved baseline"):
# `status`, the report and the dashboard list this many of them, best first, after the current ones
STALE_SHOWN = 3
DOCTOR_LOG_TAIL_CHARS = 3000   # output shown for a failing doctor step
SHOW_LOG_TAIL_BYTES = 4000   # end of each trial's log `show` prints (`show --log`: the whole stored log)
WANDB_MAX_DIFF = 200_000     # characters of an idea's diff mirrored to W&B

# `autoresearchd serve`, the live dashboard
SERVE_HOST = "127.0.0.1"     # loopback only; any other bind needs a token
SERVE_PORT = 8765
SERVE_POLL_S = 0.5           # how often one shared watcher compares the notes refs (one for-each-ref of a few
                             # refs; a moved notes ref is read as a tree diff): live updates within 2 s
SERVE_FULL_SCAN_EVERY = 10   # every Nth poll also lists every idea ref (new branches with no note yet)
SERVE_SSE_PING_S = 15.0      # keep-alive comment on idle event streams (proxies drop silent connections)
SERVE_LOG_TAIL_BYTES = 8000  # log tail shown per trial on the idea page
SERVE_DIFF_BYTES = 300_000   # larger diffs are cut (the full one is a `git` command away)
SERVE_PAGE_ROWS = 100        # leaderboard rows per page
SERVE_TOTALS_REBUILD_MIN = 500  # the overview's running totals (views/totals.py) are rebuilt from scratch
                                # when more ideas than this, and than a quarter of them, changed at once

# Sandbox (runners/sandbox.py): what an untrusted command sees of the host, read-only. An allow-list:
# $HOME, /root, /var, /srv, the research repo and the other trials stay out. Add more per runner with
# `sandbox_binds` (e.g. /opt or a cluster's /apps).
# PATH under which bwrap is started (its own environment is cleared: it is PID 1 in the sandbox)
SANDBOX_LAUNCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX = "bwrap"            # runner.sandbox: bwrap | apptainer | none (none must be chosen explicitly)
SANDBOX_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SANDBOX_ETC_FILES = ("/etc/passwd", "/etc/group", "/etc/hosts", "/etc/host.conf", "/etc/resolv.conf",
                     "/etc/nsswitch.conf", "/etc/gai.conf", "/etc/ld.so.cache", "/etc/ld.so.conf",
                     "/etc/ld.so.conf.d", "/etc/localtime", "/etc/ssl", "/etc/ca-certificates",
                     "/etc/alternatives", "/etc/os-release", "/etc/mime.types")
# passed through (when present) to a sandbox that asked for gpus > 0
SANDBOX_GPU_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
                       "/dev/nvidia-caps", "/dev/dri", *(f"/dev/nvidia{i}" for i in range(16)))
SANDBOX_IMAGE = ""           # apptainer's image (runner.sandbox_image); bwrap needs none
# Directories never bound whole for an interpreter's sys.path (runners/interp.py), wherever a .pth or
# a prefix points: binding them would expose the host (or hide the sandbox's own /tmp, /proc, /dev).
# $HOME and every directory above it are refused as well.
SANDBOX_NEVER_BIND = ("/", "/tmp", "/var", "/etc", "/home", "/root", "/proc", "/dev", "/sys", "/run",
                      "/mnt", "/media", "/srv", "/boot")
# host variables passed into run and evaluate when set (the rest of the environment stays out; a name
# that looks like a secret never passes)
SANDBOX_PASS_ENV = ("LD_LIBRARY_PATH", "CUDA_HOME", "OMP_NUM_THREADS", "TZ")


def local_trial_root(repo_path: str) -> str:
    """Default trial root of the local runner, one folder per research repo, outside it (its .git and work
    tree), in the user's cache directory: $XDG_CACHE_HOME when absolute (the XDG spec), else ~/.cache."""
    path, xdg = os.path.abspath(repo_path), os.environ.get("XDG_CACHE_HOME", "")
    name, tag = os.path.basename(path.rstrip("/")) or "repo", hashlib.sha256(path.encode()).hexdigest()[:10]
    return os.path.join(xdg if os.path.isabs(xdg) else os.path.expanduser("~/.cache"), LOCAL_TRIAL_ROOT, f"{name}-{tag}")


LOCAL_TRIAL_ROOT = "autoresearchd/trials"


# -- tuning knobs (daemon/tune/, docs/policies.md "Tuning knobs: the hybrid search") -------------------
TUNE_ENABLED = False
"""Off by default: with `[tune] enabled = true` (and Optuna installed) the daemon also tunes knobs."""
TUNE_SAMPLER = "tpe"
"""Optuna's sampler for a study: `tpe` (TPESampler, constant liar) or `cmaes` (CmaEsSampler)."""
TUNE_TRIALS_PER_STUDY = 20
"""Tuned trials one study (one tuned idea, or the baseline) gets at most."""
TUNE_PARALLEL = 2
"""Tuned trials of one study queued or running at once (more would be sampled with less information)."""
TUNE_STUDIES = 1
"""How many of the best confirmed ideas are tuned at once (the baseline when there is none)."""
TUNE_STARTUP_TRIALS = 5
"""Random trials before TPE models the surface (Optuna's default, 10, is half a small study)."""
TUNE_FLOOR = 0.2
"""The least share of new trials each arm (LLM ideas, tuning) gets, whatever its record (split.py)."""

# Compute and resources (runners/limits.sh, runners/limits.py, engine/judge.py; docs/security.md
# "Compute and resources are part of the rule").
COMPUTE_CAP = 1.25
"""An idea's trial may use at most this many times the baseline's median compute per trial (CPU
seconds of run and evaluation from the kernel; GPU seconds where env.gpus > 0), else its note is
`over_budget` and it is never promoted. Room for the measurement's noise (CPU time under load varies
by some percent), not for training longer. Manifest key `compute_cap`; 0 turns the check off."""
COMPUTE_SLACK_S = 1.0
"""Seconds added to compute_cap x the baseline's median before an idea is over budget: the absolute
part of the measurement's noise (interpreter start-up, scheduling under load), which a ratio alone
turns into false over_budget notes for trials of a few CPU seconds. Negligible for real training runs
(tinygpt's baseline trial is about 100 CPU seconds)."""
TRIAL_MEM_SHARE = 0.8
"""Share of a host's memory (or of the cgroup the runner's shell runs in, if smaller) split evenly
among its slots: a trial's default memory limit (manifest `mem_mb` overrides it). The rest is the
daemon's and the system's."""
TRIAL_PIDS_PER_CPU = 256
"""A trial's default process (and thread) limit is this many per host CPU, split among the host's
slots (manifest `max_pids` overrides it): room for data-loader workers and their threads, none for a
fork bomb."""
TRIAL_MIN_PIDS = 512
"""... and never fewer than this many processes (a small host's trial still starts its threads)."""
TRIAL_OPEN_FILES = 4096
"""A trial's default open-file limit per process (manifest `max_open_files`), at most the host's
hard limit."""
GPU_SAMPLE_S = 1.0
"""How often a GPU trial's GPUs are sampled (nvidia-smi utilization.gpu) for its GPU seconds."""

# The split evaluation (issue 26, docs/security.md "A model is code"): what one model-runner group may
# write, in MB (the manifest's `model_output_mb`). The kernel enforces it per file (RLIMIT_FSIZE, set
# inside the model runner's sandbox) and trial.sh checks the group's total after. 256 MB holds a
# group of tinygpt's float32 logits (512 x 128 x 256 x 4 bytes = 67 MB) with room to spare.
MODEL_OUTPUT_MB = 256
# -- the population read (store/population.py, store/livepop.py) ----------------------------------
POPULATION_PARSE_CACHE = 400_000
"""Parsed commits and notes kept per process, each by object id (an object's parse never changes).
Above the population's size, or every read parses everything again: at 50,000 a 100k-idea population
evicted each parse before its next use, and the daemon's warm re-read cost as much as a cold one."""
POPULATION_BULK_WINS = 1000
"""A population read that places more ideas than this (a full read) appends them and sorts its order
once; fewer are inserted in place. One insort per idea moves half the list each time: at 100k ideas,
2.5·10⁹ pointer moves, seconds of the daemon's first pass (store/livepop.py)."""
POPULATION_FULL_READ_TICKS = 150
"""The daemon's tick reads the population by its changes (store/livepop.py); every this many ticks it
reads it whole instead, a safety net under the incremental read (5 minutes at the 2 s tick)."""
PARSE_CACHE_CHECKS = 32
"""Entries of the on-disk parse cache (store/parsecache.py) parsed again from git when it is loaded;
one that differs and the whole file is ignored."""
PARSE_CACHE_SAVE_NEW = 5_000
"""The daemon writes its parse caches to disk at a full read once they hold this many entries more
than it last wrote (or loaded): a small population is cheap to parse, a big one is saved as it grows."""

# -- learning curves and early stopping (runners/progress.py, engine/stopping.py; docs/environment.md
# "Progress: learning curves", docs/policies.md "Early stopping") ----------------------------------------
PROGRESS_FILE = ".autoresearch_progress.jsonl"
"""The progress file's name inside a trial's code/ (run's only writable directory, under every
sandbox and runner); trial.sh gives its path to run as AUTORESEARCH_PROGRESS."""
PROGRESS_MAX_BYTES = 64 * 1024
"""Bytes of a progress file read at most, per poll and at the end (its first and last halves when it
is bigger): a run can write a file of any size, and the poll's round trip must stay small."""
PROGRESS_MAX_POINTS = 200
"""Points kept of one curve (evenly thinned beyond): what a note's curve blob and a view hold."""
STOPPING_ENABLED = False
"""Off by default: `[stopping] enabled = true` lets a losing curve stop an idea early. Off until
measured safe on the user's environment (docs/policies.md "Early stopping": false stops are counted
by bench/stopping_replay.py)."""
STOPPING_RULE = "band"
"""`band`: stop when the idea's curve is worse than the baseline seeds' band by the margin; `median`,
`asha`, `hyperband`: also require Optuna's MedianPruner, SuccessiveHalvingPruner or HyperbandPruner,
over the peers' curves, to prune it (the band's margin is always required)."""
STOPPING_MARGIN = 3.0
"""k: the idea must be worse than the baseline seeds' mean at the same t by k x their spread (the
standard deviation across seeds at that t, at least STOPPING_MIN_SPREAD x |mean|)."""
STOPPING_MIN_SPREAD = 0.01
"""The least spread assumed, as a share of the baseline's value: with 2 seeds that happen to agree,
a zero spread would make every small difference look beyond noise."""
STOPPING_MIN_T = 0.25
"""No idea is stopped before this share of its training (early curves cross: warm-up, schedules)."""
STOPPING_MIN_REF_SEEDS = 2
"""Baseline seeds whose curves must reach an idea's t before it can be stopped (fewer when the
baseline plans fewer): one seed says nothing of the noise."""
STOPPING_MIN_PEERS = 3
"""Optuna's pruners (rule median/asha/hyperband) decide only with at least this many peer curves."""
STOPPING_GRID = 20
"""Curves are compared on a grid of this many steps of t (t = k / STOPPING_GRID): Optuna's pruners
compare values at the same integer step."""
STOPPING_MAX_PEERS = 200
"""The most recent peer curves (finished trials of the current baseline) the pruners read."""
IDEA_KNOBS_MAX = 16
"""The most knobs one idea commit may declare in its `.autoresearch-knobs.toml` (daemon/tune/knobs.py):
a declaration is data from a commit anyone may have pushed, and each knob widens the tuner's space."""
IDEA_KNOBS_FILE_BYTES = 16 * 1024
"""The largest `.autoresearch-knobs.toml` read (bytes): a larger one is refused, not parsed."""
SCREENING_ENABLED = False
"""Off by default: `[screening] enabled = true` runs each new idea first at the fidelity knob's
baseline x fraction ([env.screening]) and continues only the best `keep` share at full length
(engine/screening.py). Needs an environment that declares [env.screening]."""
SCREENING_KEEP = 0.5
"""The share of the ideas screened against the same baseline that continue at full length: an idea
continues when its screened value is within this quantile of theirs (its own included)."""
SCREENING_MARGIN = 3.0
"""k: an idea is screened out as well when its screened value is worse than the baseline's screened
seeds' mean by more than k x their spread (their standard deviation, at least SCREENING_MIN_SPREAD x
|mean|); and never screened out when it is not, whatever its rank (noise-aware, like [stopping])."""
SCREENING_MIN_SPREAD = 0.01
"""The least spread assumed for the baseline's screened seeds, as a share of their mean."""
SCREENING_MIN_PEERS = 2
"""The quantile rule needs this many screened ideas (its own included) against the same baseline;
with fewer, the baseline's margin decides alone."""
