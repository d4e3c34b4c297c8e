"""The simulator's pure performance model: calibration, SGLang's rules, failures, noise."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pytest

from sweeper.sim import expected_throughput, load_profile
from sweeper.sim.engine import NoiseSource
from sweeper.sim.model import (
    AcceptPattern,
    accept_distribution,
    depth_candidates,
    mean_accept_length,
    resolve_config,
)
from sweeper.sim.profiles import PROFILE_DIR, ProfileError

KIMI = "kimi-k2.5-8xh200"


def eagle(steps: int, topk: int = 1, draft: int | None = None, **extra: object) -> dict:
    args = {
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": steps,
        "speculative-eagle-topk": topk,
        "speculative-num-draft-tokens": draft if draft is not None else steps + 1,
    }
    args.update(extra)
    return args


@pytest.mark.parametrize(
    ("args", "design_tok_s"),
    [
        ({}, 90.0),
        (eagle(5, 1, 6, **{"speculative-draft-tp-size": 8}), 71.3),
        (eagle(2, 1, 3), 94.0),
        (eagle(1, 1, 2), 93.6),
        (eagle(3, 1, 4), 87.0),
    ],
)
def test_kimi_reproduces_the_campaign_within_3_percent(args: dict, design_tok_s: float) -> None:
    got = expected_throughput(KIMI, args, {})
    assert got.failure is None
    assert got.tok_s == pytest.approx(design_tok_s, rel=0.03)


def test_kimi_accept_lengths_follow_per_depth_acceptance() -> None:
    lengths = [expected_throughput(KIMI, eagle(s), {}).accept_length for s in range(1, 6)]
    assert lengths == pytest.approx([1.60, 1.90, 2.035, 2.089, 2.108], abs=0.01)
    assert 2.0 <= lengths[4] <= 2.3  # the campaign's 5 steps / 6 tokens


def test_topk_one_forces_draft_tokens_to_steps_plus_one() -> None:
    got = expected_throughput(KIMI, eagle(2, 1, 9), {})
    assert got.config is not None and got.config.draft_tokens == 3
    assert got.tok_s == expected_throughput(KIMI, eagle(2, 1, 3), {}).tok_s
    assert "adjusted" in got.config.warnings[0]


def test_string_values_and_dashes_are_accepted() -> None:
    as_str = {k: str(v) for k, v in eagle(2).items()}
    assert expected_throughput(KIMI, as_str, {}).tok_s == expected_throughput(
        KIMI, eagle(2), {}).tok_s


def test_steps_topk_draft_all_or_none() -> None:
    got = expected_throughput(KIMI, {"speculative-algorithm": "EAGLE3",
                                     "speculative-eagle-topk": 2}, {})
    assert got.failure == "invalid_args" and got.tok_s is None
    assert got.reason == "AssertionError"  # SGLang 0.5.23's bare assert
    # steps and topk without draft tokens: accepted, topk 1 sets steps + 1
    cfg = resolve_config(load_profile(KIMI), {"speculative-algorithm": "EAGLE3",
                                              "speculative-num-steps": 2,
                                              "speculative-eagle-topk": 1}, {})
    assert (cfg.steps, cfg.topk, cfg.draft_tokens) == (2, 1, 3) and cfg.warnings
    # none at all: SGLang's default (3, 1, 4)
    cfg = resolve_config(load_profile(KIMI), {"speculative-algorithm": "eagle3"}, {})
    assert (cfg.steps, cfg.topk, cfg.draft_tokens) == (3, 1, 4)


def test_draft_tp_must_divide_tp() -> None:
    got = expected_throughput("demo", eagle(2, **{"speculative-draft-tp-size": 3}), {})
    assert got.failure == "invalid_args"


def test_collnet_fails_like_nccl_and_unknown_values_too() -> None:
    for env in ({"NCCL_ALGO": "CollNetDirect"}, {"NCCL_PROTO": "Bogus"}):
        got = expected_throughput("demo", eagle(2), env)
        assert got.failure == "nccl", env


def test_documented_hang_setting() -> None:
    hang = expected_throughput(
        "demo", eagle(2, **{"speculative-draft-tp-size": 1}), {"NCCL_ALGO": "NVLSTree"})
    assert hang.failure == "hang"
    assert expected_throughput("demo", eagle(2), {"NCCL_ALGO": "NVLSTree"}).failure is None


def test_big_trees_run_out_of_memory_and_smaller_graphs_fix_it() -> None:
    big = eagle(6, 4, 16)
    assert expected_throughput("demo", big, {}).failure == "oom"
    assert expected_throughput("demo", {**big, "cuda-graph-max-bs": 16}, {}).failure is None
    low = expected_throughput("demo", {"mem-fraction-static": 0.3}, {})
    assert low.failure == "oom" and "mem-fraction-static" in low.reason


def _demo_space() -> list[tuple[float, tuple]]:
    results = []
    for steps, topk, draft, dtp in itertools.product(range(1, 7), (1, 2, 4), range(2, 17),
                                                     (1, 4)):
        if (topk == 1 and draft != steps + 1) or draft > steps * topk + 1:
            continue
        for algo, proto in itertools.product(("", "Ring", "Tree"), ("", "LL", "LL128",
                                                                   "Simple")):
            env = {k: v for k, v in (("NCCL_ALGO", algo), ("NCCL_PROTO", proto)) if v}
            got = expected_throughput(
                "demo", eagle(steps, topk, draft, **{"speculative-draft-tp-size": dtp}), env)
            results.append((got.tok_s or 0.0, (steps, topk, draft, dtp, algo, proto)))
    return results


def test_demo_landscape_has_an_interior_optimum_and_failures() -> None:
    results = _demo_space()
    best_tok_s, (steps, topk, draft, _, _, _) = max(results)
    assert 1 < steps < 6 and 2 < draft < 16 and topk == 2
    baseline = expected_throughput("demo", {}, {}).tok_s
    assert baseline is not None and best_tok_s > 1.3 * baseline
    assert any(tok_s == 0.0 for tok_s, _ in results)  # an OOM region inside the space


def test_an_nccl_setting_matters_by_several_percent() -> None:
    args = eagle(3, 2, 7)
    plain = expected_throughput("demo", args, {}).tok_s
    simple = expected_throughput("demo", args, {"NCCL_PROTO": "Simple"}).tok_s
    ll = expected_throughput("demo", args, {"NCCL_PROTO": "LL"}).tok_s
    assert plain and simple and ll
    assert simple < 0.96 * plain and ll > 1.015 * plain


def test_batching_slows_each_request_and_eager_is_slower() -> None:
    one = expected_throughput(KIMI, eagle(2), {}, concurrency=1).tok_s
    four = expected_throughput(KIMI, eagle(2), {}, concurrency=4).tok_s
    eager = expected_throughput(KIMI, {**eagle(2), "disable-cuda-graph": True}, {}).tok_s
    assert one and four and eager
    assert four < one and eager < 0.8 * one


def test_tree_budget_goes_to_the_chain_first() -> None:
    assert depth_candidates(3, 2, 4) == [1, 1, 1]
    assert depth_candidates(3, 2, 7) == [2, 2, 2]
    assert depth_candidates(3, 4, 6) == [3, 1, 1]
    assert depth_candidates(3, 1, 2) == [1]


def test_accept_pattern_has_exact_long_run_proportions() -> None:
    q = [0.6, 0.5, 0.45]
    dist = accept_distribution(q)
    pattern = AcceptPattern(dist)
    counts = [pattern.next() for _ in range(1000)]
    for n, p in enumerate(dist):
        assert abs(counts.count(n) - 1000 * p) <= 1
    assert statistics.fmean(counts) + 1 == pytest.approx(mean_accept_length(q), abs=0.002)


def test_noise_spread_is_seeded_and_sized_like_the_campaign() -> None:
    profile = load_profile(KIMI)
    spreads = []
    for seed in range(200):
        noise = NoiseSource(profile, seed, 1.0)
        speeds = [1.0 / noise.draw()[0] for _ in range(5)]
        spreads.append((max(speeds) - min(speeds)) / statistics.fmean(speeds))
    assert 0.09 < statistics.median(spreads) < 0.18  # campaign: ~14% over 5 runs
    draws = [NoiseSource(profile, 5, 1.0).draw() for _ in range(2)]
    assert draws[0] == draws[1]
    assert NoiseSource(profile, 5, 0.0).draw() == (1.0, 1.0)


def test_profiles_load_by_name_and_path_with_clear_errors(tmp_path: Path) -> None:
    assert load_profile("demo").name == "demo"
    assert load_profile(PROFILE_DIR / "kimi-k2.5-8xh200.yaml").hardware.num_gpus == 8
    with pytest.raises(ProfileError, match="unknown sim profile"):
        load_profile("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text((PROFILE_DIR / "demo.yaml").read_text().replace("fixed_ms", "fwd_ms"))
    with pytest.raises(ProfileError, match="fwd_ms"):
        load_profile(bad)
