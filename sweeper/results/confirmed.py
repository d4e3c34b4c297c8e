"""The last confirm phase's verdict, one per group of hardware.

A study measured on several kinds of hardware confirms each group's leaders on that
group's own hosts. One group's verdict must not stand in for another's: its trial numbers,
its winner and the configurations it ruled out are of other hardware. So each verdict is
kept under its group's key too; the plain key holds the last one written, which is what a
study of one group (or from before groups existed) reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from sweeper.results import attrs as A
from sweeper.results.groups import trial_groups


def _key(group: str) -> str:
    return f"{A.CONFIRMED}:{group}"


def record_confirmed(study: optuna.Study, group: str | None, verdict: dict[str, Any]) -> None:
    value = {**verdict, "group": group} if group else dict(verdict)
    if group:
        study.set_user_attr(_key(group), value)
    study.set_user_attr(A.CONFIRMED, value)


def confirmed_for(study: optuna.Study, trials: Sequence[FrozenTrial]) -> dict[str, Any] | None:
    """The verdict of the last confirm phase over ``trials`` (one group's, or the study's
    when it has one group); None when none was made on their hardware."""
    groups = trial_groups(trials)
    attrs = study.user_attrs
    if len(groups) == 1:
        own = attrs.get(_key(groups[0]))
        if isinstance(own, dict):
            return own
    last = attrs.get(A.CONFIRMED)
    if not isinstance(last, dict):
        return None
    if last.get("group") and groups and last["group"] not in groups:
        return None  # another group's
    return last
