"""Racing: replicates where they change the decision, and how sure the pick is.

Pure statistics on pooled runs (log scale: throughput errors are relative). The leader is
the best pooled mean, as the verdict picks it (results/verdict.py). A challenger whose
interval overlaps the leader's may truly be the better one; the expected loss of keeping
the leader, ``E[max(0, mu_j - mu_leader)]``, is what one more measurement of the less
measured of the two can recover. The sampler weighs it against what exploring a new
configuration is expected to gain (expected improvement), in the same units.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import norm

CHALLENGERS = 4  # beyond the top few, a replicate almost never changes the pick


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
    value: float  # expected log tok/s the decision may be losing
    against: str  # the leader, or the challenger it races


def race(arms: Sequence[Arm], floor_cv: float) -> RaceCall | None:
    """The replicate that most reduces the decision's expected loss, or None when the
    leader's interval overlaps no challenger's."""
    if len(arms) < 2:
        return None
    ranked = sorted(arms, key=lambda a: a.mean, reverse=True)
    lead = ranked[0]
    best: RaceCall | None = None
    for c in ranked[1:1 + CHALLENGERS]:
        d = math.log(c.mean) - math.log(lead.mean)
        se_l, se_c = lead.se2(floor_cv), c.se2(floor_cv)
        loss = _expected_excess(d, math.sqrt(se_l + se_c))
        # measuring the noisier of the two shrinks the interval of the difference most
        pick, other = (lead, c) if se_l >= se_c else (c, lead)
        if best is None or loss > best.value:
            best = RaceCall(pick.key, loss, other.key)
    return best


def p_within(best: Arm, others: Sequence[Arm], tol: float, floor_cv: float) -> float:
    """Estimated probability that ``best`` is truly within ``tol`` of every other
    configuration measured (normal approximation on the log of pooled means; independent
    comparisons multiplied, which errs on the side of less sure)."""
    p = 1.0
    for o in others:
        if o.key == best.key:
            continue
        d = math.log(best.mean) - math.log(o.mean) - math.log(1.0 - tol)
        se = math.sqrt(best.se2(floor_cv) + o.se2(floor_cv))
        p *= float(norm.cdf(d / se)) if se > 0 else float(d >= 0)
    return p


def study_spread(arms: Sequence[Arm]) -> float:
    """Median relative spread of runs over configurations measured more than once."""
    cvs = [statistics.stdev(a.runs) / a.mean for a in arms if len(a.runs) > 1 and a.mean > 0]
    return statistics.median(cvs) if cvs else 0.05
