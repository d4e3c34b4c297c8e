"""Proposals resolved without a restart, as run/decide.py decided: an accidental repeat
of a measured configuration (the sampler is told what it gave) and a configuration known
to fail (recorded PRUNED, skipped). A deliberate replicate (racing, search/model/) is
measured."""

from __future__ import annotations

from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.results import attrs as A
from sweeper.results.kind import TrialKind, kind_of
from sweeper.run.decide import Decision
from sweeper.run.record import Slot
from sweeper.run.session import HostSession


def answer_repeat(s: HostSession, slot: Slot, d: Decision, label: str) -> None:
    """Tell the sampler the mean its earlier trials were told instead of a restart."""
    assert d.value is not None
    s.recorder.repeat(slot, d.value, list(d.of))
    s.summary.repeats += 1
    trials = ", ".join(str(n) for n in d.of)
    s.line(f"{label}[yellow]repeat, no restart[/]: measured in trial {trials}; told the "
           f"sampler their mean {d.value:.1f}")


def skip_known_failure(s: HostSession, slot: Slot, d: Decision, label: str) -> None:
    """Known to fail: no restart wasted on it. Recorded (the sampler learns from it) but
    not counted against --trials, which counts restarts."""
    s.recorder.prune(slot, d.kind, f"predicted: {d.reason}", skipped=True)
    s.summary.skipped += 1
    s.line(f"{label}[yellow]skipped, no restart[/]: known to fail ({d.kind}: {d.reason})")


def measured(study: optuna.Study, trials: Sequence[FrozenTrial], cid: str
             ) -> list[tuple[int, float]]:
    """(trial number, value told) of every measurement of configuration ``cid`` among
    ``trials`` (its host's group's: one measured on other hardware is no answer here). A
    study of two objectives (pareto) has no one value to answer a repeat with: none."""
    if len(study.directions) != 1:
        return []
    return [(t.number, float(t.values[0])) for t in trials
            if t.state == TrialState.COMPLETE and t.values
            and t.user_attrs.get(A.CONFIG_ID) == cid and kind_of(t) != TrialKind.REPEAT]
