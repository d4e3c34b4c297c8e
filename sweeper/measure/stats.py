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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from sweeper.measure.dists import chi2_quantile, norm_cdf, t_quantile

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
    half = t_quantile(0.5 + CONFIDENCE / 2, n - 1) * sd / math.sqrt(n)
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
    t = t_quantile(0.5 + CONFIDENCE / 2, df)
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
        p *= float(norm_cdf(d / se)) if se > 0 else float(d >= 0)
    return p


# --------------------------------------------------------------------------- two levels
#
# Runs on one server start share that start's speed: real restarts of one setting differ by
# a few percent (allocation, clocks, placement), so a hundred runs on one start pin down
# that start's mean, not the configuration's. Two levels, on the log scale (throughput
# errors are relative): log y = mu_config + b_start + e_run, b ~ N(0, tau^2) shared by a
# start's runs, e ~ N(0, sigma^2). tau^2 is pooled over every configuration measured on two
# starts or more (one-way random-effects ANOVA, method of moments), starting from a prior.

# Before any configuration has two starts: restarts a couple of percent apart (public
# reports of fresh restarts of one setting), worth this many degrees of freedom of evidence.
START_PRIOR_SD = 0.02
START_PRIOR_DF = 2.0
Z95 = 1.959963984540054

Starts = Sequence[Sequence[float]]  # one configuration: its runs, start by start


def add_start(starts: list[list[float]], runs: Sequence[float], reused: bool) -> None:
    """A trial's runs as a new server start, or on the previous start when the trial
    reused the server still running its configuration (its start-up took 0 s)."""
    if starts and reused:
        starts[-1] = [*starts[-1], *runs]
    else:
        starts.append(list(runs))


def _logs(starts: Starts) -> list[list[float]]:
    return [[math.log(v) for v in s if v > 0] for s in starts if any(v > 0 for v in s)]


def noise_measured(groups: Sequence[Starts]) -> bool:
    """Whether the runs say anything about their own noise: a start of two runs or more,
    or a configuration on two starts or more. With one run on one start each (a study's
    ``benchmark.runs: 1``, before any replicate), the spread between two configurations
    rests on the between-start prior alone, which leaves out the run-to-run noise, so no
    probability is stated from it."""
    return any(len(s) > 1 for starts in groups for s in _logs(starts)) or \
        any(len(_logs(starts)) > 1 for starts in groups)


def within_variance(groups: Sequence[Starts], floor_cv: float = 0.0) -> float:
    """Run-to-run variance of log tok/s within a start, pooled over every start of two
    runs or more (at least ``floor_cv`` squared); ``floor_cv`` squared without any."""
    ss, df = 0.0, 0
    for starts in groups:
        for s in _logs(starts):
            if len(s) > 1:
                m = statistics.fmean(s)
                ss += sum((x - m) ** 2 for x in s)
                df += len(s) - 1
    return max(ss / df, floor_cv**2) if df else floor_cv**2


@dataclass(frozen=True)
class StartVariance:
    """The between-start variance of log tok/s (``tau2``) and what it rests on."""

    tau2: float
    configs: int  # configurations measured on two starts or more
    df: float  # degrees of freedom of the evidence, the prior's included
    prior_sd: float = START_PRIOR_SD  # the guess it starts from, and its weight in df
    prior_df: float = START_PRIOR_DF

    @property
    def sd(self) -> float:
        """The between-start spread as a relative figure (0.015: 1.5%)."""
        return math.sqrt(self.tau2)

    def sd_interval(self) -> tuple[float, float]:
        """A 95% interval of ``sd``, as for a variance on ``df`` degrees of freedom (the
        scaled chi-square of a pooled variance; the method of moments' estimate is only
        roughly that, so the interval is a guide to how much the figure rests on)."""
        if self.df <= 0 or self.tau2 <= 0:
            return (0.0, math.inf)
        lo = self.tau2 * self.df / chi2_quantile(0.5 + CONFIDENCE / 2, self.df)
        hi = self.tau2 * self.df / chi2_quantile(0.5 - CONFIDENCE / 2, self.df)
        return (math.sqrt(lo), math.sqrt(hi))


