"""Handing a worker its next trial: the one ``study.ask()`` in sweeper, then the rules of
who may start it (run/claims.py: the budget's room, a group's baseline first, never a
configuration in flight elsewhere in the group). A trial that may not start is handed back
before any restart (FAIL, invisible to the sampler; queued again when it came from the
queue). The pool (run/workers.py) holds one ``Asker`` for all its workers.
"""

from __future__ import annotations

import threading

from optuna.trial import Trial, TrialState

from sweeper.results import attrs as A
from sweeper.results.hosts import RUNNING
from sweeper.results.kind import TrialKind, kind_of
from sweeper.run.claims import admitted, duplicate_of, needs_baseline, room
from sweeper.run.common import SweepOptions
from sweeper.run.killpoint import killpoint
from sweeper.run.reconcile import counts_as_finished, requeue
from sweeper.run.worker import Worker
from sweeper.study import StudySpec

DUPLICATE_TRIES = 3  # proposals in a row already in flight elsewhere before waiting


class NoRoom(Exception):
    """The budget has no trial left for this worker to start."""


class Busy(Exception):
    """Every proposal is already being measured elsewhere: wait, then ask again."""


class Asker:
    """Asks the study for the pool's workers; ``lock`` is the pool's (ask + suggest +
    record, one worker at a time)."""

    def __init__(self, spec: StudySpec, options: SweepOptions, lock: threading.Lock,
                 stop: threading.Event) -> None:
        self.spec = spec
        self.options = options
        self.lock = lock
        self.stop = stop  # the pool's: set (under ``lock``) by a Ctrl-C
        self.with_baseline: set[str] = set()  # groups whose baseline is settled

    def claim(self, w: Worker, target: int) -> Trial:
        """A trial for ``w`` to run: room in the budget (``target`` trials in all), its
        group's baseline first, and never a configuration in flight elsewhere in the group
        (run/claims.py). Raises NoRoom or Busy."""
        s = w.session
        for _ in range(DUPLICATE_TRIES):
            # Only asking, suggesting and recording the configuration hold the lock (the
            # sampler must see each proposal before the next); the budget and duplicate
            # rules read the storage and hold across processes without it.
            if room(w.study.get_trials(deepcopy=False), target) <= 0:
                raise NoRoom
            with self.lock:
                if self.stop.is_set():  # a Ctrl-C came: ask for nothing more
                    raise NoRoom
                trial, created = self._ask(w)
                killpoint("asked")  # test-only: a kill before the trial names its owner
                queued = A.ROLE in trial.user_attrs and not created
                role = str(trial.user_attrs.get(A.ROLE, A.SAMPLER))
                config = s.space.baseline_config() if role == A.BASELINE else \
                    s.space.launch_config(s.space.suggest(trial))
                s.recorder.set(s.recorder.slot(trial), **{
                    A.HOST: w.label, A.GROUP: w.group, A.CONFIG_ID: config.config_id()})
            killpoint("claimed")  # test-only
            trials = w.study.get_trials(deepcopy=False)
            if not admitted(trials, trial.number, target):
                self._hand_back(w, trial, queued, "another sweeper took the last trial")
                raise NoRoom
            other = duplicate_of(trials, trial.number, config.config_id(), w.group)
            if other is None:
                # a Ctrl-C (the pool's _interrupted) sees it busy, or it is handed back:
                # never a trial claimed unseen that starts a server after the clean-up
                with self.lock:
                    stopping = self.stop.is_set()
                    if not stopping:
                        w.busy = trial.number
                if stopping:
                    self._hand_back(w, trial, queued, "the sweep was stopping")
                    raise NoRoom
                # the live output numbers trials across all hosts: "(7/24)"
                done = sum(counts_as_finished(t) for t in trials)
                s.summary.resumed_from = done - (target - self.options.trials) \
                    - s.summary.finished
                w.record(RUNNING, trial=trial.number)
                return trial
            self._hand_back(w, trial, queued, f"trial {other} is measuring the same "
                                              "configuration")
        raise Busy

    def _ask(self, w: Worker) -> tuple[Trial, bool]:
        """The study's next trial, or a baseline created for ``w``'s group when it has
        none (True: created, not asked). Called under the lock. The one place in sweeper
        that asks the study for a trial."""
        if self.spec.baseline and w.group not in self.with_baseline:
            trials = w.study.get_trials(deepcopy=False)
            if needs_baseline(trials, w.group):
                slot = w.session.recorder.new_running({}, {}, {A.ROLE: A.BASELINE},
                                                      ends_here=True)
                return Trial(w.study, slot.trial_id), True
            if any(kind_of(t) == TrialKind.BASELINE and t.user_attrs.get(A.GROUP)
                   == w.group and t.state not in (TrialState.FAIL, TrialState.PRUNED)
                   for t in trials):
                self.with_baseline.add(w.group)  # measured or in flight there: settled
        return w.study.ask(), False

    def _hand_back(self, w: Worker, trial: Trial, queued: bool, why: str) -> None:
        """Give up a trial before any restart: FAIL (invisible to the sampler), and its
        parameters queued again when they came from the queue."""
        w.session.recorder.set(w.session.recorder.slot(trial), **{A.BACKED_OFF: why})
        if queued:
            requeue(w.study, trial, count_attempt=False)
        w.study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
