"""What an earlier sweeper left behind, and how much of a sweep is left to do.

A sweep killed by anything loses nothing: trials left RUNNING by a dead sweeper are found
on the next start, their servers stopped, and their parameters enqueued again; the same
command resumes towards the same target (``Budget``). A dead sweeper on this machine is
known by its PID; one on another machine (or one killed before it wrote its owner) by a
stale heartbeat (run/heartbeat.py), and any sweeper sharing the storage closes its trial.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from sweeper.errors import InfrastructureError
from sweeper.remote import Host
from sweeper.remote.local import pid_alive  # noqa: F401 - re-exported
from sweeper.remote.server import ServerHandle
from sweeper.results import attrs as A
from sweeper.results.kind import ran_on_server
from sweeper.run.heartbeat import STALE_SECONDS, is_stale, live_sweepers
from sweeper.run.record import Recorder

# A trial RUNNING without an owner for longer than this was left by a sweeper killed
# between ``ask`` and writing its owner (run/heartbeat.py: stale). Younger, it is being
# started by another sweeper sharing the storage: leave it alone.
UNOWNED_GRACE = timedelta(seconds=STALE_SECONDS)


def owned_pgids(study: optuna.Study) -> set[int]:
    """Process groups of servers this study's sweeps started and may have left behind."""
    pgids = {int(t.user_attrs[A.SERVER]["pgid"])
             for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
             if t.user_attrs.get(A.SERVER)}
    kept = study.user_attrs.get(A.KEPT_SERVER)
    if kept:
        pgids.add(int(kept["pgid"]))
    return pgids


def counts_as_finished(t: FrozenTrial) -> bool:
    """A trial that cost a restart and ended (measured, or failed on the server). The
    proposals skipped as known failures or resolved as repeats cost nothing; confirm runs
    are not the sweep's."""
    return ran_on_server(t)


def finished_count(study: optuna.Study) -> int:
    return sum(counts_as_finished(t) for t in study.get_trials(deepcopy=False))


def requeue(study: optuna.Study, t: FrozenTrial | Trial, count_attempt: bool,
            extra: dict[str, Any] | None = None) -> int:
    """Enqueue ``t``'s parameters again (``extra``: more user attrs for the retry); returns
    the attempt number the retry will carry."""
    attempt = int(t.user_attrs.get(A.ATTEMPT, 0)) + (1 if count_attempt else 0)
    attrs = {A.ROLE: t.user_attrs.get(A.ROLE, A.SAMPLER), A.ATTEMPT: attempt,
             A.RETRY_OF: t.number, **(extra or {})}
    # a queued trial killed right after ``ask`` has no params yet: Optuna keeps the queued
    # ones in ``fixed_params`` until they are suggested (else the retry would be a new one)
    fixed = t.system_attrs.get("fixed_params") if isinstance(t, FrozenTrial) else None
    params = dict(t.params) or dict(fixed or {})
    study.enqueue_trial(params, user_attrs=attrs)
    return attempt


def reconcile(study: optuna.Study, recorder: Recorder, host: Host | Sequence[Host],
              stop: Callable[[ServerHandle], None], line: Callable[[str], None]) -> int:
    """Trials left RUNNING by a sweeper that no longer runs: stop their servers, mark them
    FAIL (interrupted) and enqueue their parameters again. Returns how many. With several
    hosts, ``stop`` finds the right one by the handle's host name."""
    me = socket.gethostname()
    hosts = {h.name: h for h in ([host] if isinstance(host, Host) else host)}
    kept = study.user_attrs.get(A.KEPT_SERVER)
    if kept and kept.get("host") in hosts:
        host = hosts[kept["host"]]
        handle = ServerHandle.from_attrs(kept)
        if host.group_alive(handle.pgid):
            line(f"stopping the server left running by --keep-best (pgid {handle.pgid})")
            stop(handle)
        study.set_user_attr(A.KEPT_SERVER, None)
    n = 0
    now = time.time()
    # nobody else works on the study: an owner-less trial, however young, was asked by a
    # sweeper killed before it wrote its owner (waiting for it to go stale would hold a
    # place of the budget for nothing)
    alone = not live_sweepers(study, now)
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if A.REPLAY_ID in t.user_attrs:
            continue  # a kept measurement half written in: the run holding its file ends it
        owner = t.user_attrs.get(A.OWNER) or {}
        here = owner.get("machine") == me
        if owner and here and pid_alive(int(owner.get("pid", -1))):
            continue  # another live sweeper on this machine owns it
        if not (owner and here) and not is_stale(t, now) and not (alone and not owner):
            if owner:  # beating: a live sweeper elsewhere
                line(f"[yellow]trial {t.number} is RUNNING under a sweeper on "
                     f"{owner.get('machine')}; leaving it alone[/]")
            continue  # owner-less but young: just asked by another sweeper
        if not close_interrupted(study, recorder, t, stale=not (owner and here)):
            continue  # closed by another sweeper meanwhile
        server = t.user_attrs.get(A.SERVER)
        if server and server.get("host") in hosts:
            handle = ServerHandle.from_attrs(server)
            if hosts[handle.host].group_alive(handle.pgid):
                line(f"stopping the server of interrupted trial {t.number} "
                     f"(pgid {handle.pgid})")
                with contextlib.suppress(InfrastructureError):
                    stop(handle)
        if owner and not here:
            line(f"trial {t.number}: its sweeper on {owner.get('machine')} (PID "
                 f"{owner.get('pid')}) stopped beating; closed and queued again")
        n += 1
    return n


