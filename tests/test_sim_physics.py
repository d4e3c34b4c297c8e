"""The simulator's batching physics (pure model): a roofline forward, and what follows from it
over the demo study's space at different concurrencies."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from sweeper.sim import Expectation, expected_throughput, load_profile
from sweeper.sim.model import REFERENCE_TOKENS, resolve_config, target_forward_ms

DEMO = load_profile("demo")
KIMI = "kimi-k2.5-8xh200"


def demo_space() -> Iterator[tuple[dict[str, Any], dict[str, str]]]:
    """studies/demo.yaml's space, with SGLang's rules (topk 1: draft = steps + 1; a tree
    verifies at most steps x topk + 1 tokens)."""
    for steps, topk, draft, dtp in itertools.product(range(1, 7), (1, 2, 4), range(2, 17),
                                                     (1, 4)):
        if (topk == 1 and draft != steps + 1) or draft > steps * topk + 1:
            continue
        for algo, proto in itertools.product(("", "Ring", "Tree", "CollNetDirect"),
                                             ("", "LL", "LL128", "Simple")):
            env = {k: v for k, v in (("NCCL_ALGO", algo), ("NCCL_PROTO", proto)) if v}
            yield {"speculative-algorithm": "EAGLE3", "speculative-num-steps": steps,
                   "speculative-eagle-topk": topk, "speculative-num-draft-tokens": draft,
                   "speculative-draft-tp-size": dtp}, env


def best(concurrency: int, extra: dict[str, Any] | None = None
         ) -> tuple[Expectation, dict[str, Any]]:
    """The space's optimum by what the server delivers at this concurrency."""
    found: list[tuple[float, int, Expectation, dict[str, Any]]] = []
    for i, (args, env) in enumerate(demo_space()):
        e = expected_throughput(DEMO, {**args, **(extra or {})}, env, concurrency=concurrency)
        if e.total_tok_s:
            found.append((e.total_tok_s, -i, e, args))
    _, _, e, args = max(found)
    return e, args


def test_small_forwards_are_memory_bound_large_ones_compute_bound() -> None:
    cfg = resolve_config(DEMO, {}, {})
    t = DEMO.target
    one = target_forward_ms(DEMO, cfg, 1, 1)
    assert one == pytest.approx(1.5)  # the profile says: 1.5 ms for one decode token
    # batch 1: 7 verified tokens instead of 1 cost only the per-token overheads (~16%),
    # the weights are read once either way
    seven = target_forward_ms(DEMO, cfg, 1, 7)
    assert seven - one == pytest.approx(6 * (t.per_token_ms + t.allreduce_ms_per_token))
    # past the ridge (batch 64 x 7 tokens) each extra token of every request costs FLOPs;
    # below it (batch 32 x 3) the FLOPs hide behind the weight reads
    ridge = t.weights_ms / t.compute_ms_per_token
    assert 32 * 3 < ridge < 64 * 7
    past = target_forward_ms(DEMO, cfg, 64, 8) - target_forward_ms(DEMO, cfg, 64, 7)
    below = target_forward_ms(DEMO, cfg, 32, 3) - target_forward_ms(DEMO, cfg, 32, 2)
    link = t.allreduce_ms_per_token
    assert past == pytest.approx(64 * (t.compute_ms_per_token + link) + t.per_token_ms)
    assert below == pytest.approx(32 * link + t.per_token_ms)


def test_kimi_single_stream_calibration_is_kept_within_one_percent() -> None:
    def eagle(steps: int, **extra: Any) -> dict[str, Any]:
        return {"speculative-algorithm": "EAGLE3", "speculative-num-steps": steps,
                "speculative-eagle-topk": 1, "speculative-num-draft-tokens": steps + 1, **extra}

    table = [({}, 90.0), (eagle(5, **{"speculative-draft-tp-size": 8}), 71.3),
             (eagle(2), 94.0), (eagle(1), 93.6), (eagle(3), 87.0)]
    for args, design in table:
        assert expected_throughput(KIMI, args, {}).tok_s == pytest.approx(design, rel=0.01)


def test_total_throughput_counts_every_stream_and_queued_waves() -> None:
    args = {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 2,
            "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 3}
    e16 = expected_throughput(DEMO, args, {}, concurrency=16)
    assert e16.total_tok_s == pytest.approx(16 * (e16.tok_s or 0))
    assert expected_throughput(DEMO, args, {}).total_tok_s == expected_throughput(
        DEMO, args, {}).tok_s
    # 64 streams on a server that runs 48 at once: 48, then the other 16
    e64 = expected_throughput(DEMO, args, {}, concurrency=64)
    e48 = expected_throughput(DEMO, args, {}, concurrency=48)
    wave = REFERENCE_TOKENS / (e48.tok_s or 1)
    rest = REFERENCE_TOKENS / (e16.tok_s or 1)
    assert e64.total_tok_s == pytest.approx(64 * REFERENCE_TOKENS / (wave + rest))


def test_fewer_steps_win_as_concurrency_grows() -> None:
    # nothing in the model names a concurrency: this follows from the roofline
    e1, at1 = best(1)
    e16, at16 = best(16)
    assert at1 != at16
    assert (at16["speculative-num-steps"] < at1["speculative-num-steps"]
            or at16["speculative-num-draft-tokens"] < at1["speculative-num-draft-tokens"])
    assert at1["speculative-eagle-topk"] > 1 and at16["speculative-eagle-topk"] == 1
    gains = []
    for c in (1, 4, 16, 32, 48):
        base = expected_throughput(DEMO, {}, {}, concurrency=c).total_tok_s or 0
        gains.append((best(c)[0].total_tok_s or 0) / base)
    assert gains == sorted(gains, reverse=True)  # speculation pays less and less


@pytest.mark.parametrize("concurrency", [64, 256])
def test_no_speculation_wins_at_high_concurrency(concurrency: int) -> None:
    base = expected_throughput(DEMO, {}, {}, concurrency=concurrency).total_tok_s or 0
    if concurrency == 64:
        # SGLang runs at most 48 requests at once under speculation: the rest wait
        assert (best(64)[0].total_tok_s or 0) < base
    else:
        # caps lifted for both: past the ridge, verifying tokens that get rejected costs
        # FLOPs and link bandwidth that plain decoding spends on useful tokens
        lift = {"max-running-requests": 256, "cuda-graph-max-bs": 256}
        base = expected_throughput(DEMO, lift, {}, concurrency=256).total_tok_s or 0
        assert (best(256, lift)[0].total_tok_s or 0) < base


def test_verify_buckets_pad_the_token_count() -> None:
    padded = replace(DEMO, target=replace(DEMO.target, verify_buckets=(1, 2, 4, 8, 16)))
    cfg = resolve_config(padded, {}, {})
    five, eight = (target_forward_ms(padded, cfg, 1, k) for k in (5, 8))
    assert five == eight > target_forward_ms(padded, cfg, 1, 4)
    assert target_forward_ms(padded, cfg, 1, 17) > target_forward_ms(padded, cfg, 1, 16)
