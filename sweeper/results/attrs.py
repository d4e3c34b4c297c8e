"""Every key sweeper writes into Optuna's storage, in one place, so the writer (run/record.py)
and the readers (results, status, export, dashboard, tests) agree.

Trial user attributes are what the dashboard shows; study user attributes hold a sweep's
state across processes (budget, verdict, the kept server).
"""

from __future__ import annotations

# --- trial user attributes -------------------------------------------------------------
ROLE = "role"  # one of the roles below
CONFIG_ID = "config_id"  # LaunchConfig.config_id(): replicates share it
EFFECTIVE = "effective"  # the configuration as SGLang runs it (user-facing names)
LAUNCH = "launch"  # launcher, args, env (secrets redacted) and the command line
OWNER = "owner"  # {"machine", "pid"} of the sweeper process running the trial
HEARTBEAT = "heartbeat"  # time.time() of its owner's last beat (run/heartbeat.py)
SERVER = "server"  # ServerHandle.to_attrs(): enough to find and stop the server again
ATTEMPT = "attempt"  # how many times an infrastructure fault re-queued these params
RETRY_OF = "retry_of"  # the trial number this one repeats
# Ctrl-C mid-benchmark: the measured runs the interrupted trial completed, per level
# ({"<concurrency>": [per-request tok/s, ...]}), on it and on its queued retry
INTERRUPTED_RUNS = "interrupted_runs"
CONFIRM = "confirm"  # True on the confirm phase's fresh measurements
REPLAYED_FROM = "replayed_from"  # measured in this trial, stored later (run/pending.py)
REPLAY_ID = "replay_id"  # the kept record's id: a replay never writes it twice

RUNS = "tok_s_runs"  # per-run tok/s of the counted runs
# per counted run, where its prompts start in the prompt set's one order (measure/prompts.py):
# runs at the same position sent the same prompts (compared prompt by prompt)
RUN_POSITIONS = "run_positions"
TOK_S_MEAN = "tok_s_mean"
TOK_S_STDEV = "tok_s_stdev"
TOK_S_MIN = "tok_s_min"
TOK_S_MAX = "tok_s_max"
TOK_S_CI95 = "tok_s_ci95"
RUNS_FLAGGED = "runs_flagged"  # runs left out: errors or short outputs
ACCEPT = "accept_length"  # from the benchmark (server counters / meta_info)
ACCEPT_LOG = "accept_length_log"  # from the server's own decode log lines
DECODE_LINES = "decode_log_lines"
DECODE_EAGER = "decode_eager_lines"  # decode batches that ran without CUDA graphs
STARTUP = "startup_s"
SPEEDUP = "speedup"  # over the baseline's pooled runs, when there is a baseline
# Several concurrency levels (study/objective.py): RUNS holds the objective's per-run
# series (run i of every level combined), LEVELS every level's figures (measure/levels.py
# level_summary, keyed by the level as text), and two flat keys per level, which the
# dashboard can show as columns.
LEVELS = "levels"
OBJECTIVE_VALUES = "objective_values"  # what Optuna was told (two values for pareto)


def per_request_key(level: int) -> str:
    """Mean tok/s per request at one level (``tok_s_per_request@8``)."""
    return f"tok_s_per_request@{level}"


def total_key(level: int) -> str:
    """Mean total tok/s (all streams) at one level (``tok_s_total@8``)."""
    return f"tok_s_total@{level}"


FAILURE = "failure"  # failure class: a ConfigurationFailure kind or an infrastructure kind
FAILURE_MSG = "failure_message"
SKIPPED = "skipped_known_failure"  # predicted to fail: recorded, no restart spent
# An accidental repeat of a configuration already measured: no restart, told the mean of the
# values of these earlier trials (a list of trial numbers); never pooled as a measurement.
REPEAT_OF = "repeat_of"
# A replicate on purpose (the racing of the leaders, search/model/; or whoever enqueues
# one): truthy, the racing's note {"of": [trials of the configuration], "reason": "..."}.
# Such a trial is measured again; a repeat without it is an accident (REPEAT_OF).
# What kind a trial is, is read through results/kind.py, not from these flags.
REPLICATE = "is_deliberate_replicate"
# system attr the model sampler leaves on a trial it planned: {"new": the best expected
# improvement (log tok/s) of a configuration never measured, "replicate": racing's value}
GAINS = "sweeper:gains"
LOG_TAIL = "log_tail"
# Optuna 5 constraints are system attributes the dashboard does not show: mirrored here.
CONSTRAINT_MIRROR = "constraint_failed"

# --- roles -------------------------------------------------------------------------------
BASELINE = "baseline"  # the same server without speculation
START_FROM = "start_from"  # the study's start_from entries
SAMPLER = "sampler"  # proposed by the sampler
CONFIRM_ROLE = "confirm"  # a confirm-phase measurement of a speculative configuration

# --- study user attributes -----------------------------------------------------------
# The dashboard lists these on the study's first page, in the order they were first set:
# short values only (whole documents go to study artifacts, e.g. confirm.json).
WINNER = "sweeper:winner"  # the verdict in one line (results/headline.py)
SPACE = "sweeper:space"  # the search space's signature: a changed space is refused
OBJECTIVE = "sweeper:objective"  # levels + objective (Objective.signature): a change is refused
SIMULATED = "sweeper:simulated"  # the study runs on the simulated server
CONFIRMED = "sweeper:confirmed"  # the confirm phase's verdict
BUILD = "sweeper:build"  # the host's SGLang: version, --help flags, deprecated flags
KEPT_SERVER = "sweeper:kept_server"  # the server --keep-best left running
# The export command that reads this sweep back (the study as given, the storage when not
# the study file's): the dashboard note's "Export it" hint, set by `optimize`
EXPORT = "sweeper:export"
# The budget of a sweep in progress: {"start", "target", "trials", "machine", "pid"}.
# A sweep killed (or Ctrl-C'd) leaves it behind, and the same command resumes towards
# the same target instead of starting N trials afresh.
BUDGET = "sweeper:budget"

# --- several hosts (run/workers.py) --------------------------------------------------------
HOST = "host"  # trial: the host that measured it (HostSpec.label)
GROUP = "group"  # trial: its host's group; results are compared within a group only
BACKED_OFF = "backed_off"  # trial: handed back before any restart (why), never measured
# study: one key per host, {"state", "trial", "why", "group", "machine", "pid", "at"}
HOST_STATE_PREFIX = "sweeper:host:"
# One per sweeper process working on the study: "sweeper:live:<machine>:<pid>" ->
# {"machine", "pid", "at"} beaten every few seconds (run/heartbeat.py), None once it ended.
LIVE_PREFIX = "sweeper:live:"
