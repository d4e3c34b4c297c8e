"""What the one-host sweep (run/sweep.py) and the host pool (run/workers.py) share: the
options of a sweep, its summary, the error that stops it, the study's first host, and the
two guards around the loop (SIGTERM as Ctrl-C; a failing storage as one line)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import sweeper.results.verdict as R
from sweeper.errors import InputError, SweeperError
from sweeper.remote import Host, LocalHost
from sweeper.remote.server import ServerHandle
from sweeper.run import pending
from sweeper.study import StudySpec, placeholder_message
from sweeper.study.base import public_url


class SweepAborted(SweeperError):
    """The sweep stopped before its budget: too many failures in a row, or retries
    of an infrastructure fault used up. The message says what to fix."""


@dataclass
class SweepOptions:
    trials: int = 40
    timeout: float | None = None
    storage: str | None = None
    sampler: str | None = None
    seed: int | None = None
    keep_best: bool = False


@dataclass
class SweepSummary:
    study: str
    storage: str
    finished: int = 0
    complete: int = 0
    pruned: Counter[str] = field(default_factory=Counter)
    skipped: int = 0
    repeats: int = 0  # accidental repeats resolved without a restart
    reused: int = 0  # measured on the server already running (a replicate): no restart
    failed: int = 0
    retried: int = 0
    reconciled: int = 0
    stopped_because: str = "budget"
    best: R.ConfigResult | None = None
    baseline: R.ConfigResult | None = None
    kept_server: ServerHandle | None = None
    simulated: bool = False
    resumed_from: int = 0


def open_host(spec: StudySpec) -> tuple[Host, str]:
    """The study's first host and the python that ``{python}`` stands for on it."""
    hspec = spec.hosts[0]
    if hspec.is_local:
        return LocalHost(), hspec.python or sys.executable
    if hspec.is_placeholder:
        raise InputError(placeholder_message(spec, 0))
    from sweeper.remote.ssh import SSHHost

    return SSHHost(hspec.ssh), hspec.python or "python3"


def storage_fault(exc: BaseException, storage_url: str) -> pending.StorageFault | None:
    """``exc`` as the one-line StorageFault the CLI prints; None when it is not the
    storage's (a bug keeps its traceback)."""
    if isinstance(exc, pending.StorageFault):
        return exc
    if not pending.is_storage_error(exc):
        return None
    return pending.StorageFault(
        f"storage {public_url(storage_url)} failed ({pending.cause_of(exc)}); the server was "
        "stopped and no measurement was lost: fix the storage, then run the same command to "
        "resume")


@contextlib.contextmanager
def storage_guard(summary: SweepSummary, storage_url: str) -> Iterator[None]:
    """Around a sweep's loop: a failing storage ends it as one StorageFault (the CLI's one
    line, exit 1) and ``summary`` says so; anything else passes unchanged."""
    try:
        yield
    except Exception as exc:
        fault = storage_fault(exc, storage_url)
        if fault is None:
            raise
        summary.stopped_because = "storage"
        raise fault from exc


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM takes the Ctrl-C path: the trial is recorded, the server stopped."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (tests may drive a sweep from a thread)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
