"""Measured longer: how many more runs a trial's benchmark makes on the server already up.

A restart of a large model costs minutes and a benchmark run seconds, so the cheapest
replicate of a configuration that could be the best is a longer benchmark of the start
that is serving it. The rule (search/model/racing.worth_more_runs) compares the
configuration's runs so far, its earlier trials' included, with the best of every other
configuration the study measured, pooled as the verdict pools them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from optuna.trial import FrozenTrial, TrialState

from sweeper.measure.stats import start_variance, within_variance
from sweeper.search.model.data import read_history
from sweeper.search.model.racing import Arm, arm_tau2, study_spread, worth_more_runs
from sweeper.search.nodetime import measured_costs, runs_per_start
from sweeper.study import BenchSpec


def more_runs(trials: Sequence[FrozenTrial], config_id: str, bench: BenchSpec
              ) -> Callable[[list[float]], int] | None:
    """For measure/client.run_benchmark's ``more``: None when the study does not measure
    longer (BenchSpec.extends: one level, objective mean); else a function of this
    start's runs so far. The one place that decides it: the client asks whatever it is
    given (a level of a multi-level study looks like a one-level benchmark to it)."""
    if not bench.extends:
        return None
    trials = [t for t in trials if t.state == TrialState.COMPLETE]
    history = read_history(trials)
    every = [*history.observations, *([history.baseline] if history.baseline else [])]
    pooled = {o.config_id: o.runs for o in every}  # one per configuration
    starts = {o.config_id: o.starts for o in every}
    costs = measured_costs(trials, bench.max_tokens)
    groups = list(starts.values())
    cap = runs_per_start(costs, within_variance(groups), start_variance(groups).tau2) \
        if costs else None
    return more_runs_from(pooled, config_id, bench, starts, max_per_start=cap)


def more_runs_from(pooled: Mapping[str, Sequence[float]], config_id: str, bench: BenchSpec,
                   starts: Mapping[str, Sequence[Sequence[float]]] | None = None,
                   max_per_start: int | None = None
                   ) -> Callable[[list[float]], int] | None:
    """``more_runs`` over pooled runs by configuration id (bench/emulation.py's too);
    ``starts``: the same runs by server start, which brings in the between-start variance
    (search/model/racing.worth_more_runs); without, runs are taken as independent."""
    if not bench.extends:
        return None
    by_start = starts or {}
    others = [Arm(c, tuple(r), tuple(tuple(s) for s in by_start.get(c, ())))
              for c, r in pooled.items() if c != config_id and r]
    if not others:
        return None
    earlier = [tuple(s) for s in by_start.get(config_id, ())] if starts else \
        [tuple(pooled.get(config_id, ()))]
    earlier = [s for s in earlier if s]
    floor = study_spread(others)
    tau2 = arm_tau2(others + [Arm(config_id, sum(earlier, ()), tuple(earlier))]
                    if earlier else others) if starts else 0.0

    def more(now: list[float]) -> int:
        mine = Arm(config_id, (*sum(earlier, ()), *now), (*earlier, tuple(now))) if starts \
            else Arm(config_id, (*sum(earlier, ()), *now))
        worth = worth_more_runs(mine, others, floor, bench.runs, tau2, max_per_start)
        return bench.runs if worth else 0

    return more
