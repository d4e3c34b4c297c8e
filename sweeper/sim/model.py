"""The simulator's performance model: pure functions from (profile, flags, env) to timings.

Nothing here sleeps, logs or serves; the server (sweeper.sim.engine) paces tokens with
exactly these functions, and ``expected_throughput`` replays the same schedule without the
clock, so a client measuring the server with ``--sim-noise 0`` sees the ground truth
(sweeper.sim.truth).

Model (all coefficients from the profile; profiles/demo.yaml explains each):
- no speculation: one target forward per token;
- speculation: cycle = verify(draft tokens) + steps x draft step + draft gather + overhead;
  a cycle emits accepted drafts + 1 bonus token;
- a target forward over ``batch`` requests of ``k`` positions each (T = batch x k tokens) is
  a roofline plus overheads::

      fixed + max(weights, compute_per_token x T) + allreduce_per_token x T
            + per_request x batch + per_token x (k - 1)

  Streaming the weights bounds small forwards from below (memory-bound): at batch 1,
  verifying a few more draft tokens is nearly free. The GEMMs' FLOPs grow with T and take
  over past the ridge T* = weights / compute_per_token: at large batch x draft tokens
  every verified token costs compute, accepted or not, while each request's memory-bound
  work (its KV-cache read) is paid once per forward whatever k is; the TP all-reduce moves every
  token's activations over the links, outside the roofline. The draft's cost grows with the
  requests it drafts for. So at high concurrency fewer steps win, and past the ridge no
  speculation can win; nothing in the code says so, it follows from the coefficients.
  Optional ``target.verify_buckets`` pad T to CUDA-graph token buckets (a step landscape);
- accept length from per-depth acceptance p_d; a depth with m candidates (tree, topk > 1)
  accepts with 1 - (1 - p_d) ** (m ** branch_exponent); the draft-token budget is spent on
  the top-1 chain first, then on width depth by depth;
- draft step = compute / draft_tp ** exponent, x (1 + per_request x (batch - 1)), plus
  communication at draft TP > 1 (scaled by NCCL_ALGO / NCCL_PROTO / channel count / custom
  all-reduce / NVLS); a draft on fewer GPUs than the target pays a gather once per cycle;
- batches above --cuda-graph-max-bs (or --disable-cuda-graph) run eager: slower;
- --speculative-adaptive: the steps follow SGLang's per-batch-size controller
  (sweeper.sim.adaptive), replayed cycle by cycle;
- every time divides by the configuration's fixed residual factor (rules.residual_factor).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace

from sweeper.sim.adaptive import Controller
from sweeper.sim.hardware import (  # noqa: F401  (re-exported: the model's public names)
    COLLNET,
    NCCL_ALGOS,
    NCCL_PROTOS,
    Failure,
    MemoryPlan,
    capture_batch_sizes,
    hang_rule_matches,
    memory_plan,
    nccl_factor,
    nccl_failure,
    startup_failure,
)
from sweeper.sim.profiles import Profile
from sweeper.sim.rules import (  # noqa: F401  (re-exported)
    ALGORITHMS,
    InvalidArgs,
    SimConfig,
    resolve_config,
)

# The figure a campaign reports: completion tokens / end-to-end time of this long a stream.
REFERENCE_TOKENS = 500
# The server's own warm-up generation before it says it is ready (sweeper.sim.app).
WARMUP_TOKENS = 8


# ---------------------------------------------------------------- acceptance


def depth_candidates(steps: int, topk: int, draft_tokens: int) -> list[int]:
    """Candidates per depth: the budget (draft tokens - 1) covers the top-1 chain first,
    then widens depth by depth up to topk (EAGLE keeps the most likely nodes)."""
    budget = max(draft_tokens - 1, 0)
    nodes = [0] * steps
    for d in range(steps):
        if budget:
            nodes[d], budget = 1, budget - 1
    for d in range(steps):
        extra = min(topk - 1, budget)
        nodes[d] += extra
        budget -= extra
    return [m for m in nodes if m]


def depth_acceptance(profile: Profile, cfg: SimConfig, accept_factor: float = 1.0) -> list[float]:
    """Conditional acceptance per depth, q_d, after trees, algorithm and noise."""
    s = profile.spec
    scale = s.algorithm_acceptance.get(cfg.algorithm or "", 1.0) * accept_factor
    scale *= s.quantization_acceptance.get(cfg.draft_quantization, 1.0)
    probs = list(s.acceptance) or [0.5]
    out = []
    for d, m in enumerate(depth_candidates(cfg.steps, cfg.topk, cfg.draft_tokens)):
        # beyond the profile's list, acceptance keeps falling
        p = probs[d] if d < len(probs) else probs[-1] * 0.9 ** (d - len(probs) + 1)
        p = min(p * scale, 0.99)
        out.append(1.0 - (1.0 - p) ** (m**s.branch_exponent))
    return out


def accept_distribution(q: list[float]) -> list[float]:
    """P(exactly n drafts accepted in a verify step), n = 0..len(q)."""
    dist, reach = [], 1.0
    for p in q:
        dist.append(reach * (1.0 - p))
        reach *= p
    dist.append(reach)
    return dist


def mean_accept_length(q: list[float]) -> float:
    """Tokens per verify step: accepted drafts + the bonus token."""
    return 1.0 + sum(n * p for n, p in enumerate(accept_distribution(q)))


class AcceptPattern:
    """Deterministic accepted-draft counts per verify step with exact long-run proportions.

    Smooth weighted round-robin over the distribution: every prefix stays within one step of
    the expected count per outcome, so a 500-token stream needs the expected number of verify
    steps (random draws would add ~2.5% spread even with noise off).
    """

    def __init__(self, dist: list[float]) -> None:
        self.dist = dist
        self.credit = [0.0] * len(dist)

    def next(self) -> int:
        for n, p in enumerate(self.dist):
            self.credit[n] += p
        best = max(range(len(self.credit)), key=self.credit.__getitem__)
        self.credit[best] -= 1.0
        return best


# ---------------------------------------------------------------- timing


def group_batch(cfg: SimConfig, batch: int) -> int:
    """Requests one attention-DP group serves (all of them without DP attention)."""
    return -(-batch // cfg.attn_dp)


def eager(cfg: SimConfig, batch: int) -> bool:
    # CUDA graphs are captured per rank: with DP attention, for the group's batch
    return not cfg.cuda_graph or group_batch(cfg, batch) > cfg.cuda_graph_max_bs


def at_steps(cfg: SimConfig, steps: int) -> SimConfig:
    """The configuration running ``steps`` chain steps (adaptive switching; 0 = no drafting)."""
    if steps == cfg.steps:
        return cfg
    return replace(cfg, steps=steps, draft_tokens=steps + 1)


def draft_step_ms(profile: Profile, cfg: SimConfig, batch: int) -> float:
    d = profile.draft
    compute = d.compute_ms_tp1 / cfg.draft_tp**d.tp_scaling_exponent
    compute *= 1.0 + d.topk_cost * (cfg.topk - 1)
    # each request adds its own draft KV read and top-k over the vocabulary
    # (with DP attention each group drafts for its own requests, in parallel)
    compute *= 1.0 + d.per_request * (group_batch(cfg, batch) - 1)
    compute *= profile.spec.algorithm_draft_cost.get(cfg.algorithm or "", 1.0)
    compute *= d.attention_backend.get(cfg.draft_backend, 1.0)
    compute *= d.quantization_cost.get(cfg.draft_quantization, 1.0)
    if eager(cfg, batch):
        compute *= d.eager_factor
    return compute + comm_ms(profile, cfg)


def comm_ms(profile: Profile, cfg: SimConfig) -> float:
    """The draft's collectives per step, at draft TP > 1."""
    if cfg.draft_tp == 1 or cfg.algorithm == "NGRAM":
        return 0.0
    d = profile.draft
    # more ranks, more hops: scale from the profile's figure at the target's TP
    ms = d.comm_ms * math.log2(cfg.draft_tp) / max(math.log2(cfg.tp), 1.0)
    if not cfg.custom_all_reduce:
        ms *= d.no_custom_all_reduce_factor
    if cfg.nvls:
        ms *= d.nvls_factor
    return ms * nccl_factor(profile, cfg)


