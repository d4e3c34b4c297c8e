"""The simulator's performance model: pure functions from (profile, flags, env) to timings.

Nothing here sleeps, logs or serves; the server (sweeper.sim.engine) paces tokens with
exactly these functions, and ``expected_throughput`` replays the same schedule without the
clock, so a client measuring the server with ``--sim-noise 0`` sees the ground truth.

Model (all coefficients from the profile):
- no speculation: one target forward per token;
- speculation: cycle = verify(draft tokens) + steps x draft step + draft gather + overhead;
  a cycle emits accepted drafts + 1 bonus token;
- accept length from per-depth acceptance p_d; a depth with m candidates (tree, topk > 1)
  accepts with 1 - (1 - p_d) ** (m ** branch_exponent); the draft-token budget is spent on
  the top-1 chain first, then on width depth by depth;
- draft step = compute / draft_tp ** exponent + communication at draft TP > 1 (scaled by
  NCCL_ALGO / NCCL_PROTO / channel count / custom all-reduce / NVLS); a draft on fewer GPUs
  than the target pays a hidden-state gather once per cycle;
- batches above --cuda-graph-max-bs (or --disable-cuda-graph) run eager: slower.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweeper.sim.profiles import Profile, load_profile

ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
NCCL_ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
NCCL_PROTOS = ("LL", "LL128", "Simple")
COLLNET = ("CollNetDirect", "CollNetChain")
# The figure a campaign reports: completion tokens / end-to-end time of this long a stream.
REFERENCE_TOKENS = 500


class InvalidArgs(Exception):
    """A flag combination SGLang refuses; ``kind`` is the exception SGLang raises."""

    def __init__(self, message: str, kind: str = "AssertionError") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class SimConfig:
    """A launch configuration after SGLang's defaults and adjustments."""

    tp: int
    algorithm: str | None  # EAGLE, EAGLE3, STANDALONE, NGRAM; None = no speculation
    steps: int
    topk: int
    draft_tokens: int
    draft_tp: int
    cuda_graph: bool
    cuda_graph_max_bs: int
    mem_fraction: float
    max_running: int
    custom_all_reduce: bool
    nvls: bool
    overlap: bool
    attention_backend: str
    env: Mapping[str, str]
    warnings: tuple[str, ...] = ()

    @property
    def speculative(self) -> bool:
        return self.algorithm is not None


@dataclass(frozen=True)
class Failure:
    """Why a configuration does not serve: kind is oom, nccl or hang; detail is for logs."""

    kind: str
    reason: str
    detail: Mapping[str, Any]


@dataclass(frozen=True)
class Expectation:
    """Noise-free ground truth for one configuration.

    tok_s: per-request output tokens / end-to-end seconds of a REFERENCE_TOKENS (500) stream,
    prefill included, at the given concurrency (what the sweeper's benchmark reports);
    None when the configuration fails. decode_tok_s: steady-state accept_length / cycle.
    failure: "oom", "nccl", "hang", "invalid_args" or None.
    """

    tok_s: float | None
    accept_length: float | None
    failure: str | None
    reason: str
    decode_tok_s: float | None = None
    cycle_ms: float | None = None
    ttft_ms: float | None = None
    config: SimConfig | None = None


# ---------------------------------------------------------------- flag resolution


