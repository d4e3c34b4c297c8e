"""Node-seconds: the one currency of a sweep on a paid GPU node.

A restart of a large model costs minutes and a benchmark run seconds; every decision a
sweep makes (another batch of runs on the start that is up, a new configuration, another
start of a configuration already measured, or stopping) buys a reduction of the pick's
expected loss for some node-seconds. These are the pure building blocks:

- ``Costs``/``measured_costs``: what a restart and a run cost, from the study
  (``sweep.restart_cost``, ``sweep.run_cost``) or measured (the baseline's start-up,
  the runs' durations as max_tokens / tok/s);
- ``runs_per_start``: past this many runs on one start, another start says more per
  node-second (two-stage sampling: sqrt(restart/run x within / between variance));
- ``batch_gain``/``replicate_gain``: the expected loss a batch on this start or a new
  start removes (search/model/racing's value of information, two levels);
- ``choose``: the option with the best gain per node-second, or stop when none pays;
- ``stop_reason``: the stop rule, ``sweep.stop_when_sure`` (default 0.95 that the pick is
  within 1% of the best measured);
- ``spent_seconds``: the node time a study's trials took; ``study_spent`` the same on a
  study's settings, labelled (the live line, the summary, ``sweeper status``);
- ``plan_seconds``: the node time of a study as written (``sweeper validate``).

Where they plug in: after each finished trial the loop (run/workers.py) asks
run/decide.should_stop, which calls ``stop_reason`` with the configurations' starts
(results/verdict.ConfigResult.by_start) once the sampler has explored, and ends the sweep
with that reason (``--trials`` stays the upper bound); the live bar and the summary add up
``spent_seconds`` (on the simulator: modelled seconds, labelled as such); run/longer.py
caps runs on one start at ``runs_per_start``; ``not_worth_a_restart`` (through
``choose``) is the stop rule's other half, on the gains the model sampler records per
trial (search/model/sampler.py, results/attrs.GAINS).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweeper.measure.stats import Starts, noise_measured, se2_after
from sweeper.measure.sure import p_within_starts
from sweeper.search.model.racing import INDIFFERENCE, expected_excess

if TYPE_CHECKING:
    from sweeper.study import StudySpec

SURE_TOL = 0.01  # "within 1% of the best", as results/verdict.py states it


@dataclass(frozen=True)
class Costs:
    """Node-seconds of one restart (to healthy) and one benchmark run."""

    restart_s: float
    run_s: float
    source: str = "study"  # "study", "measured" or "simulated (modelled seconds)"

    @property
    def ratio(self) -> float:
        """How many runs one restart costs."""
        return self.restart_s / self.run_s if self.run_s > 0 else math.inf

    def trial_s(self, runs: int, warmup: int = 1) -> float:
        return self.restart_s + (runs + warmup) * self.run_s

    def spent(self, restarts: int, runs: int) -> float:
        return restarts * self.restart_s + runs * self.run_s


def run_seconds(tok_s_runs: Sequence[float], max_tokens: int) -> float | None:
    """A run's duration from its tok/s (completion tokens / end-to-end seconds of a
    request of ``max_tokens`` tokens): the median over ``tok_s_runs``."""
    secs = [max_tokens / v for v in tok_s_runs if v > 0]
    return statistics.median(secs) if secs else None


def measured_costs(trials: Sequence[Any], max_tokens: int, restart_s: float | None = None,
                   run_s: float | None = None) -> Costs | None:
    """Costs from a study's trials (optuna FrozenTrials): the baseline's start-up (else
    the median start-up), the median run duration; the study's values win when set."""
    from sweeper.results import attrs as A

    ups: list[float] = []
    tok_s: list[float] = []
    base_up: float | None = None
    for t in trials:
        ua = t.user_attrs
        up = ua.get(A.STARTUP)
        if isinstance(up, int | float) and up > 0:
            ups.append(float(up))
            if ua.get(A.ROLE) == A.BASELINE and base_up is None:
                base_up = float(up)
        tok_s.extend(float(v) for v in ua.get(A.RUNS) or [] if isinstance(v, int | float))
    restart = restart_s or base_up or (statistics.median(ups) if ups else None)
    run = run_s or run_seconds(tok_s, max_tokens)
    if restart is None or run is None:
        return None
    source = "study" if restart_s and run_s else "measured"
    return Costs(restart, run, source)


