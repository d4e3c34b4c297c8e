"""Statistics against hand-computed values (t quantiles from tables)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweeper.measure.stats import speedup, summarize

T975_DF2 = 4.302652730  # t table, 0.975 quantile, 2 degrees of freedom
T975_DF3 = 3.182446305


def test_summarize_three_values_by_hand() -> None:
    s = summarize([1.0, 2.0, 3.0])
    assert (s.n, s.mean, s.median, s.stdev, s.min, s.max) == (3, 2.0, 2.0, 1.0, 1.0, 3.0)
    half = T975_DF2 * 1.0 / math.sqrt(3)  # 2.48413771...
    assert s.ci_low == pytest.approx(2.0 - half, rel=1e-9)
    assert s.ci_high == pytest.approx(2.0 + half, rel=1e-9)
    assert s.ci_low == pytest.approx(-0.48413771, abs=1e-8)


def test_summarize_campaign_like_runs() -> None:
    s = summarize([10.0, 12.0, 14.0, 16.0])
    assert s.stdev == pytest.approx(math.sqrt(20 / 3))
    assert s.median == 13.0
    assert s.ci_high - s.mean == pytest.approx(T975_DF3 * math.sqrt(20 / 3) / 2)
    assert s.ci_half_width == pytest.approx(4.1085205, rel=1e-7)


def test_single_value_has_no_interval_and_dict_is_strict_json() -> None:
    s = summarize([93.8])
    assert s.stdev == 0.0 and math.isnan(s.ci_low) and math.isnan(s.ci_high)
    d = s.to_dict()
    assert d["ci_low"] is None and d["mean"] == 93.8
    json.dumps(d, allow_nan=False)


def test_empty_is_an_error() -> None:
    with pytest.raises(ValueError):
        summarize([])


def test_speedup_by_hand() -> None:
    # a: mean 100, sd 10, n 3; b: mean 50, sd 0. Relative se^2 = 100 / (3 * 100^2); df = 2.
    r = speedup([110.0, 100.0, 90.0], [50.0, 50.0, 50.0])
    se = math.sqrt(100 / (3 * 100**2))
    assert r.ratio == 2.0
    assert r.low == pytest.approx(2.0 * math.exp(-T975_DF2 * se), rel=1e-9)
    assert r.high == pytest.approx(2.0 * math.exp(T975_DF2 * se), rel=1e-9)
    assert r.low == pytest.approx(1.560084, rel=1e-5)
    assert r.percent == pytest.approx(100.0)


def test_speedup_undefined_interval_and_zero_spread() -> None:
    r = speedup([94.0], [90.0, 91.0])
    assert r.ratio == pytest.approx(94 / 90.5) and math.isnan(r.low)
    assert r.to_dict()["low"] is None
    same = speedup([2.0, 2.0], [1.0, 1.0])
    assert (same.low, same.ratio, same.high) == (2.0, 2.0, 2.0)


samples = st.lists(st.floats(min_value=1.0, max_value=1e4), min_size=2, max_size=12)


@given(samples, samples)
def test_speedup_interval_contains_ratio_and_inverts(a: list[float], b: list[float]) -> None:
    r, inv = speedup(a, b), speedup(b, a)
    assert r.low <= r.ratio * (1 + 1e-9) and r.ratio <= r.high * (1 + 1e-9)
    assert inv.ratio == pytest.approx(1 / r.ratio, rel=1e-9)
    assert inv.low == pytest.approx(1 / r.high, rel=1e-6)


@given(samples)
def test_summary_bounds(xs: list[float]) -> None:
    s = summarize(xs)
    assert s.min <= s.median <= s.max
    assert s.min - 1e-9 <= s.mean <= s.max + 1e-9
    assert s.ci_low <= s.mean <= s.ci_high
