"""How long one visit of the confirm phase is: as many runs as a server start is worth on
this node (run/confirm.py makes the visits; the CLI announces their length)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial

import sweeper.results.verdict as R
from sweeper.measure.stats import start_variance, within_variance
from sweeper.search.nodetime import Costs, measured_costs, runs_per_start


@dataclass(frozen=True)
class VisitRuns:
    """Runs per confirm visit: the study's ``confirm_runs`` over the rounds, or more when
    a start is worth more on this node (``worth``)."""

    runs: int
    worth: int | None = None  # runs per start that pay (None: not known, or not more)
    costs: Costs | None = None
    start_sd: float = 0.0  # between starts, relative
    run_sd: float = 0.0  # between runs of one start, relative

    def why(self, where: str = "on this node") -> str:
        """``a start is worth 32 runs on this node: ...``; empty when the study's count
        stands."""
        if not self.worth or self.costs is None:
            return ""
        up = self.costs.restart_s
        restart = f"{up / 60:.1f} min" if up >= 120 else f"{up:.0f} s"
        return (f"a start is worth {self.worth} runs {where}: a restart costs {restart} and "
                f"a run {self.costs.run_s:.1f} s; starts differ by {self.start_sd:.1%}, "
                f"runs by {self.run_sd:.1%}")


def visit_runs(trials: Sequence[FrozenTrial], bench: Any, runs: int, rounds: int,
               exact: bool = False) -> VisitRuns:
    """Runs per visit of the confirm phase: ``runs`` spread over ``rounds`` at least, and
    as many as one start is worth here (nodetime.runs_per_start, up to ``max_runs``).

    Why more: a visit of 10 runs at a run-to-run spread of 5-8% knows its start's speed
    to 2-3%, more than starts differ by; two such visits could not tell contenders 3%
    apart, and on emulated Kimi sweeps a visit 7% high made a configuration 3% slower the
    winner. Runs on a server already up cost seconds; the restart they share cost
    minutes. ``exact``: the user asked for this many (``sweeper confirm --runs``)."""
    floor = max(1, math.ceil(runs / max(1, rounds)))
    if exact:
        return VisitRuns(floor)
    results = R.config_results(list(trials))
    groups = [r.by_start() for r in results]
    costs = measured_costs(trials, bench.max_tokens)
    if costs is None or not groups:
        return VisitRuns(floor)
    sigma2, tau2 = within_variance(groups), start_variance(groups).tau2
    worth = runs_per_start(costs, sigma2, tau2)
    if worth is None:
        return VisitRuns(floor)
    worth = min(worth, bench.max_runs or worth)
    if worth <= floor:
        return VisitRuns(floor)
    return VisitRuns(worth, worth, costs, math.sqrt(tau2), math.sqrt(sigma2))
