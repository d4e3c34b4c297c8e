"""What the simulated hardware allows: NCCL settings, the documented hang, GPU memory.

Failures come in SGLang's start-up order (startup_failure): NCCL communicator init, the
hang, the KV-cache pool, then CUDA-graph capture.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweeper.sim.profiles import Profile
from sweeper.sim.rules import SimConfig, matches

NCCL_ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
NCCL_PROTOS = ("LL", "LL128", "Simple")
COLLNET = ("CollNetDirect", "CollNetChain")


@dataclass(frozen=True)
class Failure:
    """Why a configuration does not serve: kind is oom, nccl or hang; detail is for logs."""

    kind: str
    reason: str
    detail: Mapping[str, Any]


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
    return matches(cfg, rule.args, rule.env)


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
    # graphs are sized for the deepest chain the server may switch to (adaptive: the
    # widest candidate), draft tokens + the draft's own steps x topk slots
    if cfg.adaptive is not None:
        tokens_per_req = 2 * cfg.max_steps + 1
    else:
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