def runs_per_start(costs: Costs, sigma2: float, tau2: float) -> int | None:
    """The runs per start that minimise the error of a configuration's mean per
    node-second (Cochran's two-stage optimum, sqrt(ratio x sigma^2 / tau^2)); None
    when starts do not differ (every run is worth the same wherever it is made)."""
    if tau2 <= 0 or sigma2 <= 0:
        return None
    return max(1, round(math.sqrt(costs.ratio * sigma2 / tau2)))


def _decision_loss(d: float, se2: float) -> float:
    return expected_excess(d, math.sqrt(max(se2, 0.0)))


def batch_gain(mine: Starts, lead: Starts, tau2: float, floor_cv: float, batch: int) -> float:
    """Expected loss (log tok/s) removed by ``batch`` more runs on ``mine``'s last start."""
    return _gain(mine, lead, tau2, floor_cv, more_runs=batch)


def replicate_gain(mine: Starts, lead: Starts, tau2: float, floor_cv: float,
                   runs: int) -> float:
    """Expected loss removed by a new start of ``mine`` with ``runs`` runs."""
    return _gain(mine, lead, tau2, floor_cv, new_start=runs)


def _gain(mine: Starts, lead: Starts, tau2: float, floor_cv: float, **more: int) -> float:
    def mean(s: Starts) -> float:
        return statistics.fmean(v for g in s for v in g)

    d = -abs(math.log(mean(mine)) - math.log(mean(lead))) - INDIFFERENCE
    s_lead = se2_after(lead, tau2, floor_cv)
    now = _decision_loss(d, se2_after(mine, tau2, floor_cv) + s_lead)
    after = _decision_loss(d, se2_after(mine, tau2, floor_cv, **more) + s_lead)
    return max(now - after, 0.0)


@dataclass(frozen=True)
class Option:
    """One thing the sweep could do next: ``kind`` is batch, new, replicate or stop."""

    kind: str
    gain: float  # expected reduction of the pick's loss, log tok/s
    cost_s: float  # node-seconds it takes

    @property
    def rate(self) -> float:
        return self.gain / self.cost_s if self.cost_s > 0 else 0.0


def choose(options: Sequence[Option], min_rate: float) -> Option:
    """The option with the best gain per node-second; stop when none reaches
    ``min_rate`` (the least gain per node-second worth paying for)."""
    paying = [o for o in options if o.kind != "stop" and o.rate >= min_rate]
    if not paying:
        return Option("stop", 0.0, 0.0)
    return max(paying, key=lambda o: o.rate)


def not_worth_a_restart(new_gain: float, replicate_gain: float, remaining: int,
                        trial_s: float, stop_when_sure: float) -> str | None:
    """The other half of the stop rule: why no restart left is worth its node-seconds
    (or None). A restart buys ``new_gain`` (the model's best expected improvement of a
    configuration never measured, log tok/s) or ``replicate_gain`` (racing's expected
    loss removed by another start of a leader) for ``trial_s`` node-seconds. The price
    of a node-second: the loss the study accepts when it stops sure (being out of the 1%
    tolerance with probability 1 - ``stop_when_sure``), spread over the ``remaining``
    restarts' node-seconds. When even every remaining restart at the best rate would buy
    less than that loss, stopping loses less than the study already tolerates."""
    if stop_when_sure >= 1.0 or remaining <= 0 or trial_s <= 0:
        return None
    tolerated = SURE_TOL * (1.0 - stop_when_sure)
    best = choose([Option("new", new_gain, trial_s), Option("replicate", replicate_gain, trial_s)],
                  tolerated / (remaining * trial_s))
    if best.kind != "stop":
        return None
    return (f"another restart is worth less than it costs: at best "
            f"{max(new_gain, replicate_gain):.3%} expected gain for "
            f"{trial_s / 60:.0f} node-minutes, under {tolerated / remaining:.4%} "
            f"(sweep.stop_when_sure {stop_when_sure:g} tolerates {tolerated:.3%} expected "
            f"loss over the {remaining} restarts left)")


