"""Sharing one study between workers: who may start a trial, so that the study ends with
exactly the requested number of finished trials and no configuration is measured twice at
the same time, whether the workers are threads of one sweeper or sweepers on several
machines sharing a storage.

Every rule reads only what the storage holds, so it holds across processes:

* a trial in flight is RUNNING, not a confirm-phase run, not handed back, not stale;
* ``room``: the target less the finished trials less those in flight; a worker asks for
  a trial only while there is room;
* ``admitted``: two workers may both see the last bit of room and ask at once. Then the
  one whose trial started later (by start time, then number) counts the other and hands
  its own back; each trial only defers to earlier ones, so one of them always goes on.
* ``duplicate_of``: a configuration already in flight in the same group is not started
  again (a later replicate is fine: it is measured after the first has finished). Each
  worker records its configuration before looking for others, so of two racing workers
  at least one sees the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from optuna.trial import FrozenTrial, TrialState

from sweeper.results import attrs as A
from sweeper.results.kind import TrialKind, kind_of
from sweeper.run.heartbeat import is_stale
from sweeper.run.reconcile import counts_as_finished


def in_flight(t: FrozenTrial) -> bool:
    """RUNNING for the sweep, and alive: a stale trial (its owner stopped beating, or it
    never got one, run/heartbeat.py) is closed by whoever sees it, never waited for."""
    return t.state == TrialState.RUNNING and \
        kind_of(t) not in (TrialKind.CONFIRM, TrialKind.BACKED_OFF) and not is_stale(t)


def _order(t: FrozenTrial) -> tuple[datetime, int]:
    return (t.datetime_start or datetime.max, t.number)


def room(trials: Sequence[FrozenTrial], target: int) -> int:
    """How many more trials may start now towards ``target`` finished ones."""
    finished = sum(counts_as_finished(t) for t in trials)
    return target - finished - sum(in_flight(t) for t in trials)


def admitted(trials: Sequence[FrozenTrial], number: int, target: int) -> bool:
    """Trial ``number`` (in flight) fits the budget: the finished trials and the trials
    in flight that started before it leave it a place."""
    me = next(t for t in trials if t.number == number)
    finished = sum(counts_as_finished(t) for t in trials)
    earlier = sum(1 for t in trials
                  if t.number != number and in_flight(t) and _order(t) < _order(me))
    return finished + earlier < target


def duplicate_of(trials: Sequence[FrozenTrial], number: int, config_id: str,
                 group: str) -> int | None:
    """Another trial in flight measuring ``config_id`` in ``group``, if any."""
    for t in trials:
        ua = t.user_attrs
        if t.number != number and in_flight(t) and ua.get(A.CONFIG_ID) == config_id \
                and ua.get(A.GROUP, group) == group:
            return t.number
    return None


def needs_baseline(trials: Sequence[FrozenTrial], group: str) -> bool:
    """``group`` has no baseline yet: none measured or in flight there, and none queued
    for whichever worker asks first (the study's own, enqueued when it was created)."""
    for t in trials:
        ua = t.user_attrs
        if kind_of(t) != TrialKind.BASELINE:
            continue
        if t.state == TrialState.WAITING and A.GROUP not in ua:
            return False
        # a baseline that failed on its server ended that sweep (run/failed.py): the next
        # one measures it again, the server settings presumably fixed
        if (t.state == TrialState.COMPLETE or in_flight(t)) \
                and ua.get(A.GROUP, group) == group:
            return False
    return True
