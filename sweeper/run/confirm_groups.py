"""Several groups' confirm phases at once, one thread a group, each on its own host.

Each group of hardware confirms its own leaders (results are compared only within one).
One group after another, the other groups' nodes would sit idle through every confirm
phase but one: ~6 restarts each, close to an hour of a node at 8-minute restarts. So
they run at once, as the sweep's workers do (run/workers.py), with the same Ctrl-C
path: the phases are told to stop, every server is stopped, each visit in flight is
recorded as interrupted, and a resume confirms the groups that did not finish
(run/confirm.after_sweep skips a group whose leaders its last confirm phase measured).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

from sweeper.errors import one_line
from sweeper.run.confirm import ConfirmOutcome, ConfirmStopped, run_confirm
from sweeper.run.confirm_runs import VisitRuns
from sweeper.run.ctrlc import cleaning_up, handled, raise_pending
from sweeper.run.progress import Reporter
from sweeper.run.session import HostSession

STOP_GRACE = 60.0  # seconds to wait for the phases to record their visits and end
RESTOP_EVERY = 1.0  # a server started just as the stop came is stopped on the next pass


@dataclass
class GroupConfirm:
    """One group's confirm phase: where and how it runs, and how it ended."""

    group: str
    label: str  # its host, as the sweep's lines name it
    session: HostSession
    top: int
    runs: int
    rounds: int
    visit: VisitRuns
    outcome: ConfirmOutcome | None = None
    error: BaseException | None = None

    def error_text(self) -> str:
        """Its error in one line, naming the group ("" without one)."""
        if self.error is None:
            return ""
        return (f"group {self.group}'s confirm phase: "
                f"{one_line(str(self.error)) or type(self.error).__name__}")


class _Summed:
    """A group's reporter whose progress is the sum over every group's, so one bar tells
    the whole phase (its lines go to the group's own reporter: they name the host)."""

    def __init__(self, own: Reporter, tally: _Tally, index: int) -> None:
        self.own, self.tally, self.index = own, tally, index

    def phase(self, text: str) -> None:
        self.own.phase(text)

    def line(self, text: str) -> None:
        self.own.line(text)

    def progress(self, done: int, total: int, note: str = "") -> None:
        self.tally.set(self.index, done, total, note)


class _Tally:
    def __init__(self, inner: Reporter, n: int) -> None:
        self.inner = inner
        self.done, self.total = [0] * n, [0] * n
        self._lock = threading.Lock()

    def set(self, index: int, done: int, total: int, note: str) -> None:
        with self._lock:
            self.done[index], self.total[index] = done, total
            self.inner.progress(sum(self.done), sum(self.total), note)


def confirm_groups(jobs: list[GroupConfirm], reporter: Reporter) -> None:
    """Run every job's confirm phase at once; each job's ``outcome`` or ``error`` is set.
    A Ctrl-C (or SIGTERM) stops them all, their servers too, and is raised again."""
    tally = _Tally(reporter, len(jobs))
    stop = threading.Event()
    own = [j.session.report for j in jobs]
    for i, j in enumerate(jobs):
        j.session.report = _Summed(own[i], tally, i)

    # each job says it ended through its own event: a Thread.join that a Ctrl-C cut short
    # can leave its thread reading as not alive while it runs on (CPython gh-90882)
    ended = [threading.Event() for _ in jobs]

    def work(j: GroupConfirm, done: threading.Event) -> None:
        try:
            j.outcome = run_confirm(j.session, j.top, j.runs, j.rounds, j.visit, stop)
        except ConfirmStopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - said by the caller, per group
            j.error = exc
        finally:
            done.set()

    def running() -> list[threading.Event]:
        return [e for e in ended if not e.is_set()]

    threads = [threading.Thread(target=work, args=(j, e), daemon=True,
                                name=f"sweeper-confirm-{j.group}")
               for j, e in zip(jobs, ended, strict=True)]
    try:
        for t in threads:
            t.start()
        while left := running():
            raise_pending()  # a Ctrl-C a finalizer dropped (run/ctrlc.py)
            left[0].wait(0.2)
    except KeyboardInterrupt:
        handled()
        with cleaning_up():  # not cut short by another Ctrl-C or SIGTERM
            stop.set()
            deadline = time.monotonic() + STOP_GRACE
            while (left := running()) and time.monotonic() < deadline:
                for j in jobs:
                    with contextlib.suppress(Exception):
                        j.session.stop_server()
                left[0].wait(RESTOP_EVERY)
            for j in jobs:  # whatever a phase started last
                with contextlib.suppress(Exception):
                    j.session.stop_server()
        raise
    finally:
        for i, j in enumerate(jobs):
            j.session.report = own[i]
