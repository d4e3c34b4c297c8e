"""Whether a sweeper, or a trial's sweeper, is alive: read from the storage alone, so that
``status`` and every sweeper on any machine agree. run/heartbeat.py writes the beats."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.results import attrs as A

STALE_SECONDS = 60.0


def me() -> dict[str, Any]:
    return {"machine": socket.gethostname(), "pid": os.getpid()}


def is_mine(owner: Any) -> bool:
    return isinstance(owner, dict) and owner.get("machine") == socket.gethostname() and \
        owner.get("pid") == os.getpid()


def last_beat(t: FrozenTrial) -> float | None:
    """When the trial was last known alive: its beat, else its start."""
    beat = t.user_attrs.get(A.HEARTBEAT)
    if isinstance(beat, int | float):
        return float(beat)
    return t.datetime_start.timestamp() if t.datetime_start is not None else None


def is_stale(t: FrozenTrial, now: float | None = None) -> bool:
    """RUNNING, and neither its owner's beat nor (owner-less) its start is recent."""
    if t.state != TrialState.RUNNING or A.REPLAY_ID in t.user_attrs:
        return False  # a half-written replay is finished by the run that holds its file
    seen = last_beat(t)
    return seen is not None and (now or time.time()) - seen > STALE_SECONDS


def _dead_here(who: dict[str, Any]) -> bool:
    """A process of this machine that no longer runs (its last beat may still be recent)."""
    if who.get("machine") != socket.gethostname():
        return False
    try:
        os.kill(int(who.get("pid", -1)), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, OverflowError):
        return False
    return False


def live_sweepers(study: optuna.Study, now: float | None = None) -> list[dict[str, Any]]:
    """The other sweeper processes whose beat on this study is recent, on any machine (one
    of this machine that is known dead is not)."""
    now = now or time.time()
    found = []
    for key, value in study.user_attrs.items():
        if key.startswith(A.LIVE_PREFIX) and isinstance(value, dict) and not is_mine(value) \
                and now - float(value.get("at", 0)) <= STALE_SECONDS \
                and not _dead_here(value):
            found.append(value)
    return found
