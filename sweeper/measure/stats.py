"""Statistics for benchmark runs: summaries with a t-interval, and speedup ratios.

Pure functions over plain sequences of floats, so they are unit-tested with hand-computed
values and reused by the sweep (replicates) and the confirm phase (speedup over baseline).

Conventions chosen here, and why:

* ``stdev`` is the sample standard deviation (ddof=1): the runs are a sample of the
  configuration's run-to-run spread, not the whole population.
* One value: ``stdev`` is 0.0 and the interval is ``(nan, nan)``. An interval from one run
  is undefined; NaN says so honestly instead of pretending to a zero-width certainty.
  ``to_dict`` writes NaN as ``None`` so the result is strict JSON.
* ``speedup`` uses the delta method on the log of the ratio of means, with Welch-
  Satterthwaite degrees of freedom. Working on the log scale keeps the interval positive and
  asymmetric like the ratio itself; it is deterministic (no bootstrap seed) and never
  unbounded (Fieller's interval can be, when the denominator's mean is near zero, which
  throughput never is).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from scipy import stats as _st

CONFIDENCE = 0.95


def _json_float(x: float) -> float | None:
    return None if math.isnan(x) else x


@dataclass(frozen=True)
class Stats:
    """Summary of a sample. ``ci_low``/``ci_high``: 95% t-interval of the mean."""

    n: int
    mean: float
    median: float
    stdev: float
    min: float
    max: float
    ci_low: float
    ci_high: float

    @property
    def ci_half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2

    @property
    def rel_stdev(self) -> float:
        """Coefficient of variation (stdev / mean); NaN when the mean is 0."""
        return self.stdev / self.mean if self.mean else math.nan

    def to_dict(self) -> dict[str, float | int | None]:
        return {k: (_json_float(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def summarize(values: Sequence[float]) -> Stats:
    """Mean, median, sample stdev, min, max and the 95% t-interval of the mean.

    >>> summarize([1.0, 2.0, 3.0]).ci_low  # 2 - t(0.975, 2) * 1 / sqrt(3)
    -0.4841...
    """
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        raise ValueError("summarize() needs at least one value")
    mean = statistics.fmean(xs)
    if n == 1:
        return Stats(1, mean, mean, 0.0, mean, mean, math.nan, math.nan)
    sd = statistics.stdev(xs)
    half = float(_st.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * sd / math.sqrt(n)
    return Stats(n, mean, statistics.median(xs), sd, min(xs), max(xs), mean - half, mean + half)


@dataclass(frozen=True)
class Ratio:
    """Ratio of means a/b with a 95% interval (NaN bounds when either side has n < 2)."""

    ratio: float
    low: float
    high: float

    @property
    def percent(self) -> float:
        """The ratio as a percentage change: 1.059 -> +5.9."""
        return (self.ratio - 1.0) * 100.0

    def to_dict(self) -> dict[str, float | None]:
        return {k: _json_float(v) for k, v in asdict(self).items()}


def speedup(a: Sequence[float], b: Sequence[float]) -> Ratio:
    """Speedup of ``a`` over ``b``: mean(a) / mean(b), with a 95% interval.

    The interval comes from the delta method on log(mean a) - log(mean b):
    se^2 = s_a^2 / (n_a mean_a^2) + s_b^2 / (n_b mean_b^2), t quantile with Welch-Satterthwaite
    degrees of freedom, bounds exp(log ratio -/+ t * se). Both samples must have positive means.
    """
    sa, sb = summarize(a), summarize(b)
    if sa.mean <= 0 or sb.mean <= 0:
        raise ValueError("speedup() needs positive means")
    ratio = sa.mean / sb.mean
    if sa.n < 2 or sb.n < 2:
        return Ratio(ratio, math.nan, math.nan)
    va = sa.stdev**2 / (sa.n * sa.mean**2)  # squared relative standard error of mean(a)
    vb = sb.stdev**2 / (sb.n * sb.mean**2)
    se = math.sqrt(va + vb)
    if se == 0.0:
        return Ratio(ratio, ratio, ratio)
    df = (va + vb) ** 2 / (va**2 / (sa.n - 1) + vb**2 / (sb.n - 1))
    t = float(_st.t.ppf(0.5 + CONFIDENCE / 2, df))
    return Ratio(ratio, ratio * math.exp(-t * se), ratio * math.exp(t * se))


def p_within(best: Sequence[float], others: Sequence[Sequence[float]], tol: float = 0.01,
             spread: float | None = None) -> float:
    """Estimated probability that ``best``'s true mean is within ``tol`` of (or above)
    every one of ``others``' true means: a normal approximation on the log of each pair's
    ratio of means, pairs multiplied as if independent (which errs towards less sure).
    ``spread``: a relative run-to-run spread to assume at least (a few runs can agree by
    chance); default: the median over the samples of two runs or more."""
    samples = [best, *others]
    if spread is None:
        cvs = [statistics.stdev(s) / statistics.fmean(s) for s in samples
               if len(s) > 1 and statistics.fmean(s) > 0]
        spread = statistics.median(cvs) if cvs else 0.0

    def se2(xs: Sequence[float]) -> float:
        m = statistics.fmean(xs)
        cv = statistics.stdev(xs) / m if len(xs) > 1 else spread
        return max(cv, spread) ** 2 / len(xs)

    p = 1.0
    mb = statistics.fmean(best)
    for o in others:
        d = math.log(mb) - math.log(statistics.fmean(o)) - math.log(1.0 - tol)
        se = math.sqrt(se2(best) + se2(o))
        p *= float(_st.norm.cdf(d / se)) if se > 0 else float(d >= 0)
    return p
