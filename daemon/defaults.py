"""Every default value of the daemon, in one place (rq style). Config models read from here."""

NOTES_REF = "refs/notes/autoresearch"          # result notes
RUNS_REF = "refs/notes/autoresearch-runs"      # leases: what runs where, with heartbeats
LOGS_REF = "refs/notes/autoresearch-logs"      # full logs and implementer transcripts
IDEA_PREFIX = "idea/"
STATE_DIR = ".autoresearch"                    # inside the research repo's git dir
CONFIG_NAME = ".autoresearch.toml"
NOTE_SCHEMA = 1

TICK_S = 2.0                 # reconcile interval
LEASE_TTL_S = 120.0          # host unreachable this long -> trial is lost
HEARTBEAT_S = 30.0
MAX_RETRIES = 2              # lost trials are requeued this many times
# Host faults (a failed submit, a full or unwritable work root, a host gone past the lease TTL) are the
# host's, not the idea's: the trial is requeued for a healthy host without spending a retry. A seed is
# given up only after this many host faults, each on a host that had just passed its probe.
MAX_HOST_FAULTS = 8
# Circuit breaker of a faulty host: it is probed again after 2 s, then 4, 8, ... at most 60 s; it gets
# no new trial until a probe passes (connects, the work root is writable, enough free space).
HOST_PROBE_S = (2.0, 60.0)
# Reconnecting to a host that does not answer: after 1 s, doubling, at most every 3 s, so a host that
# comes back is seen within a few seconds (docs/hosts.md), and a dead one costs one connect per 3 s.
RECONNECT_S = (1.0, 3.0)
MIN_FREE_MB = 512            # a host's work root needs this much free space before a trial is staged
LOG_HEAD_BYTES = 256 * 1024  # kept from the start of a run's output
LOG_TAIL_BYTES = 256 * 1024  # kept from the end
KILL_GRACE_S = 10            # SIGTERM -> SIGKILL at time-out
EVAL_BUDGET_S = 600
PREPARE_BUDGET_S = 3600      # limit for the once-per-host `prepare` step (a data download may be slow)

MAX_REVISIONS = 2            # as in the paper
MAX_DIFF_BYTES = 200_000
MAX_FILE_BYTES = 1_000_000
CHECK_TIMEOUT_S = 120

LLM_TIMEOUT_S = 300.0
LLM_MAX_RETRIES = 4
LLM_BACKOFF_S = 1.0
LLM_CONCURRENCY = 4
LLM_MAX_TOKENS = 8192
# USD per million (input, output) tokens of the default models, so `budget_usd` holds with no
# [llm.prices] table. Published-style list prices at the time of writing: check the vendor's
# price page and override them in [llm.prices."MODEL"] (a config entry wins over these).
LLM_PRICES = {
    "claude-sonnet-5-5": (3.0, 15.0),   # the anthropic provider's default model
    "gpt-5.5": (1.25, 10.0),            # the openai provider's default model
}

IDEAS_PER_EPOCH = 80
IDEAS_PER_BATCH = 10
MAX_PARENTS_SHOWN = 100
QUEUE_BUFFER = 2             # ideas kept ready beyond the free slots
BASELINE_SEEDS = 3
NOISE_MULT = 2.0             # promotions by less than this many baseline stds need confirmation
CONFIRM_SEEDS = 2
DUPLICATE_THRESHOLD = 90.0   # rapidfuzz token_set_ratio

LOCAL_SLOTS = 1
HUMAN_PRIORITY = True
