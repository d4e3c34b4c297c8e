"""Racing: replicates where they change the decision, and how sure the pick is.

Pure statistics on pooled runs (log scale: throughput errors are relative). The leader is
the best pooled mean, as the verdict picks it (results/verdict.py). A challenger whose
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

from scipy.stats import norm

CHALLENGERS = 4  # beyond the top few, a replicate almost never changes the pick
# Indifference zone (log tok/s): a challenger truly ahead by less than this is as good a
# pick as the leader; only what the decision loses beyond it is worth a replicate
INDIFFERENCE = 0.005


@dataclass(frozen=True)
class Arm:
    """One configuration's pooled runs."""

    key: str
    runs: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.runs)

    def se2(self, floor_cv: float) -> float:
        """Squared standard error of log(mean); ``floor_cv``: the least relative spread
        believed (three runs can agree by chance; the study's typical spread is better)."""
        n = len(self.runs)
        cv = statistics.stdev(self.runs) / self.mean if n > 1 else floor_cv
        return max(cv, floor_cv) ** 2 / n


def _expected_excess(d: float, se: float) -> float:
    """E[max(0, X)] for X ~ N(d, se^2)."""
    if se <= 0:
        return max(d, 0.0)
    z = d / se
    return d * float(norm.cdf(z)) + se * float(norm.pdf(z))


@dataclass(frozen=True)
class RaceCall:
    key: str  # the configuration to measure again
    value: float  # expected loss (log tok/s) of the decision this replicate removes
    against: str  # the leader, or the challenger it races


def race(arms: Sequence[Arm], floor_cv: float,
         belief: Mapping[str, tuple[float, float]] | None = None) -> RaceCall | None:
    """The replicate that most reduces the decision's expected loss, or None when there
    is no challenger. The leader is the best pooled mean (the verdict's pick).
    ``belief``: the model's posterior (mean, sd) of log tok/s per configuration; it knows
    what a configuration's neighbours say, so a good configuration measured low once
    still challenges. Without it, the pooled runs alone."""
    if len(arms) < 2:
        return None
    lead = max(arms, key=lambda a: a.mean)

    def post(a: Arm) -> tuple[float, float]:
        if belief is not None and a.key in belief:
            return belief[a.key]
        return math.log(a.mean), math.sqrt(a.se2(floor_cv))

    ml, sl = post(lead)
    per_trial = min(len(a.runs) for a in arms)  # what one more trial adds, in runs
    rivals = sorted((a for a in arms if a.key != lead.key), key=lambda a: post(a)[0],
                    reverse=True)[:CHALLENGERS]
    best: RaceCall | None = None
    for c in rivals:
        mc, sc = post(c)
        d = mc - ml - INDIFFERENCE
        # measure the less measured of the two: it shrinks the difference's interval most
        pick, other = (lead, c) if lead.se2(floor_cv) >= c.se2(floor_cv) else (c, lead)
        shrink = len(pick.runs) / (len(pick.runs) + per_trial)
        s_now = math.sqrt(sl**2 + sc**2)
        s_after = math.sqrt((sl**2 * shrink + sc**2) if pick is lead else (sl**2 + sc**2 * shrink))
        # the value of the replicate: how much of the decision's expected loss it removes
        value = _expected_excess(d, s_now) - _expected_excess(d, s_after)
        if best is None or value > best.value:
            best = RaceCall(pick.key, value, other.key)
    return best


def study_spread(arms: Sequence[Arm]) -> float:
    """Median relative spread of runs over configurations measured more than once."""
    cvs = [statistics.stdev(a.runs) / a.mean for a in arms if len(a.runs) > 1 and a.mean > 0]
    return statistics.median(cvs) if cvs else 0.05


# A longer benchmark of the server already up costs seconds; a restart costs minutes. So a
# configuration that could change the pick is measured longer on the same start, a batch
# of runs at a time, while one more batch is expected to remove at least this much of the
# decision's expected loss (log tok/s; 0.00001 ~ 0.001% of tok/s per batch: through ~14%
# run-to-run spread, separating configurations 1% apart takes a few hundred runs each).
# The runs it costs are counted by bench/search_efficiency.py (column "runs");
# benchmark.max_runs caps them per start.
EXTEND_VALUE = 0.00001


def worth_more_runs(mine: Sequence[float], others: Sequence[Arm], floor_cv: float,
                    batch: int) -> bool:
    """Whether ``batch`` more runs of the configuration being measured (``mine``: its runs
    so far, earlier trials' and this start's) are worth their time: it and the best of
    ``others`` (pooled runs of every other configuration) are close enough that the pick
    between them is uncertain, and ``batch`` more runs shrink that uncertainty enough
    (value of information; a leader measured too little to compare with gives little)."""
    if not mine or not others or batch < 1:
        return False
    me = Arm("", tuple(mine))
    lead = max(others, key=lambda a: a.mean)
    s_lead2, s_me2 = lead.se2(floor_cv), me.se2(floor_cv)
    d = -abs(math.log(me.mean) - math.log(lead.mean)) - INDIFFERENCE
    cv2 = s_me2 * len(mine)  # the per-run relative variance it believes
    now = _expected_excess(d, math.sqrt(s_me2 + s_lead2))
    after = _expected_excess(d, math.sqrt(cv2 / (len(mine) + batch) + s_lead2))
    return now - after > EXTEND_VALUE