def padded_tokens(profile: Profile, tokens: int) -> int:
    """Tokens a forward really computes: the smallest CUDA-graph bucket >= tokens."""
    buckets = profile.target.verify_buckets
    i = bisect.bisect_left(buckets, tokens)
    return buckets[i] if i < len(buckets) else tokens


def target_forward_ms(profile: Profile, cfg: SimConfig, batch: int, tokens: int) -> float:
    """One target forward over ``batch`` requests of ``tokens`` positions each (roofline)."""
    t = profile.target
    n = padded_tokens(profile, batch * tokens)
    gemm = max(t.weights_ms, t.compute_ms_per_token * n)  # memory-bound vs compute-bound
    ms = (t.fixed_ms + gemm + t.allreduce_ms_per_token * n
          + t.per_request_ms * group_batch(cfg, batch) + t.per_token_ms * (n / batch - 1))
    if cfg.attn_dp > 1:
        ms += t.fixed_ms * 0.5 if t.dp_attention_ms is None else t.dp_attention_ms
    if eager(cfg, batch):
        ms += t.eager_ms
    return ms


def cycle_ms(profile: Profile, cfg: SimConfig, batch: int) -> float:
    """One decode iteration for a batch: a plain decode step, or a full speculative cycle."""
    t = profile.target
    overlap = 0.0 if cfg.overlap else t.no_overlap_ms
    if not cfg.speculative:
        return (target_forward_ms(profile, cfg, batch, 1) + overlap) / cfg.residual
    if cfg.steps == 0:
        # an adaptive slot at 0 steps: a trivial verify, and the draft extend still runs
        # (eagle_worker_v2: it keeps the draft's KV warm) unless the env var skips it
        extend = 0.0 if skip_zero_step_extend(cfg) else draft_step_ms(profile, cfg, batch)
        return (target_forward_ms(profile, cfg, batch, 1) + extend + overlap) / cfg.residual
    verify = target_forward_ms(profile, cfg, batch, cfg.draft_tokens)
    verify *= t.attention_backend.get(cfg.attention_backend, 1.0)
    mode = cfg.attention_mode + ("_tree" if cfg.topk > 1 and cfg.attention_mode != "prefill"
                                 else "")
    verify *= t.verify_attention_mode.get(mode, t.verify_attention_mode.get(
        cfg.attention_mode, 1.0))
    if cfg.topk > 1:
        verify += profile.spec.tree_verify_ms * batch
    gather = 0.0
    # a draft on fewer GPUs than its attention group gathers; with DP attention the draft
    # runs inside its group (draft TP = tp / attn_dp) and needs no gather of its own
    if cfg.draft_tp < cfg.tp // cfg.attn_dp and cfg.algorithm != "NGRAM":
        gather = profile.draft.gather_ms * nccl_factor(profile, cfg)
    drafts = cfg.steps * draft_step_ms(profile, cfg, batch)
    return (verify + drafts + gather + profile.spec.overhead_ms + overlap) / cfg.residual


