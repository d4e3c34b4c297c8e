"""The simulator's physics of the knobs SGLang 0.5.23 offers a Kimi-sized deployment:
attention DP (the draft in each attention-TP group), the draft's quantization and
attention backend, the verify's attention mode. Checked as relations that hold for any
profile, on every built-in one."""

from __future__ import annotations

import pytest

from sweeper.sim import load_profile
from sweeper.sim.model import (
    cycle_ms,
    depth_acceptance,
    draft_step_ms,
    resolve_config,
    target_forward_ms,
)
from sweeper.sim.profiles import builtin_profiles

EAGLE = {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 3,
         "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4}


@pytest.fixture(params=builtin_profiles())
def profile(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    return load_profile(request.param)


def test_attention_dp_puts_the_draft_in_each_group(profile) -> None:  # type: ignore[no-untyped-def]
    tp = profile.defaults.tp_size
    plain = resolve_config(profile, {**EAGLE, "tp-size": tp}, {})
    dp = resolve_config(profile, {**EAGLE, "tp-size": tp, "attn-dp-size": tp}, {})
    assert plain.draft_tp == tp and dp.draft_tp == 1 and dp.attn_dp == tp
    # the deprecated spelling resolves to the same layout
    old = resolve_config(profile, {**EAGLE, "tp-size": tp, "enable-dp-attention": True,
                                   "dp-size": tp}, {})
    assert (old.attn_dp, old.draft_tp) == (dp.attn_dp, dp.draft_tp)


def test_attention_dp_splits_requests_and_pays_a_gather(profile) -> None:  # type: ignore[no-untyped-def]
    tp = profile.defaults.tp_size
    t = profile.target
    plain = resolve_config(profile, {**EAGLE, "tp-size": tp}, {})
    dp = resolve_config(profile, {**EAGLE, "tp-size": tp, "attn-dp-size": tp}, {})
    gather = t.fixed_ms * 0.5 if t.dp_attention_ms is None else t.dp_attention_ms
    batch = tp * 2  # two requests per group
    diff = target_forward_ms(profile, dp, batch, 1) - target_forward_ms(profile, plain, batch, 1)
    assert diff == pytest.approx(gather - t.per_request_ms * (batch - 2))
    # alone, a request gains nothing from the split and pays the gather
    one = target_forward_ms(profile, dp, 1, 1) - target_forward_ms(profile, plain, 1, 1)
    assert one == pytest.approx(gather)


def test_a_quantized_draft_is_cheaper_and_agrees_less(profile) -> None:  # type: ignore[no-untyped-def]
    base = resolve_config(profile, EAGLE, {})
    fp8 = resolve_config(profile, {**EAGLE, "speculative-draft-model-quantization": "fp8"}, {})
    assert draft_step_ms(profile, fp8, 1) < draft_step_ms(profile, base, 1)
    assert all(q8 < q for q8, q in zip(depth_acceptance(profile, fp8),
                                       depth_acceptance(profile, base), strict=True))


def test_draft_backend_and_verify_mode_move_their_own_cost(profile) -> None:  # type: ignore[no-untyped-def]
    base = resolve_config(profile, EAGLE, {})
    triton = resolve_config(profile, {**EAGLE, "speculative-draft-attention-backend": "triton"},
                            {})
    assert draft_step_ms(profile, triton, 1) > draft_step_ms(profile, base, 1)
    decode = resolve_config(profile, {**EAGLE, "speculative-attention-mode": "decode"}, {})
    assert cycle_ms(profile, decode, 1) != cycle_ms(profile, base, 1)
    assert depth_acceptance(profile, decode) == depth_acceptance(profile, base)
