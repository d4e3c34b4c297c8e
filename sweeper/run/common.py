"""What the trial loop (run/workers.py) and a host's session (run/session.py) share: the
options of a sweep, its summary, the study's first host, and the guard around the loop
for a failing storage (one line). SIGTERM and SIGHUP as Ctrl-C: run/ctrlc.py."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from sweeper.errors import InputError, StorageFault, SweepAborted
from sweeper.remote import Host, LocalHost
from sweeper.remote.container import wrap_host
from sweeper.results.summary import SweepSummary
from sweeper.run import pending
from sweeper.study import StudySpec, placeholder_message
from sweeper.study.base import public_url

__all__ = ["SweepAborted", "SweepOptions", "SweepSummary", "open_host",
           "storage_fault", "storage_guard"]


@dataclass
class SweepOptions:
    trials: int = 40
    timeout: float | None = None
    storage: str | None = None
    sampler: str | None = None
    seed: int | None = None
    keep_best: bool = False
    # After each measured trial, the leader in one line and the dashboard's note on the
    # study. Only people read them: the bench's emulated sweeps turn them off.
    notes: bool = True


def open_host(spec: StudySpec) -> tuple[Host, str]:
    """The study's first host and the python that ``{python}`` stands for on it."""
    hspec = spec.hosts[0]
    if hspec.is_local:
        return wrap_host(LocalHost(), hspec.container, hspec.slurm), \
            hspec.python or sys.executable
    if hspec.is_placeholder:
        raise InputError(placeholder_message(spec, 0))
    from sweeper.remote.ssh import SSHHost

    return wrap_host(SSHHost(hspec.ssh), hspec.container, hspec.slurm), hspec.python or "python3"


def storage_fault(exc: BaseException, storage_url: str) -> StorageFault | None:
    """``exc`` as the one-line StorageFault the CLI prints; None when it is not the
    storage's (a bug keeps its traceback)."""
    if isinstance(exc, StorageFault):
        return exc
    if not pending.is_storage_error(exc):
        return None
    return StorageFault(
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
