"""The simulator's ground truth: what a client measuring the simulated server with
``--sim-noise 0`` sees, from the performance model (sweeper.sim.model) without the clock.

The tests and the bench compare measurements against ``expected_throughput``; the server
paces tokens with the same model functions, so the two agree within timer/HTTP overhead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sweeper.sim import prompts as sim_prompts
from sweeper.sim.hardware import startup_failure
from sweeper.sim.model import (
    REFERENCE_TOKENS,
    accept_distribution,
    adaptive_schedule,
    at_steps,
    cycle_ms,
    depth_acceptance,
    eager,
    mean_accept_length,
    prefill_ms,
    verify_steps_for,
)
from sweeper.sim.profiles import Profile, load_profile
from sweeper.sim.rules import InvalidArgs, SimConfig, resolve_config


@dataclass(frozen=True)
class Expectation:
    """Noise-free ground truth for one configuration.

    tok_s: per-request output tokens / end-to-end seconds of a REFERENCE_TOKENS (500) stream,
    prefill included, with ``concurrency`` requests decoding together (what the sweeper's
    benchmark reports at concurrency 1); None when the configuration fails.
    total_tok_s: what the server delivers to all ``concurrency`` streams together (tokens /
    wall time of the round: the benchmark's figure above concurrency 1); requests beyond
    --max-running-requests wait for a later wave. decode_tok_s: steady-state accept_length /
    cycle of one request. failure: "oom", "nccl", "hang", "invalid_args" or None.
    steps: the speculative steps the server runs at this concurrency (adaptive: chosen by
    SGLang's controller; 0 = no drafting).
    """

    tok_s: float | None
    accept_length: float | None
    failure: str | None
    reason: str
    decode_tok_s: float | None = None
    cycle_ms: float | None = None
    ttft_ms: float | None = None
    config: SimConfig | None = None
    total_tok_s: float | None = None
    steps: int | None = None



def _waves(concurrency: int, batch: int) -> list[int]:
    full, rest = divmod(concurrency, batch)
    return [batch] * full + ([rest] if rest else [])


def expected_throughput(
    profile: Profile | str,
    args: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    concurrency: int = 1,
    prompts: Sequence[str] | None = None,
) -> Expectation:
    """Noise-free throughput of a configuration on a profile, or the failure it hits.

    ``prompts``: the texts of a prompt set; the figures are then the mean over its prompts
    of each prompt's own (its category's acceptance, sweeper.sim.prompts): the ground
    truth of a study measured on that set. Without: a prompt of no category.

    ``args`` are SGLang flags without ``--`` (``{"speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 2, "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 3}``), ``env`` the server's environment (NCCL_*).
    SGLang's adjustments apply (topk == 1 forces draft tokens = steps + 1).
    ``tok_s`` is what a client measures per request: 500 completion tokens over the
    end-to-end time (prefill included), with ``concurrency`` requests decoding together
    (capped at --max-running-requests: the rest would queue); ``total_tok_s`` is the
    server's aggregate over the ``concurrency`` streams.
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
        return Expectation(None, None, "invalid_args",
                           f"{exc.kind}: {exc}" if str(exc) else exc.kind)
    failure = startup_failure(prof, cfg)
    if failure:
        return Expectation(None, None, failure.kind, failure.reason, config=cfg)
    factors = [sim_prompts.accept_factor(prof, t) for t in prompts or ()]
    if cfg.speculative and any(f != 1.0 for f in factors):
        each = [_expected(prof, cfg, concurrency, f) for f in factors]
        mean = each[0]
        return replace(mean, tok_s=_mean(e.tok_s for e in each),
                       accept_length=_mean(e.accept_length for e in each),
                       decode_tok_s=_mean(e.decode_tok_s for e in each),
                       total_tok_s=_mean(e.total_tok_s for e in each),
                       reason=mean.reason + f"; mean over {len(each)} prompts")
    return _expected(prof, cfg, concurrency, 1.0)


def _mean(values: Any) -> float:
    vals = list(values)
    return sum(vals) / len(vals)


def _expected(prof: Profile, cfg: SimConfig, concurrency: int,
              factor: float) -> Expectation:
    """expected_throughput of a resolved configuration that starts, at one acceptance
    factor (a prompt's)."""
    concurrency = max(1, concurrency)
    batch = min(concurrency, cfg.max_running)

    def e2e(b: int) -> tuple[float, float, float | None, float, int]:
        """(e2e ms, ttft ms, accept length, cycle ms, steps) of one wave of b requests."""
        if cfg.adaptive is not None:
            r = adaptive_schedule(prof, cfg, b, factor)
            accept = r.tokens / r.verify_ct if r.verify_ct else None
            return r.e2e_ms, r.ttft_ms, accept, cycle_ms(prof, at_steps(cfg, r.steps), b), r.steps
        cycle, ttft = cycle_ms(prof, cfg, b), prefill_ms(prof, cfg, b)
        if not cfg.speculative:
            return ttft + (REFERENCE_TOKENS - 1) * cycle, ttft, None, cycle, 0
        q = depth_acceptance(prof, cfg, factor)
        n = verify_steps_for(accept_distribution(q), REFERENCE_TOKENS)
        return ttft + n * cycle, ttft, mean_accept_length(q), cycle, cfg.steps

    e2e_ms, ttft, accept, cycle, steps = e2e(batch)
    wall = sum(e2e(b)[0] if b != batch else e2e_ms for b in _waves(concurrency, batch))
    graph = "eager" if eager(cfg, batch) else "cuda graph"
    label = cfg.algorithm or "no speculation"
    if cfg.adaptive is not None:
        label += f" adaptive ({steps} steps at batch {batch})"
    reason = (f"{label}: accept length {accept or 1.0:.2f}, cycle {cycle:.2f} ms ({graph}), "
              f"batch {batch}")
    return Expectation(
        tok_s=REFERENCE_TOKENS / e2e_ms * 1000.0,
        accept_length=accept if cfg.speculative else None,
        failure=None,
        reason=reason,
        decode_tok_s=(accept or 1.0) / cycle * 1000.0,
        cycle_ms=cycle,
        ttft_ms=ttft,
        config=cfg,
        total_tok_s=concurrency * REFERENCE_TOKENS / wall * 1000.0,
        steps=steps if cfg.speculative else None,
    )