def skip_zero_step_extend(cfg: SimConfig) -> bool:
    value = cfg.environ.get("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND", "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def prefill_ms(profile: Profile, cfg: SimConfig, new_requests: int) -> float:
    """Prefill of a short prompt batch, emitting each request's first token."""
    t = profile.target
    ms = t.prefill_ms + t.prefill_per_request_ms * (new_requests - 1)
    if cfg.speculative:
        ms += draft_step_ms(profile, cfg, new_requests)  # the draft's extend pass
    return ms / cfg.residual


def verify_steps_for(dist: list[float], tokens: int) -> int:
    """Verify steps one request needs for ``tokens`` output tokens (first from prefill)."""
    pattern, produced, steps = AcceptPattern(dist), 1, 0
    while produced < tokens:
        produced += pattern.next() + 1
        steps += 1
    return steps


# ---------------------------------------------------------------- adaptive replay


def new_controller(cfg: SimConfig) -> Controller | None:
    if cfg.adaptive is None:
        return None
    sizes = capture_batch_sizes(cfg.cuda_graph_max_bs) if cfg.cuda_graph else None
    return Controller(cfg.adaptive, cfg.steps, sizes)


class StepPatterns:
    """One request's deterministic accept counts, one pattern per chain depth it runs."""

    def __init__(self, profile: Profile, cfg: SimConfig, accept_factor: float = 1.0) -> None:
        self.profile, self.cfg, self.factor = profile, cfg, accept_factor
        self._patterns: dict[int, AcceptPattern] = {}

    def next(self, steps: int) -> int:
        if steps not in self._patterns:
            q = depth_acceptance(self.profile, at_steps(self.cfg, steps), self.factor)
            self._patterns[steps] = AcceptPattern(accept_distribution(q))
        return self._patterns[steps].next()


@dataclass
class Replay:
    e2e_ms: float
    verify_ct: int
    tokens: int
    ttft_ms: float
    steps: int  # steps at the end of the stream


def replay_stream(profile: Profile, cfg: SimConfig, ctl: Controller, batch: int,
                  tokens: int, accept_factor: float = 1.0) -> Replay:
    """``batch`` identical requests of ``tokens`` tokens in lockstep, stepping ``ctl``."""
    ttft = prefill_ms(profile, cfg, batch)
    elapsed, produced, verify_ct, verified = ttft, 1, 0, 0
    patterns = StepPatterns(profile, cfg, accept_factor)
    cycles: dict[int, float] = {}
    steps = ctl.steps_for(batch)
    while produced < tokens:
        steps = ctl.steps_for(batch)
        if steps not in cycles:
            cycles[steps] = cycle_ms(profile, at_steps(cfg, steps), batch)
        elapsed += cycles[steps]
        accepted = patterns.next(steps) if steps else 0
        if steps:
            verify_ct += 1
            verified += accepted + 1
        produced += accepted + 1
        ctl.observe([accepted] * batch, batch)
    return Replay(elapsed, verify_ct, verified, ttft, steps)


def adaptive_schedule(profile: Profile, cfg: SimConfig, batch: int,
                      accept_factor: float = 1.0) -> Replay:
    """What a benchmark measures: the server's own warm-up, one warm-up stream at this
    concurrency (the controller settles), then the measured REFERENCE_TOKENS stream."""
    ctl = new_controller(cfg)
    assert ctl is not None
    replay_stream(profile, cfg, ctl, 1, WARMUP_TOKENS)
    replay_stream(profile, cfg, ctl, batch, REFERENCE_TOKENS, accept_factor)
    return replay_stream(profile, cfg, ctl, batch, REFERENCE_TOKENS, accept_factor)
