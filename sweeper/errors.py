"""Error types the caller can catch.

Two families matter to the sweep loop, because they need opposite treatment
(docs/ARCHITECTURE.md, "What the optimizer is told"):

* ``ConfigurationFailure``: the configuration's fault (OOM, bad flags, crash, NCCL
  error, hang, start-up deadline). The trial is PRUNED with a constraint so the
  sampler learns to avoid that region.
* ``InfrastructureError``: the infrastructure's fault (SSH dropped, host unreachable,
  port held by a stranger, benchmark transport error). The trial FAILs and the same
  parameters are retried.

``InputError`` is bad user input: one line naming file/key/host, exit code 2, and
nothing is written or started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ERROR_CHARS = 1000


def one_line(text: str, limit: int = ERROR_CHARS) -> str:
    """An error message as one printable line of at most ``limit`` characters, whatever it
    quotes (a host's multi-line output, a study value with escape sequences)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    flat = " / ".join(lines)
    flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in flat[:limit + 1])
    return flat if len(flat) <= limit else flat[:limit] + "…"


class SweeperError(Exception):
    """Base of every error sweeper raises on purpose."""


class InputError(SweeperError):
    """Bad user input (study file, flag, storage URL, host). Exit code 2."""


class StudyError(InputError):
    """A study file is invalid. The message names the file and the key."""


class PreflightError(InputError):
    """The host or its SGLang cannot run this study (missing flag, no launcher...)."""


class SweepLocked(InputError):
    """Another sweeper works on this study and host; the message names its PID."""


class HostKeyUnknown(InputError):
    """The SSH host key is not in known_hosts; the message says how to trust it."""


# --- the configuration's fault -------------------------------------------------

# server_error: healthy, but every request answered 5xx, through every retry of the study
CONFIG_FAILURE_KINDS = ("oom", "invalid_args", "nccl", "crash", "hang", "startup_timeout",
                        "server_error")


class ConfigurationFailure(SweeperError):
    """The server could not run this configuration. ``kind`` is one of CONFIG_FAILURE_KINDS."""

    def __init__(self, kind: str, message: str, log_tail: str = "") -> None:
        if kind not in CONFIG_FAILURE_KINDS:
            raise ValueError(f"unknown configuration failure kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.log_tail = log_tail


# --- the infrastructure's fault ------------------------------------------------

class InfrastructureError(SweeperError):
    """Not the configuration's fault: retry the same parameters."""

    kind = "infrastructure"


class HostUnreachable(InfrastructureError):
    kind = "host_unreachable"


class ConnectionLost(InfrastructureError):
    kind = "ssh_lost"


class PortBusy(InfrastructureError):
    kind = "port_busy"


class BenchmarkTransportError(InfrastructureError):
    kind = "bench_transport"


class ServerErrorResponse(BenchmarkTransportError):
    """The server is up but answers 5xx: retried like a transport fault; when the study's
    retries are used up, the configuration is recorded as failing (``server_error``)."""

    kind = "server_error"

    def __init__(self, message: str, body: str = "") -> None:
        super().__init__(message)
        self.body = body  # the last response body, kept with the trial's log


class HostStorageError(InfrastructureError):
    """The study's run folder on the host cannot take a server's log (unwritable, or the
    node's disk full): the host's fault, never the configuration's."""

    kind = "host_storage"


class CommandTimeout(InfrastructureError):
    """A host command did not finish within its timeout (it was killed on the host)."""

    kind = "command_timeout"


# --- the sweep as a whole --------------------------------------------------------


class SweepAborted(SweeperError):
    """The sweep stopped before its budget: too many failures in a row, or retries
    of an infrastructure fault used up. The message says what to fix; ``reason`` says
    which rule stopped it (``failures`` in a row, known-failure ``skips``, ``retries``,
    ``hosts`` all retired, ``baseline`` rejected), for a caller that resumes."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class StorageFault(SweeperError):
    """The study's storage failed while the sweep wrote to it. Exit code 1: the server has
    been stopped and any measurement kept locally (``kept``), for the next run."""

    def __init__(self, message: str, kept: Path | None = None) -> None:
        super().__init__(message)
        self.kept = kept


class BenchmarkError(SweeperError):
    """No measured run was usable (every run had errors or short outputs).

    ``result`` (a measure.runs.BenchResult: errors.py imports nothing of sweeper) holds the
    flagged runs so the caller can store them with the trial.
    """

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class BenchmarkInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM/SIGHUP, which take its path) during a benchmark, carrying the
    measured runs it completed: ``levels`` maps a concurrency level to the per-request tok/s
    of its counted runs, so the trial's record keeps them. A KeyboardInterrupt: every
    clean-up written for Ctrl-C runs unchanged."""

    def __init__(self, levels: dict[int, list[float]]) -> None:
        super().__init__()
        self.levels = levels

    @property
    def runs(self) -> int:
        return sum(len(v) for v in self.levels.values())


class ConfirmFailed(SweeperError):
    """Every configuration of a confirm phase failed a fresh start: no verdict to give
    (the host is the likelier culprit). The sweep's measurements are kept."""
