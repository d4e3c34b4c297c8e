"""What kind of trial a stored trial is, decided in one place from its attributes.

Every reader (the budget, the failure memory, the model sampler's data, the verdict, the
report, ``status``, the claims of several workers) asks ``kind_of`` instead of reading the
flags of results/attrs.py itself, so the kinds cannot drift apart between them:

* ``CONFIRM``: a confirm-phase visit (a speculative configuration or the baseline);
* ``BACKED_OFF``: handed back before any restart (never measured);
* ``SKIPPED``: predicted to fail, recorded PRUNED without a restart;
* ``REPEAT``: an accidental repeat told an earlier mean without a restart (no runs);
* ``BASELINE``: the sweep's measurement of the study's fixed settings alone;
* ``REPLICATE``: a configuration measured again on purpose (racing);
* ``MEASURED``: any other sweep trial (start_from, the sampler's, a retry).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from sweeper.results import attrs as A


class TrialKind(Enum):
    BASELINE = "baseline"
    MEASURED = "measured"
    REPLICATE = "replicate"
    REPEAT = "repeat"
    SKIPPED = "skipped"
    CONFIRM = "confirm"
    BACKED_OFF = "backed off"

    @property
    def restarts(self) -> bool:
        """A trial of this kind costs a server start of the sweep (the budget's unit)."""
        return self in (TrialKind.BASELINE, TrialKind.MEASURED, TrialKind.REPLICATE)


def kind_of_attrs(ua: dict[str, Any]) -> TrialKind:
    """The kind of a trial with user attributes ``ua``."""
    if ua.get(A.CONFIRM):
        return TrialKind.CONFIRM
    if ua.get(A.BACKED_OFF):
        return TrialKind.BACKED_OFF
    if ua.get(A.SKIPPED):
        return TrialKind.SKIPPED
    if ua.get(A.REPEAT_OF):
        return TrialKind.REPEAT
    if ua.get(A.ROLE) == A.BASELINE:
        return TrialKind.BASELINE
    if ua.get(A.REPLICATE):
        return TrialKind.REPLICATE
    return TrialKind.MEASURED


def kind_of(t: FrozenTrial) -> TrialKind:
    return kind_of_attrs(t.user_attrs)


def ran_on_server(t: FrozenTrial) -> bool:
    """A sweep trial that started a server and ended on it (measured, or failed as the
    configuration's fault): what ``--trials`` counts and the failure memory learns from."""
    return t.state in (TrialState.COMPLETE, TrialState.PRUNED) and kind_of(t).restarts
