"""SGLang's launch-flag rules: flags + env -> the configuration the server would run.

Defaults and adjustments follow SGLang 0.5.23's server_args, arg_groups/speculative_hook.py
and parallel_hook.py: steps unset -> topk and draft tokens unset too (else a bare assert) and
(3, 1, 4) for non-Llama targets; topk 1 setting draft tokens = steps + 1 with a warning;
NGRAM's topk = --speculative-ngram-max-bfs-breadth and draft tokens 12 by default; the
adaptive hook (sweeper.sim.adaptive); attention DP (--attn-dp-size dividing --tp-size, or
the deprecated --enable-dp-attention --dp-size N), which puts the draft in the attention-TP
group of tp / attn-dp-size GPUs; a draft TP dividing TP where the build has the flag. A
configuration also gets its fixed residual speed factor here (profile
``noise.config_residual_sd``), so every consumer of a SimConfig, the real-time server
included, sees the same figure.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sweeper.sim.adaptive import AdaptiveConfig, AdaptiveConfigError, load_config
from sweeper.sim.profiles import Profile

# SGLang 0.5.23's speculative algorithms (SpeculativeAlgorithm + the NEXTN alias)
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO",
              "FROZEN_KV_MTP")
# those the performance model covers; the others are refused at start-up
SIMULATED = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")


class InvalidArgs(Exception):
    """A flag combination SGLang refuses; ``kind`` is the exception SGLang raises."""

    def __init__(self, message: str, kind: str = "AssertionError",
                 where: str = "server_args") -> None:
        super().__init__(message)
        self.kind = kind
        self.where = where  # server_args, or adaptive: the adaptive config file


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
    adaptive: AdaptiveConfig | None = None  # --speculative-adaptive in effect
    attn_dp: int = 1  # attention-DP groups (--attn-dp-size); each of tp / attn_dp GPUs
    attention_mode: str = "prefill"  # --speculative-attention-mode: the verify's kernels
    draft_backend: str = "auto"  # --speculative-draft-attention-backend
    draft_quantization: str = "none"  # --speculative-draft-model-quantization
    residual: float = 1.0  # fixed speed factor of this configuration (1 = none)
    # the flags as given, normalised (for rules); out of repr: they may hold --api-key
    args: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # the whole environment, for profile rules only (env above keeps NCCL_*: the model's
    # input and the configuration's identity)
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def speculative(self) -> bool:
        return self.algorithm is not None

    @property
    def max_steps(self) -> int:
        """Deepest chain the server may run (the widest adaptive candidate)."""
        if self.adaptive is not None:
            return max(self.adaptive.candidate_steps)
        return self.steps


def norm_args(args: Mapping[str, Any]) -> dict[str, Any]:
    return {str(key).lstrip("-").replace("_", "-"): value for key, value in args.items()}


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


def flag(args: Mapping[str, Any], key: str) -> bool:
    value = args.get(key, False)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _adaptive_unsupported(algorithm: str | None, topk: int | None) -> str | None:
    # adaptive_spec_params.adaptive_unsupported_reason, for the flags the simulator has
    if algorithm not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algorithm} (only EAGLE/EAGLE3 are supported)"
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    return None


def _algorithm(a: Mapping[str, Any]) -> str | None:
    raw = a.get("speculative-algorithm")
    if raw in (None, "", "None", "none"):
        return None
    name = str(raw).upper()
    if name not in SIMULATED:
        # SpeculativeAlgorithm.from_string; DFLASH, DSPARK, UNO and FROZEN_KV_MTP exist in
        # 0.5.23 but need kernels/drafts this double does not model: refused as a build
        # without them would
        raise InvalidArgs(f"Unknown speculative algorithm name: {raw}", "ValueError")
    return "EAGLE" if name == "NEXTN" else name  # _resolve_speculative_algorithm_alias


def _parallel(a: Mapping[str, Any], tp: int) -> int:
    """Attention-DP width (parallel_hook): --attn-dp-size, or the deprecated pair."""
    dp = _opt_int(a, "dp-size") or 1
    attn_dp = _opt_int(a, "attn-dp-size") or 1
    if flag(a, "enable-dp-attention") and attn_dp == 1:
        attn_dp, dp = dp, 1  # handle_deprecated_dp_attention
    if attn_dp < 1:
        raise InvalidArgs(f"--attn-dp-size must be positive (got {attn_dp}).", "ValueError")
    if attn_dp > 1 and dp > 1:
        raise InvalidArgs(
            f"--dp-size {dp} with --attn-dp-size {attn_dp}: data-parallel replicas combined "
            "with attention data parallelism are not supported.", "ValueError")
    if dp > 1:
        raise InvalidArgs("--dp-size > 1 (data-parallel replicas) is not simulated by "
                          "sweeper.sim; use --attn-dp-size", "NotImplementedError")
    if tp % attn_dp:
        raise InvalidArgs("tp_size must be divisible by attn_dp_size * attn_cp_size")
    return attn_dp


def _cuda_graph(a: Mapping[str, Any], d: Any) -> tuple[bool, int]:
    """(decode CUDA graphs on, largest decode batch captured): 0.5.23's names, or the
    older --cuda-graph-max-bs a model caller may still pass for an older build."""
    off = (flag(a, "disable-cuda-graph") or flag(a, "disable-decode-cuda-graph")
           or str(a.get("cuda-graph-backend-decode") or "").lower() == "disabled")
    sizes = a.get("cuda-graph-bs-decode")
    max_bs = _opt_int(a, "cuda-graph-max-bs-decode") or _opt_int(a, "cuda-graph-max-bs")
    if max_bs is None and sizes:
        values = sizes if isinstance(sizes, list | tuple) else str(sizes).split()
        max_bs = max(int(v) for v in values)
    return not off, max_bs or d.cuda_graph_max_bs


def _spec_numbers(
    a: Mapping[str, Any], algorithm: str, d: Any, warnings: list[str]
) -> tuple[int, int, int]:
    """(steps, topk, draft tokens) after _handle_eagle_family / _handle_ngram."""
    steps = _opt_int(a, "speculative-num-steps")
    topk = _opt_int(a, "speculative-eagle-topk")
    draft_tokens = _opt_int(a, "speculative-num-draft-tokens")
    if algorithm == "NGRAM":
        topk = _opt_int(a, "speculative-ngram-max-bfs-breadth") or 10
        if draft_tokens is None:
            draft_tokens = 12
            warnings.append(
                "speculative_num_draft_tokens is set to 12 by default for ngram speculative "
                "decoding. You can override this by explicitly setting "
                "--speculative-num-draft-tokens.")
        if steps is None:
            steps = max(draft_tokens // topk, 1)
        return steps, topk, draft_tokens
    if steps is None:
        if topk is not None or draft_tokens is not None:
            raise InvalidArgs("")  # a bare assert in _handle_eagle_family
        return d.speculative
    if topk is None:
        # `speculative_eagle_topk > 1` on a None: the launch dies in the hook
        raise InvalidArgs("'>' not supported between instances of 'NoneType' and 'int'",
                          "TypeError")
    if topk == 1 and draft_tokens != steps + 1:
        warnings.append(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
            "when speculative_eagle_topk == 1")
        draft_tokens = steps + 1
    if draft_tokens is None:
        raise InvalidArgs("unsupported operand type(s) for -: 'NoneType' and 'int'",
                          "TypeError")
    return steps, topk, draft_tokens


def resolve_config(profile: Profile, args: Mapping[str, Any], env: Mapping[str, str]) -> SimConfig:
    """Apply SGLang's defaults and rules (server_args / speculative hook) to launch flags.

    Raises InvalidArgs with SGLang's message for combinations SGLang rejects.
    """
    a = norm_args(args)
    d = profile.defaults
    warnings: list[str] = []
    tp = _opt_int(a, "tp-size") or d.tp_size
    if tp < 1 or tp > profile.hardware.num_gpus:
        raise InvalidArgs(
            f"tp_size={tp} needs {tp} GPUs but the node has {profile.hardware.num_gpus}",
            "RuntimeError",
        )
    algorithm = _algorithm(a)
    attn_dp = _parallel(a, tp)
    if attn_dp > 1 and algorithm in ("NGRAM", "STANDALONE"):
        what = "ngram" if algorithm == "NGRAM" else "standalone"
        raise InvalidArgs(f"Currently {what} speculative decoding does not support dp "
                          "attention.", "ValueError")
    steps = topk = draft_tokens = None
    draft_tp = _opt_int(a, "speculative-draft-tp-size")
    backend = str(a.get("attention-backend") or "auto")
    adaptive = None
    if flag(a, "speculative-adaptive"):
        reason = _adaptive_unsupported(algorithm, _opt_int(a, "speculative-eagle-topk"))
        if reason:
            warnings.append(f"speculative_adaptive disabled: {reason}. "
                            "Falling back to static speculative params.")
        else:
            adaptive = _adaptive_hook(a)
            union = adaptive.candidate_steps
            topk = _opt_int(a, "speculative-eagle-topk") or 1
            steps = _opt_int(a, "speculative-num-steps")
            steps = union[len(union) // 2] if steps is None else steps
            if steps not in union:
                raise InvalidArgs(
                    f"--speculative-num-steps={steps} is not in the adaptive config "
                    f"candidate_steps {union}. Pass one of those values.", "ValueError")
            draft_tokens = steps + 1
    if algorithm is None:
        steps, topk, draft_tokens, draft_tp = 0, 1, 1, tp
    else:
        if adaptive is None:
            steps, topk, draft_tokens = _spec_numbers(a, algorithm, d, warnings)
        assert steps is not None and topk is not None and draft_tokens is not None
        # an adaptive server may start at a 0-step candidate (no drafting at that size)
        if steps < (0 if adaptive is not None else 1) or topk < 1 or draft_tokens < 1:
            raise InvalidArgs(
                "speculative_num_steps, speculative_eagle_topk and "
                "speculative_num_draft_tokens must be positive."
            )
        if topk > 1 and backend == "trtllm_mha":
            raise InvalidArgs("trtllm_mha backend only supports topk = 1 for speculative "
                              "decoding.", "ValueError")
        # without a draft-TP flag the draft follows the attention-TP group
        # (speculative/draft_parallel.py): all of TP, or tp / attn-dp-size with DP attention
        draft_tp = draft_tp if draft_tp is not None else tp // attn_dp
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
    cuda_graph, cuda_graph_max_bs = _cuda_graph(a, d)
    cfg = SimConfig(
        tp=tp,
        algorithm=algorithm,
        steps=steps,
        topk=topk,
        draft_tokens=draft_tokens,
        draft_tp=draft_tp,
        cuda_graph=cuda_graph,
        cuda_graph_max_bs=cuda_graph_max_bs,
        mem_fraction=mem_fraction,
        max_running=max(1, max_running),
        custom_all_reduce=not flag(a, "disable-custom-all-reduce"),
        nvls=flag(a, "enable-nccl-nvls"),
        overlap=not flag(a, "disable-overlap-schedule"),
        attention_backend=backend,
        env={k: str(v) for k, v in env.items() if k.startswith("NCCL_")},
        warnings=tuple(warnings),
        adaptive=adaptive,
        attn_dp=attn_dp,
        attention_mode=str(a.get("speculative-attention-mode") or "prefill"),
        draft_backend=str(a.get("speculative-draft-attention-backend") or "auto"),
        draft_quantization=str(a.get("speculative-draft-model-quantization") or "none"),
        args=a,
        environ={str(k): str(v) for k, v in env.items()},
    )
    return _with_residual(profile, cfg)


def _adaptive_hook(a: Mapping[str, Any]) -> AdaptiveConfig:
    path = a.get("speculative-adaptive-config")
    try:
        return load_config(None if path in (None, "") else str(path))
    except AdaptiveConfigError as exc:
        raise InvalidArgs(str(exc), exc.kind, "adaptive") from None


# ---------------------------------------------------------------- rule matching


def resolved_value(cfg: SimConfig, key: str) -> str | None:
    """A flag's value as the server runs it (after defaults), as text; None = not set."""
    spec = cfg.speculative
    known: dict[str, Any] = {
        "tp-size": cfg.tp,
        "speculative-algorithm": cfg.algorithm,
        "speculative-num-steps": cfg.steps if spec else None,
        "speculative-eagle-topk": cfg.topk if spec else None,
        "speculative-num-draft-tokens": cfg.draft_tokens if spec else None,
        "speculative-draft-tp-size": cfg.draft_tp if spec else None,
        "speculative-adaptive": cfg.adaptive is not None,
        "cuda-graph-max-bs": cfg.cuda_graph_max_bs,
        "disable-cuda-graph": not cfg.cuda_graph,
        "mem-fraction-static": cfg.mem_fraction,
        "max-running-requests": cfg.max_running,
        "disable-custom-all-reduce": not cfg.custom_all_reduce,
        "enable-nccl-nvls": cfg.nvls,
        "disable-overlap-schedule": not cfg.overlap,
        "attention-backend": cfg.attention_backend,
        "cuda-graph-max-bs-decode": cfg.cuda_graph_max_bs,
        "attn-dp-size": cfg.attn_dp,
    }
    value = known[key] if key in known else cfg.args.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def matches(cfg: SimConfig, args: Mapping[str, Any], env: Mapping[str, Any]) -> bool:
    """Every args item equals the resolved flag and every env item the variable
    (case-insensitive; a list means any of its values; "unset" matches an absent one)."""
    for key, want in args.items():
        options = [w.lower() for w in (want if isinstance(want, tuple | list) else [want])]
        got = resolved_value(cfg, str(key))
        if (got if got is not None else "unset").lower() not in [str(o) for o in options]:
            return False
    for var, want in env.items():
        options = [str(w).lower() for w in (want if isinstance(want, tuple | list) else [want])]
        if cfg.environ.get(var, cfg.env.get(var, "unset")).lower() not in options:
            return False
    return True