def _norm_args(args: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in args.items():
        out[str(key).lstrip("-").replace("_", "-")] = value
    return out


def _opt_int(args: Mapping[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidArgs(
            f"argument --{key}: invalid int value: {value!r}", "ValueError"
        ) from None


def _flag(args: Mapping[str, Any], key: str) -> bool:
    value = args.get(key, False)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def resolve_config(profile: Profile, args: Mapping[str, Any], env: Mapping[str, str]) -> SimConfig:
    """Apply SGLang's defaults and rules (server_args / speculative hook) to launch flags.

    Raises InvalidArgs with SGLang's message for combinations SGLang rejects.
    """
    a = _norm_args(args)
    d = profile.defaults
    warnings: list[str] = []
    tp = _opt_int(a, "tp-size") or d.tp_size
    if tp < 1 or tp > profile.hardware.num_gpus:
        raise InvalidArgs(
            f"tp_size={tp} needs {tp} GPUs but the node has {profile.hardware.num_gpus}",
            "RuntimeError",
        )
    algo_raw = a.get("speculative-algorithm")
    algorithm = None if algo_raw in (None, "", "None", "none") else str(algo_raw).upper()
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise InvalidArgs(
            f"argument --speculative-algorithm: invalid choice: {algo_raw!r} "
            f"(choose from {', '.join(ALGORITHMS)})",
            "ArgumentError",
        )
    if algorithm == "NEXTN":
        algorithm = "EAGLE"
    steps = _opt_int(a, "speculative-num-steps")
    topk = _opt_int(a, "speculative-eagle-topk")
    draft_tokens = _opt_int(a, "speculative-num-draft-tokens")
    draft_tp = _opt_int(a, "speculative-draft-tp-size")
    backend = str(a.get("attention-backend") or "auto")
    if algorithm is None:
        steps, topk, draft_tokens, draft_tp = 0, 1, 1, tp
    else:
        if steps is None or topk is None or draft_tokens is None:
            if not (steps is None and topk is None and draft_tokens is None):
                raise InvalidArgs(
                    "If any of speculative_num_steps, speculative_eagle_topk, "
                    "speculative_num_draft_tokens is set, all of them must be set."
                )
            steps, topk, draft_tokens = d.speculative
        if steps < 1 or topk < 1 or draft_tokens < 1:
            raise InvalidArgs(
                "speculative_num_steps, speculative_eagle_topk and "
                "speculative_num_draft_tokens must be positive."
            )
        if topk == 1 and draft_tokens != steps + 1:
            warnings.append(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
                "when speculative_eagle_topk == 1"
            )
            draft_tokens = steps + 1
        if topk > 1 and backend == "trtllm_mha":
            raise InvalidArgs("trtllm_mha backend only supports topk = 1 for speculative decoding.")
        draft_tp = draft_tp if draft_tp is not None else tp
        if draft_tp < 1 or tp % draft_tp:
            raise InvalidArgs(
                f"speculative_draft_tp_size ({draft_tp}) must divide tp_size ({tp})."
            )
    mem_fraction = a.get("mem-fraction-static")
    mem_fraction = float(mem_fraction) if mem_fraction not in (None, "") else d.mem_fraction_static
    if not 0.0 < mem_fraction < 1.0:
        raise InvalidArgs(f"mem_fraction_static must be in (0, 1), got {mem_fraction}")
    max_running = _opt_int(a, "max-running-requests")
    if max_running is None:
        max_running = d.max_running_requests_spec if algorithm else d.max_running_requests
    return SimConfig(
        tp=tp,
        algorithm=algorithm,
        steps=steps,
        topk=topk,
        draft_tokens=draft_tokens,
        draft_tp=draft_tp,
        cuda_graph=not _flag(a, "disable-cuda-graph"),
        cuda_graph_max_bs=_opt_int(a, "cuda-graph-max-bs") or d.cuda_graph_max_bs,
        mem_fraction=mem_fraction,
        max_running=max(1, max_running),
        custom_all_reduce=not _flag(a, "disable-custom-all-reduce"),
        nvls=_flag(a, "enable-nccl-nvls"),
        overlap=not _flag(a, "disable-overlap-schedule"),
        attention_backend=backend,
        env={k: str(v) for k, v in env.items() if k.startswith("NCCL_")},
        warnings=tuple(warnings),
    )


# ---------------------------------------------------------------- NCCL


def _env_choice(value: str, known: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """NCCL list syntax: "Ring,Tree" allows those, "^Ring" excludes. -> (allowed, unknown)."""
    text = value.strip()
    exclude = text.startswith("^")
    names = [n.strip() for n in text.lstrip("^").split(",") if n.strip()]
    canon = {k.lower(): k for k in known}
    unknown = [n for n in names if n.lower() not in canon]
    picked = [canon[n.lower()] for n in names if n.lower() in canon]
    allowed = [k for k in known if k not in picked] if exclude else picked
    return allowed, unknown


def nccl_failure(profile: Profile, cfg: SimConfig) -> Failure | None:
    """NCCL settings the profile's hardware cannot run: fail at communicator init."""
    if cfg.tp == 1:
        return None  # one GPU: no NCCL communicator is ever created
    for var, known in (("NCCL_ALGO", NCCL_ALGOS), ("NCCL_PROTO", NCCL_PROTOS)):
        if var not in cfg.env:
            continue
        allowed, unknown = _env_choice(cfg.env[var], known)
        if unknown:
            return Failure("nccl", f"{var}={cfg.env[var]}: unknown value", {"var": var})
        usable = [x for x in allowed if profile.hardware.collnet or x not in COLLNET]
        if not usable:
            return Failure(
                "nccl",
                f"{var}={cfg.env[var]}: no usable algorithm (no CollNet on this hardware)",
                {"var": var},
            )
    for var in ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"):
        if var in cfg.env:
            try:
                if int(cfg.env[var]) < 1:
                    raise ValueError
            except ValueError:
                return Failure("nccl", f"{var}={cfg.env[var]}: invalid value", {"var": var})
    return None


def hang_rule_matches(profile: Profile, cfg: SimConfig) -> bool:
    rule = profile.nccl.hang
    if rule is None or cfg.tp == 1:
        return False
    for key, want in rule.env.items():
        if cfg.env.get(key, "").lower() != want.lower():
            return False
    values = {
        "speculative-draft-tp-size": cfg.draft_tp if cfg.speculative else None,
        "tp-size": cfg.tp,
        "speculative-eagle-topk": cfg.topk if cfg.speculative else None,
        "speculative-num-steps": cfg.steps if cfg.speculative else None,
    }
    return all(str(values.get(k)) == want for k, want in rule.args.items())


def nccl_factor(profile: Profile, cfg: SimConfig) -> float:
    """Multiplier on the draft's communication time from the NCCL environment."""
    n = profile.nccl
    factor = 1.0
    for var, known, table in (
        ("NCCL_ALGO", NCCL_ALGOS, n.algo),
        ("NCCL_PROTO", NCCL_PROTOS, n.proto),
    ):
        if var in cfg.env:
            allowed, _ = _env_choice(cfg.env[var], known)
            usable = [x for x in allowed if profile.hardware.collnet or x not in COLLNET]
            # NCCL's tuner picks the fastest of what it is allowed to use
            factor *= min((table.get(x, 1.0) for x in usable), default=1.0)
    channels = n.default_channels
    if "NCCL_MIN_NCHANNELS" in cfg.env:
        channels = max(channels, int(cfg.env["NCCL_MIN_NCHANNELS"]))
    if "NCCL_MAX_NCHANNELS" in cfg.env:
        channels = min(channels, int(cfg.env["NCCL_MAX_NCHANNELS"]))

    def cost(ch: int) -> float:
        return 1.0 + n.channel_penalty * abs(math.log2(ch / n.best_channels))

    # relative to NCCL's own choice, so an empty environment is exactly 1.0
    return factor * cost(channels) / cost(n.default_channels)


# ---------------------------------------------------------------- memory


def capture_batch_sizes(max_bs: int) -> list[int]:
    """SGLang-like captured batch sizes: 1, 2, 4, then steps of 8 up to max_bs."""
    sizes = [b for b in (1, 2, 4) if b <= max_bs] + list(range(8, max_bs + 1, 8))
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sorted(set(sizes))


@dataclass(frozen=True)
class MemoryPlan:
    total_gb: float
    static_gb: float
    weights_gb: float
    kv_gb: float
    free_gb: float  # outside the static pool, after the activation reserve
    graph_gb: float


def memory_plan(profile: Profile, cfg: SimConfig) -> MemoryPlan:
    m = profile.memory
    total = profile.hardware.gpu_memory_gb
    static = total * cfg.mem_fraction
    weights = m.target_weights_gb / cfg.tp
    if cfg.speculative and cfg.algorithm != "NGRAM":
        # GPU 0 holds its share of the draft (the whole draft when draft TP is 1)
        weights += m.draft_weights_gb / cfg.draft_tp
    tokens_per_req = cfg.draft_tokens + cfg.steps * cfg.topk if cfg.speculative else 1
    graph = m.graph_gb_per_token * cfg.cuda_graph_max_bs * tokens_per_req if cfg.cuda_graph else 0
    return MemoryPlan(
        total_gb=total,
        static_gb=static,
        weights_gb=weights,
        kv_gb=static - weights,
        free_gb=total - static - m.activation_reserve_gb,
        graph_gb=graph,
    )


def startup_failure(profile: Profile, cfg: SimConfig) -> Failure | None:
    """The failure start-up hits, in SGLang's order: NCCL init, (hang), KV pool, capture."""
    failure = nccl_failure(profile, cfg)
    if failure:
        return failure
    if hang_rule_matches(profile, cfg):
        rule = profile.nccl.hang
        return Failure("hang", rule.reason if rule else "hang", {})
    plan = memory_plan(profile, cfg)
    if plan.kv_gb < profile.memory.min_kv_gb:
        return Failure(
            "oom",
            f"not enough memory for the KV cache ({plan.kv_gb:.1f} GB < "
            f"{profile.memory.min_kv_gb:.1f} GB): raise --mem-fraction-static",
            {"stage": "kv", "plan": plan},
        )
    if plan.graph_gb > plan.free_gb:
        return Failure(
            "oom",
            f"CUDA graph capture needs {plan.graph_gb:.1f} GB, {max(plan.free_gb, 0):.1f} GB free",
            {"stage": "capture", "plan": plan},
        )
    return None


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


def eager(cfg: SimConfig, batch: int) -> bool:
    return not cfg.cuda_graph or batch > cfg.cuda_graph_max_bs


def draft_step_ms(profile: Profile, cfg: SimConfig, batch: int) -> float:
    d = profile.draft
    compute = d.compute_ms_tp1 / cfg.draft_tp**d.tp_scaling_exponent
    compute *= 1.0 + d.topk_cost * (cfg.topk - 1)
    compute *= 1.0 + d.per_request * (batch - 1)
    compute *= profile.spec.algorithm_draft_cost.get(cfg.algorithm or "", 1.0)
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


def target_forward_ms(profile: Profile, cfg: SimConfig, batch: int, tokens: int) -> float:
    t = profile.target
    ms = t.forward_ms + t.per_request_ms * (batch - 1) + t.per_token_ms * (batch * tokens - 1)
    if eager(cfg, batch):
        ms += t.eager_ms
    return ms


def cycle_ms(profile: Profile, cfg: SimConfig, batch: int) -> float:
    """One decode iteration for a batch: a plain decode step, or a full speculative cycle."""
    t = profile.target
    overlap = 0.0 if cfg.overlap else t.no_overlap_ms
    if not cfg.speculative:
        return target_forward_ms(profile, cfg, batch, 1) + overlap
    verify = target_forward_ms(profile, cfg, batch, cfg.draft_tokens)
    verify *= t.attention_backend.get(cfg.attention_backend, 1.0)
    if cfg.topk > 1:
        verify += profile.spec.tree_verify_ms * batch
    gather = 0.0
    if cfg.draft_tp < cfg.tp and cfg.algorithm != "NGRAM":
        gather = profile.draft.gather_ms * nccl_factor(profile, cfg)
    drafts = cfg.steps * draft_step_ms(profile, cfg, batch)
    return verify + drafts + gather + profile.spec.overhead_ms + overlap


def prefill_ms(profile: Profile, cfg: SimConfig, new_requests: int) -> float:
    """Prefill of a short prompt batch, emitting each request's first token."""
    t = profile.target
    ms = t.prefill_ms + t.prefill_per_request_ms * (new_requests - 1)
    if cfg.speculative:
        ms += draft_step_ms(profile, cfg, new_requests)  # the draft's extend pass
    return ms


def verify_steps_for(dist: list[float], tokens: int) -> int:
    """Verify steps one request needs for ``tokens`` output tokens (first from prefill)."""
    pattern, produced, steps = AcceptPattern(dist), 1, 0
    while produced < tokens:
        produced += pattern.next() + 1
        steps += 1
    return steps


# ---------------------------------------------------------------- ground truth


def expected_throughput(
    profile: Profile | str,
    args: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    concurrency: int = 1,
) -> Expectation:
    """Noise-free throughput of a configuration on a profile, or the failure it hits.

    ``args`` are SGLang flags without ``--`` (``{"speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 2, "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 3}``), ``env`` the server's environment (NCCL_*).
    SGLang's adjustments apply (topk == 1 forces draft tokens = steps + 1).
    ``tok_s`` is what a client measures per request: 500 completion tokens over the
    end-to-end time (prefill included), with ``concurrency`` requests decoding together
    (capped at --max-running-requests: the rest would queue).
    The simulated server paces tokens with the same schedule, so over HTTP with
    ``--sim-noise 0`` it matches within timer/HTTP overhead.

    >>> e = expected_throughput("kimi-k2.5-8xh200", {"speculative-algorithm": "EAGLE3",
    ...     "speculative-num-steps": 2, "speculative-eagle-topk": 1,
    ...     "speculative-num-draft-tokens": 3})
    >>> round(e.tok_s), round(e.accept_length, 2), e.failure
    (93, 1.9, None)
    """
    prof = load_profile(profile)
    try:
        cfg = resolve_config(prof, args, env or {})
    except InvalidArgs as exc:
        return Expectation(None, None, "invalid_args", f"{exc.kind}: {exc}")
    failure = startup_failure(prof, cfg)
    if failure:
        return Expectation(None, None, failure.kind, failure.reason, config=cfg)
    batch = max(1, min(concurrency, cfg.max_running))
    cycle = cycle_ms(prof, cfg, batch)
    ttft = prefill_ms(prof, cfg, batch)
    if cfg.speculative:
        dist = accept_distribution(depth_acceptance(prof, cfg))
        accept = mean_accept_length(depth_acceptance(prof, cfg))
        steps = verify_steps_for(dist, REFERENCE_TOKENS)
    else:
        accept, steps = 1.0, REFERENCE_TOKENS - 1
    e2e_ms = ttft + steps * cycle
    tok_s = REFERENCE_TOKENS / e2e_ms * 1000.0
    graph = "eager" if eager(cfg, batch) else "cuda graph"
    reason = (
        f"{cfg.algorithm or 'no speculation'}: accept length {accept:.2f}, "
        f"cycle {cycle:.2f} ms ({graph}), batch {batch}"
    )
    return Expectation(
        tok_s=tok_s,
        accept_length=accept if cfg.speculative else None,
        failure=None,
        reason=reason,
        decode_tok_s=accept / cycle * 1000.0,
        cycle_ms=cycle,
        ttft_ms=ttft,
        config=cfg,
    )
