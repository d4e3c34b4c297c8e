"""Two-level statistics (runs within server starts) on synthetic data with known truth."""

from __future__ import annotations

import math
import random

import pytest

from sweeper.measure.stats import (
    START_PRIOR_SD,
    consistent_starts,
    paired_log_ratio,
    se2_after,
    speedup_starts,
    start_variance,
    summarize,
    two_level,
)


def _config(rng: random.Random, mu: float, starts: int, runs: int, tau: float,
            sigma: float) -> list[list[float]]:
    out = []
    for _ in range(starts):
        b = rng.gauss(0, tau)
        out.append([math.exp(math.log(mu) + b + rng.gauss(0, sigma)) for _ in range(runs)])
    return out


@pytest.mark.parametrize("tau", [0.0, 0.015, 0.04])
def test_start_variance_recovers_a_known_between_start_variance(tau: float) -> None:
    rng = random.Random(7)
    groups = [_config(rng, rng.uniform(50, 150), rng.randint(2, 4), rng.randint(3, 30),
                      tau, 0.05) for _ in range(60)]
    est = start_variance(groups, prior_df=0)
    assert est.configs == 60
    assert est.sd == pytest.approx(tau, abs=0.004)


def test_the_prior_holds_until_configurations_have_two_starts() -> None:
    rng = random.Random(1)
    one_start_each = [_config(rng, 100, 1, 20, 0.03, 0.05) for _ in range(10)]
    est = start_variance(one_start_each)
    assert est.configs == 0 and est.sd == pytest.approx(START_PRIOR_SD)
    many = one_start_each + [_config(rng, 100, 3, 20, 0.0, 0.05) for _ in range(40)]
    assert start_variance(many).sd < START_PRIOR_SD / 2  # the evidence outweighs it


def test_two_level_interval_covers_the_truth_where_pooled_runs_do_not() -> None:
    """200 runs on one start: the pooled t-interval is ~1% wide and misses a start 3%
    off most of the time; the two-level interval keeps the start's variance."""
    rng = random.Random(3)
    tau, sigma, truth = 0.03, 0.05, 100.0
    covered_two = covered_pooled = 0
    trials = 400
    for _ in range(trials):
        starts = _config(rng, truth, 2, 100, tau, sigma)
        tl = two_level(starts, tau**2)
        covered_two += tl.ci_low <= truth <= tl.ci_high
        pooled = summarize([v for s in starts for v in s])
        covered_pooled += pooled.ci_low <= truth <= pooled.ci_high
    assert 0.91 <= covered_two / trials <= 0.98
    assert covered_pooled / trials < 0.6


def test_more_runs_on_one_start_stop_paying_once_the_start_dominates() -> None:
    rng = random.Random(5)
    starts = _config(rng, 100, 1, 50, 0.0, 0.05)
    tau2 = 0.02**2
    now = se2_after(starts, tau2, 0.05)
    longer = se2_after(starts, tau2, 0.05, more_runs=50)
    replicate = se2_after(starts, tau2, 0.05, new_start=10)
    assert now > tau2 and longer > tau2  # never below the start's own variance
    assert now - longer < 0.2 * (now - replicate)  # a new start is worth far more
    # without a between-start variance, runs are runs wherever they are made
    assert se2_after(starts, 0.0, 0.05, more_runs=50) == pytest.approx(
        se2_after(starts, 0.0, 0.05, new_start=50))


def test_speedup_includes_the_start_variance() -> None:
    # (how sure, on two levels: tests/test_sure.py)
    lead = [[101 * (1 + 0.05 * (-1) ** i) for i in range(200)]]  # one start each
    rival = [[100 * (1 + 0.05 * (-1) ** i) for i in range(200)]]
    wide = speedup_starts(lead, rival, 0.02**2)
    narrow = speedup_starts(lead, rival, 0.0)
    assert wide.low < narrow.low < narrow.high < wide.high


def test_paired_comparison_removes_the_prompts_own_spread() -> None:
    rng = random.Random(2)
    prompt = [math.exp(rng.gauss(0, 0.10)) for _ in range(24)]  # prompts 10% apart
    a = [(j, 101 * prompt[j] * math.exp(rng.gauss(0, 0.01))) for j in range(24)]
    b = [(j, 100 * prompt[j] * math.exp(rng.gauss(0, 0.01))) for j in range(24)]
    d, se, n = paired_log_ratio(a, b) or (0, 0, 0)
    assert n == 24 and d == pytest.approx(math.log(1.01), abs=0.008) and se < 0.005
    unpaired = math.sqrt(summarize([v for _, v in a]).rel_stdev ** 2 * 2 / 24)
    assert se < unpaired / 5
    # the order the prompts came in does not change the comparison
    assert paired_log_ratio(list(reversed(a)), b) == pytest.approx((d, se, n))
    assert paired_log_ratio(a[:1], b) is None


def test_a_lucky_start_is_left_out_of_a_pool_with_fresh_starts() -> None:
    fresh = [[100.0, 104.0, 96.0], [101.0, 97.0, 103.0]]
    sweep = [[150.0, 150.0], [102.0, 99.0]]  # a start 50% high, and an ordinary one
    kept = consistent_starts(fresh, sweep, 0.02**2)
    assert kept == [[102.0, 99.0]]
    assert consistent_starts([], sweep, 0.02**2) == sweep