# ---------------------------------------------------------------- residual


def config_key(cfg: SimConfig) -> str:
    """Canonical text of what the server runs: the configuration's identity."""
    fields = {
        "tp": cfg.tp, "algorithm": cfg.algorithm, "steps": cfg.steps, "topk": cfg.topk,
        "draft_tokens": cfg.draft_tokens, "draft_tp": cfg.draft_tp,
        "cuda_graph": cfg.cuda_graph, "cuda_graph_max_bs": cfg.cuda_graph_max_bs,
        "mem_fraction": cfg.mem_fraction, "max_running": cfg.max_running,
        "custom_all_reduce": cfg.custom_all_reduce, "nvls": cfg.nvls, "overlap": cfg.overlap,
        "attention_backend": cfg.attention_backend, "env": dict(sorted(cfg.env.items())),
        "adaptive": cfg.adaptive.key() if cfg.adaptive else None,
    }
    # knobs added later join the identity only when set: older configurations keep theirs
    extra: dict[str, tuple[Any, Any]] = {
        "attn_dp": (cfg.attn_dp, 1), "attention_mode": (cfg.attention_mode, "prefill"),
        "draft_backend": (cfg.draft_backend, "auto"),
        "draft_quantization": (cfg.draft_quantization, "none")}
    fields.update({k: v for k, (v, default) in extra.items() if v != default})
    return json.dumps(fields, sort_keys=True)


def residual_factor(profile: Profile, cfg: SimConfig) -> float:
    """exp(sd x z), z a standard normal drawn from a hash of (seed, configuration)."""
    sd = profile.noise.config_residual_sd
    if sd <= 0:
        return 1.0
    text = f"{profile.noise.config_residual_seed}:{config_key(cfg)}"
    digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    u = (digest + 0.5) / 2**64  # uniform in (0, 1), never 0 or 1
    z = max(-3.0, min(3.0, statistics.NormalDist().inv_cdf(u)))  # no absurd outliers
    return math.exp(sd * z)


def _with_residual(profile: Profile, cfg: SimConfig) -> SimConfig:
    factor = residual_factor(profile, cfg)
    if factor == 1.0:
        return cfg
    return replace(cfg, residual=factor)
