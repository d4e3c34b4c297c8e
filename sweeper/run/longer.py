"""Measured longer: how many more runs a trial's benchmark makes on the server already up.

A restart of a large model costs minutes and a benchmark run seconds, so the cheapest
replicate of a configuration that could be the best is a longer benchmark of the start
that is serving it. The rule (search/model/racing.worth_more_runs) compares the
configuration's runs so far, its earlier trials' included, with the best of every other
configuration the study measured, pooled as the verdict pools them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import optuna
from optuna.trial import TrialState

from sweeper.search.model.data import read_history
from sweeper.search.model.racing import Arm, study_spread, worth_more_runs
from sweeper.study import BenchSpec


def more_runs(study: optuna.Study, config_id: str, bench: BenchSpec
              ) -> Callable[[list[float]], int] | None:
    """For measure/client.run_benchmark's ``more``: None when the study does not measure
    longer (BenchSpec.extends: one level, objective mean); else a function of this
    start's runs so far. The one place that decides it: the client asks whatever it is
    given (a level of a multi-level study looks like a one-level benchmark to it)."""
    if not bench.extends:
        return None
    history = read_history(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    pooled = {o.config_id: o.runs for o in history.observations}  # one per configuration
    if history.baseline is not None:
        pooled[history.baseline.config_id] = history.baseline.runs
    return more_runs_from(pooled, config_id, bench)


def more_runs_from(pooled: Mapping[str, Sequence[float]], config_id: str, bench: BenchSpec
                   ) -> Callable[[list[float]], int] | None:
    """``more_runs`` over pooled runs by configuration id (bench/emulation.py's too)."""
    if not bench.extends:
        return None
    earlier = list(pooled.get(config_id, ()))
    others = [Arm(c, tuple(r)) for c, r in pooled.items() if c != config_id and r]
    if not others:
        return None
    floor = study_spread(others)

    def more(now: list[float]) -> int:
        return bench.runs if worth_more_runs(earlier + now, others, floor, bench.runs) else 0

    return more
