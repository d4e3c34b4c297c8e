"""Who is working on a study, seen through its storage: a heartbeat per sweeper and per
running trial, so that sweepers on several machines sharing one storage know of each other.

A local file (the study lock, run/lock.py) only protects one machine; Optuna's own
heartbeat covers ``study.optimize()``, not the ask/tell loop this project runs. So a
thread writes, every ``BEAT_SECONDS``:

* the study attribute ``sweeper:live:<machine>:<pid>`` = {machine, pid, at}: a sweeper is
  working on the study (``--fresh`` and deletions refuse while one is, ``refuse_if_live``);
* the trial attribute ``heartbeat`` = now on every RUNNING trial this process owns.

A trial whose beat is older than ``STALE_SECONDS`` (or that has no owner that long after
it started: a sweeper killed between ``ask`` and writing its owner) is *stale*: no sweeper
counts it in flight (run/claims.py), ``status`` says so, and any sweeper sharing the
storage closes it and queues its parameters again (run/reconcile.py). The beat is wall
clock time: machines sharing a storage are assumed within seconds of each other (NTP);
STALE_SECONDS is twelve beats, far more than such a skew.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import threading
import time
from typing import ClassVar

import optuna
from optuna.trial import TrialState

from sweeper.errors import InputError
from sweeper.results import attrs as A
from sweeper.results.liveness import (  # noqa: F401 - re-exported
    STALE_SECONDS,
    is_mine,
    is_stale,
    live_sweepers,
    me,
)
from sweeper.study.base import public_url

BEAT_SECONDS = 5.0


def refuse_if_live(study: optuna.Study, what: str, path: str, storage_url: str) -> None:
    """InputError (one line, exit 2) when another sweeper works on ``study`` now: a
    deletion would pull the trials from under it."""
    live = live_sweepers(study)
    if not live:
        return
    who = ", ".join(f"PID {s.get('pid')} on {s.get('machine')}" for s in live)
    raise InputError(f"{path}: {what}: study {study.study_name!r} in "
                     f"{public_url(storage_url)} is being swept right now by {who}; stop "
                     "it first (or wait for it to finish), then run this again")


class Heartbeat:
    """The beating thread of one sweeper process on one study (shared by its workers:
    ``start``/``stop`` are counted)."""

    running: ClassVar[dict[tuple[int, str], Heartbeat]] = {}  # one per storage and study
    _guard = threading.Lock()

    def __init__(self, storage: optuna.storages.BaseStorage, study_name: str) -> None:
        self.storage = storage
        self.study_id = storage.get_study_id_from_name(study_name)
        self.key = f"{A.LIVE_PREFIX}{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._users = 0

    @classmethod
    def start(cls, storage: optuna.storages.BaseStorage, study_name: str) -> Heartbeat:
        with cls._guard:
            beat = cls.running.setdefault((id(storage), study_name), cls(storage, study_name))
            beat.add_user()
            return beat

    def add_user(self) -> None:
        """One more user of this beat (the caller holds the class's guard); the first
        starts the thread."""
        self._users += 1
        if self._thread is None:
            self.beat()  # at once: a --fresh elsewhere sees this sweeper from now
            self._thread = threading.Thread(target=self._loop, name="sweeper-heartbeat",
                                            daemon=True)
            self._thread.start()

    def stop(self, every_user: bool = False) -> None:
        """The last user gone (or ``every_user``, at exit): stop beating and say this
        sweeper has ended."""
        with self._guard:
            self._users = 0 if every_user else self._users - 1
            if self._users > 0 or self._thread is None:
                return
            self._stop.set()
            self._thread.join(timeout=BEAT_SECONDS * 2)
            self._thread = None
            for key, beat in list(self.running.items()):
                if beat is self:
                    del self.running[key]
        with contextlib.suppress(Exception):  # a failing storage: the beat goes stale
            self.storage.set_study_user_attr(self.study_id, self.key, None)

    def _loop(self) -> None:
        while not self._stop.wait(BEAT_SECONDS):
            with contextlib.suppress(Exception):  # a storage hiccup: the next beat retries
                self.beat()

    def beat(self) -> None:
        now = time.time()
        self.storage.set_study_user_attr(self.study_id, self.key, {**me(), "at": now})
        for t in self.storage.get_all_trials(self.study_id, deepcopy=False,
                                             states=(TrialState.RUNNING,)):
            if is_mine(t.user_attrs.get(A.OWNER)):
                trial_id = self.storage.get_trial_id_from_study_id_trial_number(
                    self.study_id, t.number)
                with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                    self.storage.set_trial_user_attr(trial_id, A.HEARTBEAT, now)


@atexit.register
def _stop_all() -> None:
    """However the process ends (Ctrl-C, an abort), it says it has ended: a ``--fresh``
    elsewhere need not wait for its beat to go stale."""
    for beat in list(Heartbeat.running.values()):
        beat.stop(every_user=True)
