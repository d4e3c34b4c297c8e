"""What a Ctrl-C keeps of the trial it interrupts: the measured runs it completed.

They are written on the interrupted trial (FAIL, ``interrupted``) and on the retry queued for
it, as ``interrupted_runs`` ({"<concurrency>": [per-request tok/s, ...]}), so the resume
(and a reader of the study) has them; and the sweeper says so in one line. Too few to stand
for a measurement of their own (a benchmark's runs are the unit the statistics compare),
they are not told as the trial's value.

``record_interrupted`` is that bookkeeping, once, for both places a Ctrl-C reaches a
trial: the thread running it (run/step.py) and the pool stopping its workers from the
main thread (run/worker.py, ``Worker.interrupt``).
"""

from __future__ import annotations

from collections.abc import Mapping

from optuna.trial import FrozenTrial, Trial

from sweeper.results import attrs as A
from sweeper.run.reconcile import requeue
from sweeper.run.record import Slot
from sweeper.run.session import HostSession


def kept_runs(levels: Mapping[int, list[float]]) -> dict[str, list[float]]:
    """JSON-ready, levels without a completed run left out."""
    return {str(level): list(runs) for level, runs in sorted(levels.items()) if runs}


def kept_line(number: int, kept: Mapping[str, list[float]]) -> str:
    runs = [v for level in kept.values() for v in level]
    values = ", ".join(f"{v:.1f}" for v in runs)
    return (f"trial {number} interrupted: kept its {len(runs)} completed measured run(s) "
            f"({values} tok/s) in its attribute {A.INTERRUPTED_RUNS} and in its queued retry")


def record_interrupted(s: HostSession, slot: Slot, trial: FrozenTrial | Trial,
                       levels: Mapping[int, list[float]]) -> None:
    """Ctrl-C during ``trial`` (RUNNING): the runs it completed (``levels``) kept on it
    before the FAIL (``interrupted``), its parameters queued again with them (not counted as
    an attempt: the user stopped it, not a fault), and a line saying so when runs were kept.
    The one bookkeeping of an interrupted trial, for the thread that ran it (run/step.py)
    and for the pool stopping its workers (run/worker.py)."""
    kept = kept_runs(levels)
    if kept:  # before the FAIL: on the trial and on its retry, which the resume runs
        s.recorder.set(slot, **{A.INTERRUPTED_RUNS: kept})
    s.recorder.fail(slot, "interrupted", "interrupted by the user (Ctrl-C / SIGTERM)")
    requeue(s.study, trial, count_attempt=False,
            extra={A.INTERRUPTED_RUNS: kept} if kept else None)
    if kept:
        s.line(kept_line(trial.number, kept))