def start_variance(groups: Sequence[Starts], prior_sd: float = START_PRIOR_SD,
                   prior_df: float = START_PRIOR_DF) -> StartVariance:
    """tau^2 pooled over the configurations of ``groups`` measured on two starts or more:
    each gives (MSB - MSW) / n0 on k - 1 degrees of freedom (unbalanced one-way ANOVA,
    unbiased, may be negative alone), averaged with the prior's ``prior_df`` degrees of
    freedom; never below 0."""
    sigma2 = within_variance(groups)
    num, den, configs = prior_df * prior_sd**2, prior_df, 0
    for starts in groups:
        logs = _logs(starts)
        k = len(logs)
        if k < 2:
            continue
        sizes = [len(s) for s in logs]
        n = sum(sizes)
        means = [statistics.fmean(s) for s in logs]
        grand = sum(m * c for m, c in zip(means, sizes, strict=True)) / n
        msb = sum(c * (m - grand) ** 2 for m, c in zip(means, sizes, strict=True)) / (k - 1)
        ssw = sum((x - m) ** 2 for s, m in zip(logs, means, strict=True) for x in s)
        msw = ssw / (n - k) if n > k else sigma2
        n0 = (n - sum(c * c for c in sizes) / n) / (k - 1)
        num += (k - 1) * (msb - msw) / n0
        den += k - 1
        configs += 1
    if den <= 0:
        return StartVariance(0.0, 0, 0.0, prior_sd, prior_df)
    return StartVariance(max(num / den, 0.0), configs, den, prior_sd, prior_df)


@dataclass(frozen=True)
class TwoLevel:
    """One configuration's tok/s from its starts: each start's mean weighted by how much
    it says (1 / (tau^2 + sigma^2 / runs)); ``se`` is the relative standard error of the
    estimate, the between-start variance included."""

    mean: float
    se: float
    starts: int
    runs: int

    @property
    def ci_low(self) -> float:
        return self.mean * math.exp(-Z95 * self.se)

    @property
    def ci_high(self) -> float:
        return self.mean * math.exp(Z95 * self.se)


def _weights(sizes: Sequence[int], tau2: float, sigma2: float) -> list[float]:
    return [1.0 / (tau2 + sigma2 / c) if tau2 + sigma2 > 0 else math.inf for c in sizes]


def _positive(starts: Starts) -> list[list[float]]:
    groups = [[float(v) for v in s if v > 0] for s in starts]
    return [g for g in groups if g]


def two_level(starts: Starts, tau2: float, floor_cv: float = 0.0) -> TwoLevel:
    """The configuration's mean over its starts and its relative standard error.

    sigma^2 is the configuration's own within-start variance (at least ``floor_cv``^2: a
    few runs can agree by chance). With one start the error never falls below tau: more
    runs on the same start cannot tell its speed from the configuration's."""
    groups = _positive(starts)
    if not groups:
        raise ValueError("two_level() needs at least one run")
    sigma2 = within_variance([groups], floor_cv)
    sizes = [len(g) for g in groups]
    w = _weights(sizes, tau2, sigma2)
    means = [statistics.fmean(g) for g in groups]
    total = sum(w)
    if math.isinf(total):  # no variance at all: the plain pooled mean
        flat = [v for g in groups for v in g]
        return TwoLevel(statistics.fmean(flat), 0.0, len(groups), len(flat))
    mean = sum(wi * m for wi, m in zip(w, means, strict=True)) / total
    return TwoLevel(mean, math.sqrt(1.0 / total), len(groups), sum(sizes))


def se2_after(starts: Starts, tau2: float, floor_cv: float, *, more_runs: int = 0,
              new_start: int = 0) -> float:
    """The squared relative standard error after ``more_runs`` runs on the last start
    (measured longer) or a new start of ``new_start`` runs (a replicate)."""
    groups = _positive(starts)
    sigma2 = within_variance([groups], floor_cv)
    sizes = [len(g) for g in groups]
    if more_runs and sizes:
        sizes[-1] += more_runs
    if new_start:
        sizes.append(new_start)
    total = sum(_weights(sizes, tau2, sigma2)) if sizes else 0.0
    return 1.0 / total if total > 0 else math.inf


def speedup_starts(a: Starts, b: Starts, tau2: float, floor_cv: float = 0.0) -> Ratio:
    """Speedup of ``a`` over ``b`` with a 95% interval that includes the between-start
    variance of both."""
    ta, tb = two_level(a, tau2, floor_cv), two_level(b, tau2, floor_cv)
    ratio = ta.mean / tb.mean
    se = math.hypot(ta.se, tb.se)
    return Ratio(ratio, ratio * math.exp(-Z95 * se), ratio * math.exp(Z95 * se))


