"""SGLang's launch-flag rules: flags + env -> the configuration the server would run.

Defaults and adjustments follow SGLang's python/sglang/srt/server_args.py and its
speculative hook (docs/SGLANG.md, "Launch"):
all-or-none steps/topk/draft tokens, topk 1 forcing draft tokens = steps + 1, the adaptive
hook (sweeper.sim.adaptive), draft TP dividing TP. A configuration also gets its fixed
residual speed factor here (profile ``noise.config_residual_sd``), so every consumer of a
SimConfig, the real-time server included, sees the same figure.
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

ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")


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
    adaptive = None
    if flag(a, "speculative-adaptive"):
        reason = _adaptive_unsupported(algorithm, topk)
        if reason:
            warnings.append(f"speculative_adaptive disabled: {reason}. "
                            "Falling back to static speculative params.")
        else:
            adaptive = _adaptive_hook(a)
            union = adaptive.candidate_steps
            topk = 1 if topk is None else topk
            steps = union[len(union) // 2] if steps is None else steps
            if steps not in union:
                raise InvalidArgs(
                    f"--speculative-num-steps={steps} is not in the adaptive config "
                    f"candidate_steps {union}. Pass one of those values.", "ValueError")
            draft_tokens = steps + 1
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
    cfg = SimConfig(
        tp=tp,
        algorithm=algorithm,
        steps=steps,
        topk=topk,
        draft_tokens=draft_tokens,
        draft_tp=draft_tp,
        cuda_graph=not flag(a, "disable-cuda-graph"),
        cuda_graph_max_bs=_opt_int(a, "cuda-graph-max-bs") or d.cuda_graph_max_bs,
        mem_fraction=mem_fraction,
        max_running=max(1, max_running),
        custom_all_reduce=not flag(a, "disable-custom-all-reduce"),
        nvls=flag(a, "enable-nccl-nvls"),
        overlap=not flag(a, "disable-overlap-schedule"),
        attention_backend=backend,
        env={k: str(v) for k, v in env.items() if k.startswith("NCCL_")},
        warnings=tuple(warnings),
        adaptive=adaptive,
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
