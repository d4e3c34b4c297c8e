"""Which group of hardware (one GPU type) a trial was measured on: results are compared
only within one. Kept apart from hosts.py so that the verdict can read it without the
display's imports."""

from __future__ import annotations

from collections.abc import Sequence

from optuna.trial import FrozenTrial, TrialState

from sweeper.results import attrs as A


def trial_groups(trials: Sequence[FrozenTrial]) -> list[str]:
    """The groups that measured something, in the order they first did."""
    seen: dict[str, None] = {}
    for t in trials:
        g = t.user_attrs.get(A.GROUP)
        if g and t.state == TrialState.COMPLETE:
            seen.setdefault(str(g), None)
    return list(seen)


def in_group(trials: Sequence[FrozenTrial], group: str | None) -> list[FrozenTrial]:
    """The trials measured in ``group`` (trials from before groups existed count in all);
    every trial when ``group`` is None (not known, or one group only)."""
    if group is None:
        return list(trials)
    return [t for t in trials if t.user_attrs.get(A.GROUP, group) == group]
