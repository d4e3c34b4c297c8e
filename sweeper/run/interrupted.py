"""What a Ctrl-C keeps, and the one line that says so.

The runs a benchmark completed before the interrupt are written on the interrupted trial
(FAIL, ``interrupted``) and on the retry queued for it, as ``interrupted_runs``
({"<concurrency>": [per-request tok/s, ...]}), so the resume (and a reader of the study) has
them; and the sweeper says so in one line. Too few to stand for a measurement of their own
(a benchmark's runs are the unit the statistics compare), they are not told as the trial's
value.

``stopped_line`` is what ``optimize`` prints on stderr whenever a Ctrl-C (or SIGTERM) lands,
from its first second to its last: what was interrupted, what is kept, and the command that
goes on from there.

``record_interrupted`` is that bookkeeping, once, for both places a Ctrl-C reaches a
trial: the thread running it (run/step.py) and the pool stopping its workers from the
main thread (run/worker.py, ``Worker.interrupt``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from optuna.trial import FrozenTrial, Trial

from sweeper.results import attrs as A
from sweeper.run.reconcile import requeue
from sweeper.run.record import Slot
from sweeper.run.session import HostSession


def counted(n: int, word: str) -> str:
    """``1 run``, ``3 runs``, ``0 runs``: never ``run(s)``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def kept_runs(levels: Mapping[int, list[float]]) -> dict[str, list[float]]:
    """JSON-ready, levels without a completed run left out."""
    return {str(level): list(runs) for level, runs in sorted(levels.items()) if runs}


def kept_line(number: int, kept: Mapping[str, list[float]]) -> str:
    runs = [v for level in kept.values() for v in level]
    values = ", ".join(f"{v:.1f}" for v in runs)
    return (f"trial {number} interrupted: kept its {counted(len(runs), 'completed measured run')} "
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


def _numbers(trials: Sequence[int]) -> str:
    names = [str(n) for n in sorted(trials)]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"trial{'' if len(names) == 1 else 's'} {listed}"


def stopped_line(*, opened: bool, running: Sequence[int] = (), finished: int | None = None,
                 deleted: int | None = None, resume: str, again: str,
                 abandoned: bool = False) -> str:
    """The Ctrl-C line of ``optimize``.

    ``opened``: the study was opened (created or loaded) and locked; before that nothing
    was started, and the command to give is the one typed (``again``, ``--fresh`` kept:
    whether or not it had deleted anything yet, running it again does what was asked).
    ``running``: the trials in flight, recorded FAIL and queued again, their servers
    stopped. ``finished``: the study's finished trials (None: the storage could not say).
    ``deleted``: the trials ``--fresh`` had deleted before the interrupt. ``resume``: the
    command that resumes an opened study (run/reconcile.Budget goes on to its target).
    ``abandoned``: a further Ctrl-C cut the clean-up short (run/ctrlc.py): what it had
    not done yet is not known, and the line says so instead of "stopped".
    """
    if not opened:
        gone = f"; --fresh had deleted its {counted(deleted, 'earlier trial')}" \
            if deleted else ""
        return ("interrupted while starting (reading the study, checking the host), before "
                f"any trial or server started{gone}. {again}")
    kept = "the study's trials are kept" if finished is None else \
        "no trial had finished yet" if finished == 0 else \
        f"the study keeps its {counted(finished, 'finished trial')}"
    if abandoned:
        return (f"interrupted, and its clean-up abandoned: a server of this study may still "
                f"be running; the next optimize of this study stops it (or stop it by hand); "
                f"{kept}. {resume}")
    if running:
        one = len(running) == 1
        return (f"interrupted: {_numbers(running)} {'was' if one else 'were'} recorded as "
                f"failed and queued again, {'its server' if one else 'their servers'} "
                f"stopped; {kept}. {resume}")
    return f"interrupted: no trial was running and no server is left running; {kept}. {resume}"
