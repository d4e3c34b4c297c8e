"""Proposals resolved without a restart: an accidental repeat of a measured
configuration (the sampler is told what it gave) and a configuration known to fail
(recorded PRUNED, skipped). A deliberate replicate (racing, search/model/) is measured."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from sweeper.results import attrs as A
from sweeper.run.record import Slot

if TYPE_CHECKING:
    from sweeper.run.sweep import Sweep

# An accidental repeat of a measured configuration is resolved without a restart this many
# times in a row; the next one is measured (a sampler that insists gets its replicate), so
# the loop always moves on.
REPEAT_LIMIT = 5


def resolve_without_restart(sweep: Sweep, trial: optuna.Trial, slot: Slot, role: str,
                            cid: str, effective: dict[str, Any], label: str) -> str | None:
    """``"repeat"`` or ``"skipped"`` when no restart is needed; None: measure it."""
    if role == A.SAMPLER and not trial.user_attrs.get(A.REPLICATE):
        earlier = measured(sweep.study, cid)
        if earlier and sweep._repeats_in_a_row < REPEAT_LIMIT:
            # the sampler proposed a configuration already measured, by accident:
            # tell it what that configuration gave instead of paying a restart
            value = statistics.fmean(v for _, v in earlier)
            sweep.recorder.repeat(slot, value, [n for n, _ in earlier])
            sweep._repeats_in_a_row += 1
            sweep.summary.repeats += 1
            trials = ", ".join(str(n) for n, _ in earlier)
            sweep._line(f"{label}[yellow]repeat, no restart[/]: measured in trial "
                        f"{trials}; told the sampler their mean {value:.1f}")
            return "repeat"
    predicted = sweep.memory.predict(cid, effective)
    if predicted is not None:
        # Known to fail: no restart wasted on it. Recorded (the sampler learns from
        # it) but not counted against --trials, which counts restarts.
        sweep.recorder.prune(slot, predicted.kind, f"predicted: {predicted.reason}",
                             skipped=True)
        sweep.summary.skipped += 1
        sweep._line(f"{label}[yellow]skipped, no restart[/]: known to fail "
                    f"({predicted.kind}: {predicted.reason})")
        return "skipped"
    return None


def measured(study: optuna.Study, cid: str) -> list[tuple[int, float]]:
    """(trial number, value told) of every measurement of configuration ``cid``."""
    return [(t.number, float(t.value)) for t in
            study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.value is not None and t.user_attrs.get(A.CONFIG_ID) == cid
            and not t.user_attrs.get(A.REPEAT_OF)]
