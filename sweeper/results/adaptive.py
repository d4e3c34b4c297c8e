"""SGLang's adaptive speculative decoding from a study's per-level winners.

SGLang (0.5.2x; 0.5.23's speculative/adaptive_spec_params.py) can switch speculative steps
by running batch size itself: ``--speculative-adaptive --speculative-adaptive-config PATH``,
where PATH is a JSON object keyed by batch size, each slot listing its ``candidate_steps``
(0 = no drafting at that batch size), e.g. ``{"1": {"candidate_steps": [1, 3, 7]}}``;
top-level keys that are not integers (``ema_alpha``...) are merged into every slot. A
running batch is first padded up to the next captured CUDA-graph batch size and then served
by the slot with the largest key at or below that padded size: a slot keyed by a measured
concurrency C serves every batch that pads to C or more (so some batches below C too, e.g.
9..16 with graphs at 8 and 16), up to the next level's. A 0-step slot still runs the
draft's extend pass each iteration unless ``SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1`` is
in the server's environment: the export puts it there whenever it writes a 0-step slot.

Adaptive mode runs EAGLE/EAGLE3 with topk 1 only, and it switches steps, nothing else: so
it can stand for the per-level winners only when they are topk-1 configurations that differ
in steps alone (the derived draft tokens follow). A level won by the baseline becomes a
slot of 0 steps (no drafting there). Each slot gets its winner's steps as its only
candidate: that is what was measured; the EMA controller has nothing else to move to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweeper.errors import InputError
from sweeper.study import DRAFT, STEPS, TOPK

FLAGS = ("speculative-adaptive", "speculative-adaptive-config")
SKIP_ZERO_STEP_ENV = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"


@dataclass(frozen=True)
class AdaptivePlan:
    """The adaptive export: the fixed configuration it starts from and the JSON."""

    effective: dict[str, Any]  # a speculative winner's configuration (its steps start)
    config: dict[str, dict[str, list[int]]]  # SGLang's adaptive JSON, keyed by batch size

    @property
    def steps_by_level(self) -> dict[int, int]:
        return {int(k): v["candidate_steps"][0] for k, v in self.config.items()}

    @property
    def has_zero_step_slot(self) -> bool:
        return any(0 in v["candidate_steps"] for v in self.config.values())


def plan(winners: Mapping[int, Mapping[str, Any]], where: str) -> AdaptivePlan:
    """From each level's winning configuration (effective parameters; {} = the baseline),
    the adaptive plan; InputError naming what keeps it from being one (``where`` starts
    the message)."""
    levels = sorted(winners)
    if len(levels) < 2:
        raise InputError(f"{where}: --adaptive needs winners at two or more concurrency "
                         "levels (benchmark.concurrency: [1, 16], say)")
    spec = {c: dict(winners[c]) for c in levels if winners[c]}
    if not spec:
        raise InputError(f"{where}: --adaptive: no speculation won at any level (the "
                         "baseline won everywhere); export the baseline with --at LEVEL")
    for c, eff in spec.items():
        if int(eff.get(TOPK, 1)) != 1:
            raise InputError(f"{where}: --adaptive: the winner at concurrency {c} has topk "
                             f"{eff.get(TOPK)}; SGLang's adaptive mode runs topk 1 only. "
                             "Export one level with --at LEVEL")
    first = spec[min(spec)]
    rest = {k: v for k, v in first.items() if k not in (STEPS, DRAFT)}
    for c, eff in spec.items():
        others = {k: v for k, v in eff.items() if k not in (STEPS, DRAFT)}
        if others != rest:
            diff = sorted(k for k in set(rest) | set(others) if rest.get(k) != others.get(k))
            raise InputError(
                f"{where}: --adaptive: the winners at concurrency {min(spec)} and {c} differ "
                f"in {', '.join(diff)}, not only in steps; adaptive mode switches steps "
                "alone. Export one level with --at LEVEL")
    config = {str(c): {"candidate_steps": [int(winners[c].get(STEPS, 0)) if winners[c]
                                           else 0]} for c in levels}
    return AdaptivePlan(first, config)