def close_interrupted(study: optuna.Study, recorder: Recorder, t: FrozenTrial,
                      stale: bool) -> bool:
    """FAIL (interrupted) and queue its parameters again, once: of two sweepers closing
    the same trial, the one whose state write finds it finished already stops there.
    False when someone else closed it."""
    slot = recorder.slot_of(t.number)
    why = ("its sweeper stopped beating (killed, or its machine or network is down)"
           if stale else "the sweeper stopped during this trial (killed?)")
    try:
        recorder.set(slot, **{A.FAILURE: "interrupted", A.FAILURE_MSG: why})
        recorder.storage.set_trial_state_values(slot.trial_id, TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    if not t.user_attrs.get(A.CONFIRM):
        requeue(study, t, count_attempt=False)
    return True


@dataclass(frozen=True)
class Budget:
    """``--trials N`` means N more finished trials, except when the same command resumes a
    sweep that was killed or interrupted: then it goes on to that sweep's target, and to its
    confirm phase if that is where it stopped (``phase``)."""

    start: int
    target: int
    done: int
    resumed: bool
    phase: str = "sweep"  # "confirm": the trials were done, the confirm phase was not
    joined: bool = False  # another sweeper may still be working towards the same target

    @property
    def todo(self) -> int:
        return max(0, self.target - self.done)

    @classmethod
    def of(cls, study: optuna.Study, trials: int) -> Budget:
        done = finished_count(study)
        old: dict[str, Any] = study.user_attrs.get(A.BUDGET) or {}
        owner_pid = int(old.get("pid", -1))
        here = old.get("machine") == socket.gethostname()
        joined = owner_pid != os.getpid() and (not here or pid_alive(owner_pid))
        confirming = old.get("phase") == "confirm" and not joined
        # A sweep still running (here or on another machine) with the same --trials is
        # joined, not added to: sweepers on several machines share one target. One that
        # was interrupted is resumed towards its target, its confirm phase included.
        if old and old.get("trials") == trials \
                and (old.get("target", 0) >= done or confirming):
            return cls(int(old["start"]), int(old["target"]), done, True,
                       "confirm" if confirming else "sweep", joined)
        return cls(done, done + trials, done, False)

    def save(self, study: optuna.Study, trials: int, phase: str = "sweep") -> None:
        study.set_user_attr(A.BUDGET, {
            "start": self.start, "target": self.target, "trials": trials, "phase": phase,
            "machine": socket.gethostname(), "pid": os.getpid()})

    def describe(self, trials: int) -> str:
        if self.resumed and self.phase == "confirm" and not self.todo:
            return (f"resuming the interrupted sweep: its {trials} trials were done; "
                    "resuming its confirm phase")
        if self.resumed and self.joined:
            return (f"sharing the sweep of {trials} trials with the sweeper that started it "
                    f"({self.done - self.start} done, {self.todo} to go between us)")
        if self.resumed:
            return (f"resuming the interrupted sweep: {self.done - self.start} of {trials} "
                    f"trials were done, {self.todo} to go")
        todo = f"{trials} trial{'s' if trials != 1 else ''} to run"
        return f"{todo} ({self.done} already in the study)" if self.done else todo
