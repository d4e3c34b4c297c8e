"""How sure the pick is: the probability that it is truly within ``tol`` of every other
configuration measured.

Pure functions on each configuration's two-level estimate (measure/stats.two_level: log
tok/s and its standard error, the between-start variance included), unit-tested on
synthetic sweeps with a known truth (tests/test_sure.py). Two things make the pairwise
normal approximation (each pair's difference on its own, the pairs multiplied) a poor
probability after a sweep:

* **The winner's curse, and rivals that look far apart.** The pick is the largest of many
  noisy estimates, so its own is biased upwards; a rival measured on one start carries a
  standard error as large as the gaps the sweep chases, and a flat prior reads that as "its
  true speed may be anywhere within it". Both come from ignoring how far apart the
  configurations in contention truly are. An empirical-Bayes normal prior on their true log
  tok/s (mean and spread fitted to their estimates by maximum marginal likelihood, each
  estimate's own error taken out: ``fit_prior``) shrinks every estimate towards the others
  in proportion to its noise (``shrink``): a lucky start's lead shrinks as far as its error
  allows, and rivals whose estimates differ by no more than their errors come back
  together.
* **The rivals are compared with the same pick.** Given the pick's true speed the
  comparisons are independent, so the probability is one integral over the pick's
  posterior (``p_best_within``: Gauss-Hermite, deterministic), not a product of pairs that
  each draw the pick again.

Which configurations are in contention (``contenders``): those whose estimate is within
``CONTENTION_Z`` standard errors of the difference (plus the tolerance) below the pick's;
the rest cannot change the answer and would only widen the prior with the landscape's
slow corners. They still enter the integral, unshrunk.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sweeper.measure.dists import norm_logcdf
from sweeper.measure.stats import Starts, two_level, within_variance

# A rival this many standard errors (of the difference, beyond the tolerance) below the
# pick cannot overtake it: it stays out of the prior's fit (it would only report how wide
# the whole landscape is, not how far apart the leaders are)
CONTENTION_Z = 3.0
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(64)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()
_ROUNDS = 200  # fixed-point rounds of the prior's fit (converges in tens)
_GRID = 41  # spreads of the truths weighed (prior_spreads): fine against their posterior


@dataclass(frozen=True)
class Estimate:
    """A configuration's log tok/s and its standard error."""

    log_mean: float
    se: float


@dataclass(frozen=True)
class Prior:
    """A normal prior on the true log tok/s of the configurations in contention."""

    mean: float
    var: float


def fit_prior(estimates: Sequence[Estimate]) -> Prior | None:
    """The normal prior N(mean, var) that makes ``estimates`` most likely, each drawn from
    it plus its own error (maximum marginal likelihood, heteroscedastic: Efron and Morris's
    fixed point); None with fewer than three (two say nothing about a spread)."""
    if len(estimates) < 3:
        return None
    m = np.array([e.log_mean for e in estimates])
    s2 = np.array([e.se**2 for e in estimates])
    var = max(float(m.var()) - float(s2.mean()), 0.0)
    mean = float(m.mean())
    for _ in range(_ROUNDS):
        w = 1.0 / np.maximum(var + s2, 1e-300)
        mean = float((w * m).sum() / w.sum())
        new = max(float((w**2 * ((m - mean) ** 2 - s2)).sum() / (w**2).sum()), 0.0)
        if abs(new - var) <= 1e-12 * max(var, 1e-12):
            var = new
            break
        var = new
    return Prior(mean, var)


def prior_spreads(estimates: Sequence[Estimate]) -> list[tuple[Prior, float]]:
    """The priors the estimates allow, with their posterior weights: the spread of the
    truths on a grid (uniform prior on the sd, the usual choice for a hierarchical scale:
    Gelman 2006), the mean at its best for each (flat prior on it). A handful of
    contenders pin the spread down poorly; averaging over it, rather than plugging in the
    likeliest one (``fit_prior``), keeps a sweep with few contenders from being sure only
    because they happened to agree. Empty with fewer than three estimates."""
    if len(estimates) < 3:
        return []
    m = np.array([e.log_mean for e in estimates])
    s2 = np.array([e.se**2 for e in estimates])
    top = max(float(np.ptp(m)), float(np.sqrt(s2.max())), 1e-6)
    out: list[tuple[Prior, float]] = []
    logs = []
    for sd in np.linspace(0.0, 2.0 * top, _GRID):
        v = sd**2 + s2
        w = 1.0 / v
        mean = float((w * m).sum() / w.sum())
        # log marginal likelihood of the spread, the mean integrated out (flat)
        logs.append(float(-0.5 * (np.log(v).sum() + ((m - mean) ** 2 * w).sum()
                                 + math.log(w.sum()))))
        out.append((Prior(mean, float(sd**2)), 0.0))
    logs_a = np.array(logs)
    wts = np.exp(logs_a - logs_a.max())
    wts = wts / wts.sum()
    return [(p, float(w)) for (p, _), w in zip(out, wts, strict=True)]