def paired_log_ratio(a: Sequence[tuple[int, float]], b: Sequence[tuple[int, float]]
                     ) -> tuple[float, float, int] | None:
    """Prompt by prompt: the mean over the prompt positions both were measured on of
    log(mean of a there) - log(mean of b there), its standard error, and how many
    positions; None with fewer than two in common. ``a``/``b``: (position, tok/s) per run.
    What makes one prompt easier than another cancels: only the configurations differ."""
    def by_pos(xs: Sequence[tuple[int, float]]) -> dict[int, list[float]]:
        out: dict[int, list[float]] = {}
        for pos, v in xs:
            if v > 0:
                out.setdefault(pos, []).append(v)
        return out

    pa, pb = by_pos(a), by_pos(b)
    common = sorted(set(pa) & set(pb))
    if len(common) < 2:
        return None
    diffs = [math.log(statistics.fmean(pa[j])) - math.log(statistics.fmean(pb[j]))
             for j in common]
    return statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs)), \
        len(common)


def prompt_effects(groups: Sequence[Sequence[tuple[int, float]]], shrink: float = 2.0,
                   rounds: int = 3) -> dict[int, float]:
    """Each prompt position's effect on log tok/s, shared by the configurations of
    ``groups`` (each a configuration's (position, tok/s) runs): what a prompt adds to every
    configuration measured on it, estimated around each configuration's own mean
    (alternating a few rounds) and shrunk towards 0 by ``shrink`` runs' worth of prior
    (a position seen once says little); centred on the positions seen.

    Dividing a run by exp(effect) compares configurations prompt by prompt: one measured
    longer on harder prompts is not ranked down for it, and the prompts' own spread
    leaves the run-to-run variance."""
    logs = [[(p, math.log(v)) for p, v in g if v > 0] for g in groups]
    logs = [g for g in logs if g]
    eff: dict[int, float] = {}
    for _ in range(rounds):
        sums: dict[int, float] = {}
        counts: dict[int, int] = {}
        for g in logs:
            mu = statistics.fmean(x - eff.get(p, 0.0) for p, x in g)
            for p, x in g:
                sums[p] = sums.get(p, 0.0) + x - mu
                counts[p] = counts.get(p, 0) + 1
        eff = {p: sums[p] / (counts[p] + shrink) for p in sums}
        if eff:
            centre = statistics.fmean(eff.values())
            eff = {p: e - centre for p, e in eff.items()}
    return eff


def _placed(positions: Sequence[tuple[int, float]], starts: Starts) -> bool:
    """Whether ``positions`` places every run of ``starts`` (one each, in order): a trial
    that did not record where its runs started leaves its configuration unplaced."""
    return bool(positions) and len(positions) == sum(len(s) for s in starts)


def shared_prompt_effects(groups: Sequence[Sequence[tuple[int, float]]]) -> dict[int, float]:
    """``prompt_effects`` over the configurations of ``groups`` that placed any run; none
    ({}) below two, where a prompt's effect could not be told from the configuration's own
    speed. The verdict, the model and the confirm phase all compare prompt by prompt
    through this and ``without_prompt_effects``."""
    placed = [list(g) for g in groups if g]
    return prompt_effects(placed) if len(placed) > 1 else {}


def without_prompt_effects(positions: Sequence[tuple[int, float]], starts: Starts,
                           effects: Mapping[int, float]) -> list[list[float]]:
    """A configuration's runs by start with each prompt's shared effect (``prompt_effects``)
    divided out. ``positions``: (position, tok/s) of every run, in the order of ``starts``
    flattened; runs not all placed (or no effects) come back as they are, copied."""
    if not effects or not _placed(positions, starts):
        return [list(s) for s in starts]
    adjusted = [v * math.exp(-effects.get(p, 0.0)) for p, v in positions]
    sizes = [len(s) for s in starts]
    return [adjusted[sum(sizes[:i]):sum(sizes[:i + 1])] for i in range(len(sizes))]


def consistent_starts(reference: Starts, candidates: Starts, tau2: float,
                      floor_cv: float = 0.0, z: float = 3.0) -> list[list[float]]:
    """The starts of ``candidates`` whose mean agrees with ``reference``'s two-level
    estimate within ``z`` standard errors (the reference's error, the between-start
    variance and the start's own run noise). A sweep's start that led because it was
    lucky far beyond what starts differ by (the winner's curse) is left out of a pool
    with fresh, unselected starts; the others join it."""
    ref_groups = _positive(reference)
    if not ref_groups:
        return [list(s) for s in candidates]
    ref = two_level(ref_groups, tau2, floor_cv)
    sigma2 = within_variance([ref_groups, candidates], floor_cv)
    out = []
    for s in _positive(candidates):
        se = math.sqrt(ref.se**2 + tau2 + sigma2 / len(s))
        if abs(math.log(statistics.fmean(s)) - math.log(ref.mean)) <= z * se:
            out.append(s)
    return out
