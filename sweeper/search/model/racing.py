"""Racing: replicates where they change the decision, and how sure the pick is.

Pure statistics on pooled runs (log scale: throughput errors are relative). The leader is
the best posterior, as the verdict picks it (results/verdict.ranked). A challenger whose
interval overlaps the leader's may truly be the better one; the expected loss of keeping
the leader, ``E[max(0, mu_j - mu_leader - indifference)]``, is what one more measurement of the less
measured of the two can recover. The sampler weighs it against what exploring a new
configuration is expected to gain (expected improvement), in the same units.
``worth_more_runs`` uses the same loss within one server start: a configuration close to
the leader is measured longer there, before any restart is spent on it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sweeper.measure.dists import norm_cdf, norm_pdf
from sweeper.measure.stats import se2_after, start_variance, within_variance
from sweeper.measure.sure import Estimate, posterior_log_means

CHALLENGERS = 4  # beyond the top few, a replicate almost never changes the pick
# Indifference zone (log tok/s): a challenger truly ahead by less than this is as good a
# pick as the leader; only what the decision loses beyond it is worth a replicate
INDIFFERENCE = 0.005


@dataclass(frozen=True)
class Arm:
    """One configuration's pooled runs, and the same runs by server start (``starts``,
    the last the one serving now; empty: all on one start)."""

    key: str
    runs: tuple[float, ...]
    starts: tuple[tuple[float, ...], ...] = ()

    @property
    def mean(self) -> float:
        return statistics.fmean(self.runs)

    @property
    def by_start(self) -> tuple[tuple[float, ...], ...]:
        return self.starts or (self.runs,)

    def _cv(self, floor_cv: float) -> float:
        n = len(self.runs)
        return max(statistics.stdev(self.runs) / self.mean if n > 1 else floor_cv, floor_cv)

    def se2(self, floor_cv: float, tau2: float = 0.0) -> float:
        """Squared standard error of log(mean); ``floor_cv``: the least relative spread
        believed (three runs can agree by chance; the study's typical spread is better);
        ``tau2``: the between-start variance (measure/stats.two_level)."""
        if tau2:
            return se2_after(self.by_start, tau2, self._cv(floor_cv))
        return self._cv(floor_cv) ** 2 / len(self.runs)

    def se2_after(self, floor_cv: float, tau2: float, *, more_runs: int = 0,
                  new_start: int = 0) -> float:
        """``se2`` after ``more_runs`` on the current start or a new start of
        ``new_start`` runs (without ``tau2`` both are just more runs)."""
        if tau2:
            return se2_after(self.by_start, tau2, self._cv(floor_cv), more_runs=more_runs,
                             new_start=new_start)
        return self._cv(floor_cv) ** 2 / (len(self.runs) + more_runs + new_start)


def arm_tau2(arms: Sequence[Arm]) -> float:
    """The between-start variance the arms show (measure/stats.start_variance: pooled over
    those measured on two starts or more, from its prior before there are any)."""
    return start_variance([a.by_start for a in arms]).tau2


def expected_excess(d: float, se: float) -> float:
    """E[max(0, X)] for X ~ N(d, se^2)."""
    if se <= 0:
        return max(d, 0.0)
    z = d / se
    return d * float(norm_cdf(z)) + se * float(norm_pdf(z))


@dataclass(frozen=True)
class RaceCall:
    key: str  # the configuration to measure again
    value: float  # expected loss (log tok/s) of the decision this replicate removes
    against: str  # the leader, or the challenger it races


def race(arms: Sequence[Arm], floor_cv: float,
         belief: Mapping[str, tuple[float, float]] | None = None,
         tau2: float | None = None) -> RaceCall | None:
    """The replicate that most reduces the decision's expected loss, or None when there
    is no challenger. The leader is the best posterior (the verdict's pick).
    ``belief``: the model's posterior (mean, sd) of log tok/s per configuration; it knows
    what a configuration's neighbours say, so a good configuration measured low once
    still challenges. Without it, the pooled runs alone. ``tau2``: the between-start
    variance (default: what the arms' starts show, ``arm_tau2``); a replicate is a new
    start, worth more than its runs alone when the starts differ."""
    if len(arms) < 2:
        return None
    tau2 = arm_tau2(arms) if tau2 is None else tau2
    # the verdict's pick (results/verdict.ranked): the best posterior, not the best raw mean
    post_lead = posterior_log_means([Estimate(math.log(a.mean), math.sqrt(a.se2(floor_cv, tau2)))
                                     for a in arms])
    lead = arms[max(range(len(arms)), key=lambda i: post_lead[i])]

    def post(a: Arm) -> tuple[float, float]:
        if belief is not None and a.key in belief:
            return belief[a.key]
        return math.log(a.mean), math.sqrt(a.se2(floor_cv, tau2))

    ml, sl = post(lead)
    per_trial = min(len(a.runs) for a in arms)  # what one more trial adds, in runs
    rivals = sorted((a for a in arms if a.key != lead.key), key=lambda a: post(a)[0],
                    reverse=True)[:CHALLENGERS]
    best: RaceCall | None = None
    for c in rivals:
        mc, sc = post(c)
        d = mc - ml - INDIFFERENCE
        # measure the less measured of the two: it shrinks the difference's interval most
        pick, other = (lead, c) if lead.se2(floor_cv, tau2) >= c.se2(floor_cv, tau2) \
            else (c, lead)
        shrink = pick.se2_after(floor_cv, tau2, new_start=per_trial) / pick.se2(floor_cv, tau2)
        s_now = math.sqrt(sl**2 + sc**2)
        s_after = math.sqrt((sl**2 * shrink + sc**2) if pick is lead else (sl**2 + sc**2 * shrink))
        # the value of the replicate: how much of the decision's expected loss it removes
        value = expected_excess(d, s_now) - expected_excess(d, s_after)
        if best is None or value > best.value:
            best = RaceCall(pick.key, value, other.key)
    return best


def study_spread(arms: Sequence[Arm]) -> float:
    """Median relative spread of runs within a start over configurations measured more
    than once (the spread between starts is ``arm_tau2``'s)."""
    cvs = []
    for a in arms:
        st = [s for s in a.by_start if len(s) > 1]
        if st and a.mean > 0:
            cvs.append(math.sqrt(within_variance([st])))
    return statistics.median(cvs) if cvs else 0.05


# A longer benchmark of the server already up costs seconds; a restart costs minutes. So a
# configuration that could change the pick is measured longer on the same start, a batch
# of runs at a time, while one more batch is expected to remove at least this much of the
# decision's expected loss (log tok/s; 0.00001 ~ 0.001% of tok/s per batch: through ~14%
# run-to-run spread, separating configurations 1% apart takes a few hundred runs each).
# The runs it costs are counted by bench/search_efficiency.py (column "runs");
# benchmark.max_runs caps them per start.
EXTEND_VALUE = 0.00001


def worth_more_runs(mine: Sequence[float] | Arm, others: Sequence[Arm], floor_cv: float,
                    batch: int, tau2: float = 0.0, max_per_start: int | None = None) -> bool:
    """Whether ``batch`` more runs of the configuration being measured are worth their
    time: it and the best of ``others`` (every other configuration's runs) are close
    enough that the pick between them is uncertain, and ``batch`` more runs on this start
    shrink that uncertainty enough (value of information; a leader measured too little to
    compare with gives little). ``mine``: its runs so far, earlier trials' and this
    start's; an ``Arm`` with ``starts`` when they are known (the last: this start).
    ``tau2``: the between-start variance: once it dominates, more runs on one start
    cannot tell that start's speed from the configuration's, and stop being bought.
    ``max_per_start``: past this many runs on this start another start says more per
    node-second (search/nodetime.runs_per_start): no more here."""
    me = mine if isinstance(mine, Arm) else Arm("", tuple(mine))
    if not me.runs or not others or batch < 1:
        return False
    if max_per_start is not None and len(me.by_start[-1]) >= max_per_start:
        return False
    lead = max(others, key=lambda a: a.mean)
    s_lead2, s_me2 = lead.se2(floor_cv, tau2), me.se2(floor_cv, tau2)
    d = -abs(math.log(me.mean) - math.log(lead.mean)) - INDIFFERENCE
    now = expected_excess(d, math.sqrt(s_me2 + s_lead2))
    after = expected_excess(d, math.sqrt(me.se2_after(floor_cv, tau2, more_runs=batch)
                                          + s_lead2))
    return now - after > EXTEND_VALUE