def shrink(e: Estimate, prior: Prior) -> Estimate:
    """The posterior of one configuration's true log tok/s under ``prior``."""
    total = prior.var + e.se**2
    if total <= 0:
        return e
    b = prior.var / total  # how much of the estimate's spread is real
    return Estimate(prior.mean + b * (e.log_mean - prior.mean), math.sqrt(b) * e.se)


def p_best_within(best: Estimate, others: Sequence[Estimate], tol: float) -> float:
    """P(best's true log tok/s >= every other's + log(1 - tol)), the configurations'
    posteriors independent: one integral over ``best``'s, every rival's normal cdf
    inside."""
    if not others:
        return 1.0
    x = best.log_mean + best.se * _NODES
    m = np.array([o.log_mean for o in others])[:, None]
    se = np.array([o.se for o in others])[:, None]
    d = x[None, :] - m - math.log(1.0 - tol)
    with np.errstate(divide="ignore", invalid="ignore"):
        # a rival known exactly (se 0): below or not
        log_p = np.where(se > 0, norm_logcdf(d / np.where(se > 0, se, 1.0)),
                         np.where(d >= 0, 0.0, -np.inf)).sum(axis=0)
    return float(np.clip((_WEIGHTS * np.exp(log_p)).sum(), 0.0, 1.0))


def contenders(best: Estimate, others: Sequence[Estimate], tol: float) -> list[bool]:
    """Which of ``others`` could be truly more than ``tol`` faster than ``best``."""
    lim = -math.log(1.0 - tol)
    return [best.log_mean - o.log_mean < lim + CONTENTION_Z * math.hypot(best.se, o.se)
            for o in others]


def p_within_estimates(best: Estimate, others: Sequence[Estimate], tol: float = 0.01
                       ) -> float:
    """How sure the pick ``best`` is to be truly within ``tol`` of every one of
    ``others``: the configurations in contention shrunk under their hierarchical prior
    (the winner's curse), averaged over the spreads their estimates allow
    (``prior_spreads``), the rest as they are, then ``p_best_within``."""
    near = contenders(best, others, tol)
    priors = prior_spreads([best, *(o for o, n in zip(others, near, strict=True) if n)])
    if not priors:
        return p_best_within(best, others, tol)
    return sum(w * p_best_within(shrink(best, prior),
                                 [shrink(o, prior) if n else o
                                  for o, n in zip(others, near, strict=True)], tol)
               for prior, w in priors if w > 1e-9)


def p_within_starts(best: Starts, others: Sequence[Starts], tau2: float,
                    tol: float = 0.01, floor_cv: float | None = None) -> float:
    """``p_within_estimates`` on runs kept by server start: each configuration's estimate from
    ``two_level`` (runs on one start are not independent evidence: ``tau2``, the
    between-start variance). ``floor_cv``: the least within-start spread believed;
    default: the pooled one."""
    if floor_cv is None:
        floor_cv = math.sqrt(within_variance([best, *others]))

    def est(starts: Starts) -> Estimate:
        t = two_level(starts, tau2, floor_cv)
        return Estimate(math.log(t.mean), t.se)

    return p_within_estimates(est(best), [est(o) for o in others], tol)


def posterior_log_means(estimates: Sequence[Estimate], tol: float = 0.01) -> list[float]:
    """Each configuration's expected true log tok/s after the winner's curse: those in
    contention with the highest estimate shrunk towards one another under the spreads
    their estimates allow (as ``p_within_estimates`` does), the rest as measured.

    Ranking by these rather than by the raw means is the Bayes pick under the same
    prior: a configuration whose lead rests on one server start (its error as large as
    the gaps chased) no longer outranks one measured on several starts just below it."""
    if not estimates:
        return []
    top = max(range(len(estimates)), key=lambda i: estimates[i].log_mean)
    near = [i == top or n for i, n in enumerate(
        contenders(estimates[top], estimates, tol))]
    group = [e for e, n in zip(estimates, near, strict=True) if n]
    priors = prior_spreads(group)
    if not priors:
        return [e.log_mean for e in estimates]
    out = []
    for e, n in zip(estimates, near, strict=True):
        out.append(sum(w * shrink(e, p).log_mean for p, w in priors if w > 1e-9) if n
                   else e.log_mean)
    return out