def stop_reason(best: Starts, others: Sequence[Starts], tau2: float,
                stop_when_sure: float, floor_cv: float | None = None) -> str | None:
    """Why the sweep can stop now (the pick is at least ``stop_when_sure`` likely to be
    within 1% of every other configuration measured, on two-level statistics), or None."""
    if not others or stop_when_sure >= 1.0 or not noise_measured([best, *others]):
        return None
    p = p_within_starts(best, others, tau2, SURE_TOL, floor_cv)
    if p < stop_when_sure:
        return None
    return (f"the pick is {p:.0%} sure to be within 1% of the best configuration measured "
            f"(sweep.stop_when_sure: {stop_when_sure:g})")


def spent_seconds(trials: Sequence[Any], max_tokens: int, warmup: int = 1,
                  restart_s: float | None = None, run_s: float | None = None
                  ) -> tuple[float, str]:
    """Node-seconds a study's trials (optuna FrozenTrials) took, and what they rest on:
    every start-up as measured (``restart_s`` per restart when the study sets it) and
    every run, the warm-ups included, at its measured duration (max_tokens / tok/s) or at
    ``run_s``. Trials that reused a running server (start-up 0) cost their runs only."""
    from sweeper.results import attrs as A

    up_s = runs_s = 0.0
    for t in trials:
        ua = t.user_attrs
        up = ua.get(A.STARTUP)
        if isinstance(up, int | float) and up > 0:
            up_s += restart_s if restart_s else float(up)
        tok_s = [float(v) for v in ua.get(A.RUNS) or [] if isinstance(v, int | float)]
        if not tok_s:
            continue
        n = len(tok_s) + int(ua.get(A.RUNS_FLAGGED) or 0) + (warmup if up != 0 else 0)
        if run_s:
            runs_s += n * run_s
        else:
            each = [max_tokens / v for v in tok_s if v > 0]
            runs_s += sum(each) + (n - len(each)) * statistics.median(each) if each else 0.0
    if not restart_s and not run_s:
        return up_s + runs_s, "start-ups and runs as timed"
    source = "start-ups at sweep.restart_cost" if restart_s else "start-ups as timed"
    source += ", runs at sweep.run_cost" if run_s else ", runs as timed"
    return up_s + runs_s, source


def study_spent(spec: StudySpec, trials: Sequence[Any], simulated: bool
                ) -> tuple[float, str]:
    """``spent_seconds`` on ``spec``'s costs, and where the figure comes from, said of the
    simulated server when it is one."""
    sw, bench = spec.sweep, spec.benchmark
    secs, source = spent_seconds(list(trials), bench.max_tokens, bench.warmup,
                                 sw.restart_cost, sw.run_cost)
    if simulated:
        source = f"{source} on the simulated server, not a GPU node's"
    return secs, source


def plan_seconds(costs: Costs, trials: int, runs: int, warmup: int, max_runs: int | None,
                 confirm_restarts: int = 0, confirm_runs: int = 0,
                 confirm_max: int | None = None) -> tuple[float, float]:
    """Node-seconds of a study as written, (every trial at ``runs``, every trial at
    ``max_runs``): ``trials`` restarts plus the confirm phase's, whose runs are
    ``confirm_runs`` at least and ``confirm_max`` at most (its visits run as long as a
    start is worth: run/confirm_runs.visit_runs)."""
    def at(r: int, confirm: int) -> float:
        return (trials * costs.trial_s(r, warmup)
                + confirm_restarts * costs.restart_s
                + confirm * costs.run_s)
    return (at(runs, confirm_runs),
            at(max_runs or runs, max(confirm_runs, confirm_max or confirm_runs)))
