"""One host's worker in the trial loop (run/workers.py): its session, the trial it runs,
its repeats in a row and why it was retired."""

from __future__ import annotations

import contextlib

import optuna
from optuna.trial import TrialState

from sweeper.results.hosts import record_host
from sweeper.run.interrupted import record_interrupted
from sweeper.run.session import HostSession


class Worker:
    """One host's worker: its session, the trial it runs, and why it was retired."""

    def __init__(self, session: HostSession, label: str, group: str) -> None:
        self.session = session
        self.label = label
        self.group = group
        self.busy: int | None = None  # the trial it is running
        self.claiming = False  # between asking for a trial and running it (or handing it back)
        self.retired = ""
        self.repeats_in_a_row = 0  # accidental repeats answered since its last restart
        self.last_failure = ""

    @property
    def study(self) -> optuna.Study:
        return self.session.study

    def record(self, state: str, trial: int | None = None, why: str = "") -> None:
        with contextlib.suppress(Exception):  # the storage may be what failed
            record_host(self.study, self.label, state, group=self.group, trial=trial, why=why)

    def interrupt(self) -> int | None:
        """Ctrl-C: its trial recorded as interrupted and queued again, its server stopped.
        Returns that trial's number; None when it had none in flight. A worker stays busy
        after its trial's tell, while it prints the result and checks the stop rule: a
        Ctrl-C there finds the trial finished, neither failed nor queued again, and the
        stop line must not say it was."""
        number = self.busy
        s = self.session
        if number is not None:
            # the storage may fail, or the trial be told meanwhile: _in_flight reads it again
            with contextlib.suppress(Exception):
                t = self.study.get_trials(deepcopy=False)[number]
                if t.state == TrialState.RUNNING:
                    # the runs its benchmark completed so far (run/trial.py)
                    record_interrupted(s, s.recorder.slot_of(number), t,
                                       getattr(s.measurer, "partial", {}))
        s.measurer.stop(best_effort=True)
        return number if number is not None and self._in_flight(number) else None

    def _in_flight(self, number: int) -> bool:
        """Whether trial ``number`` was cut short: FAIL (recorded above) or still RUNNING
        (the storage refused: the next start closes it and queues it again, as
        run/reconcile.py does). True when the storage cannot say."""
        try:
            state = self.study.get_trials(deepcopy=False)[number].state
        except Exception:  # noqa: BLE001 - the storage may be what failed
            return True
        return state in (TrialState.RUNNING, TrialState.FAIL)
