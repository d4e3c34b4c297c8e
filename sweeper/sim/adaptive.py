"""Adaptive speculative decoding (--speculative-adaptive), as SGLang runs it.

Follows sglang/srt/speculative/adaptive_spec_params.py, adaptive_step_router.py and the
speculative hook in server_args (the per-batch-size version of the 0.5.2x line):

- the config (--speculative-adaptive-config PATH, else SGLang's built-in default) is a JSON
  object; integer-string keys are batch-size slots, each with a non-empty ``candidate_steps``
  list of non-negative ints (0 = no drafting at that batch size); the other top-level keys
  (ema_alpha, update_interval, warmup_batches, up/down_hysteresis, ceiling_coeff, strategy)
  are defaults every slot inherits; a slot's own keys win;
- a running batch is padded up to the next captured CUDA-graph batch size, then served by the
  slot with the largest key <= that size (the smallest slot below every key);
- within its slot, an EMA of accepted drafts per verify moves the steps between candidates:
  up past ``step - 0.5 + up_hysteresis``, down below ``prev - 0.5 + down_hysteresis``,
  after ``warmup_batches`` verifies and then every ``update_interval``; a slot at 0 steps
  probes the next candidate every ``update_interval`` batches.

Everything here is deterministic: the simulated server and ``expected_throughput`` replay
the same controller, so a client can measure an adaptive configuration against fixed ones.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# sglang.srt.speculative.adaptive_spec_params.DEFAULT_ADAPTIVE_CONFIG
DEFAULT_CONFIG: dict[str, Any] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25,
          "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
          "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
}
STRATEGIES = ("ema", "throughput_aware")


class AdaptiveConfigError(Exception):
    """A config SGLang refuses; ``kind`` is the exception type SGLang raises."""

    def __init__(self, message: str, kind: str = "ValueError") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Slot:
    """One batch-size slot: its candidates and the EMA controller's knobs."""

    batch_size: int
    candidate_steps: tuple[int, ...]
    ema_alpha: float = 0.2
    update_interval: int = 5
    warmup_batches: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0
    ceiling_coeff: float = 0.0


@dataclass(frozen=True)
class AdaptiveConfig:
    """A validated adaptive config: slots by batch size, and where it came from."""

    slots: tuple[Slot, ...]
    path: str | None = None
    strategy: str = "ema"

    @property
    def candidate_steps(self) -> list[int]:
        """Union of every slot's candidates (SGLang sizes its buffers for these)."""
        return sorted({s for slot in self.slots for s in slot.candidate_steps})

    def key(self) -> str:
        """Canonical text of the config, for hashing a configuration's identity."""
        return json.dumps([dataclass_items(s) for s in self.slots], sort_keys=True)


def dataclass_items(slot: Slot) -> dict[str, Any]:
    return {k: getattr(slot, k) for k in Slot.__dataclass_fields__}


def load_config(path: str | None) -> AdaptiveConfig:
    """Read and validate like SGLang; raises AdaptiveConfigError with SGLang's message."""
    if path is None:
        data: Any = DEFAULT_CONFIG
    else:
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            raise AdaptiveConfigError(
                f"[Errno 2] No such file or directory: {path!r}", "FileNotFoundError") from None
        except OSError as exc:
            raise AdaptiveConfigError(str(exc), type(exc).__name__) from None
        except json.JSONDecodeError as exc:
            raise AdaptiveConfigError(str(exc), "json.decoder.JSONDecodeError") from None
    return parse_config(data, path)


def parse_config(data: Any, path: str | None = None) -> AdaptiveConfig:
    if not isinstance(data, dict):
        raise AdaptiveConfigError(
            f"speculative adaptive config must be a JSON object, got {type(data).__name__}")
    strategy = data.get("strategy", "ema")
    if strategy not in STRATEGIES:
        raise AdaptiveConfigError(
            "speculative adaptive config 'strategy' must be 'ema' or 'throughput_aware', "
            f"got {strategy!r}")
    if strategy == "throughput_aware":
        # It profiles cost tables on the GPUs at start-up; the simulator says so instead of
        # pretending to run it with the EMA rules.
        raise AdaptiveConfigError(
            "sweeper.sim (a simulated SGLang server) does not model the 'throughput_aware' "
            "adaptive strategy; use 'ema'", "NotImplementedError")
    shared = {k: v for k, v in data.items() if not str(k).isdigit()}
    slots = []
    for key, entry in data.items():
        if not str(key).isdigit():
            continue
        if not isinstance(entry, dict):
            raise AdaptiveConfigError(
                f"'{type(entry).__name__}' object has no attribute 'get'", "AttributeError")
        steps = entry.get("candidate_steps")
        if (not isinstance(steps, list) or not steps
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                           for s in steps)):
            raise AdaptiveConfigError(
                f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}")
        merged = {**shared, **entry}
        slots.append(Slot(
            batch_size=int(key),
            candidate_steps=tuple(sorted(set(steps))),
            ema_alpha=float(merged.get("ema_alpha", 0.2)),
            update_interval=max(1, int(merged.get("update_interval", 5))),
            warmup_batches=int(merged.get("warmup_batches", 10)),
            down_hysteresis=float(merged.get("down_hysteresis", -0.25)),
            up_hysteresis=float(merged.get("up_hysteresis", 0.0)),
            ceiling_coeff=float(merged.get("ceiling_coeff", 0) or 0),
        ))
    if not slots:
        raise AdaptiveConfigError(
            "speculative_adaptive_config must contain at least one integer-string BS key, "
            'e.g. {"1": {"candidate_steps": [1,3,7]}}. '
            f"Got keys: {list(data.keys())}")
    return AdaptiveConfig(tuple(sorted(slots, key=lambda s: s.batch_size)), path, strategy)


@dataclass
class SlotState:
    """The EMA controller of one slot (AdaptiveStepSlot upstream)."""

    slot: Slot
    current: int
    ema: float
    batches: int = 0

    @classmethod
    def start(cls, slot: Slot, initial_steps: int) -> SlotState:
        cands = slot.candidate_steps
        current = initial_steps if initial_steps in cands else cands[len(cands) // 2]
        return cls(slot, current, float(current - 1))

    def update(self, accepted: list[int]) -> int | None:
        """Feed one verify's accepted-draft counts; the new steps when they change."""
        if not accepted:
            return None
        s = self.slot
        if self.current > 0:
            self.ema = (1 - s.ema_alpha) * self.ema + s.ema_alpha * sum(accepted) / len(accepted)
        self.batches += 1
        if self.batches <= s.warmup_batches:
            return None
        if (self.batches - s.warmup_batches) % s.update_interval:
            return None
        target = self._target()
        if target == self.current:
            return None
        self.current = target
        return target

    def _target(self) -> int:
        cands, s = self.slot.candidate_steps, self.slot
        idx = cands.index(self.current)
        if self.current == 0:
            # a no-drafting interval is over: probe the smallest positive candidate
            idx = min(idx + 1, len(cands) - 1)
            if cands[idx] > 0 and self.ema < 0:
                self.ema = float(cands[idx] - 1)
            return cands[idx]
        start = idx
        while idx > 0:
            prev = cands[idx - 1]
            drop = (0.5 if prev == 0 else prev - 0.5) + s.down_hysteresis
            if self.ema > drop:
                break
            idx -= 1
        if idx == start:
            while idx < len(cands) - 1 and self.ema > cands[idx] - 0.5 + s.up_hysteresis:
                idx += 1
        if s.ceiling_coeff > 0:
            # the EMA ceiling only caps moves that do not go up
            ceiling = max(1, math.ceil(self.ema * s.ceiling_coeff))
            if cands[idx] > ceiling and cands[idx] <= self.current:
                while idx > 0 and cands[idx] > ceiling:
                    idx -= 1
        return cands[idx]


@dataclass
class Controller:
    """Routes a running batch to its slot; the server and the model both step it."""

    config: AdaptiveConfig
    initial_steps: int
    graph_batch_sizes: list[int] | None  # captured sizes; None = CUDA graphs off
    states: dict[int, SlotState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._keys = [s.batch_size for s in self.config.slots]
        for slot in self.config.slots:
            self.states[slot.batch_size] = SlotState.start(slot, self.initial_steps)

    def slot_key(self, batch: int) -> int:
        sizes = self.graph_batch_sizes
        if sizes:
            i = bisect.bisect_left(sizes, batch)
            if i < len(sizes):
                batch = sizes[i]  # the batch runs padded to a captured graph
        i = bisect.bisect_right(self._keys, batch) - 1
        return self._keys[max(0, i)]

    def steps_for(self, batch: int) -> int:
        return self.states[self.slot_key(batch)].current

    def observe(self, accepted: list[int], batch: int) -> tuple[int, int, float] | None:
        """After a verify: (old, new, ema) when the slot switched steps."""
        state = self.states[self.slot_key(batch)]
        old = state.current
        new = state.update(accepted)
        return None if new is None else (old, new, state.ema)


def describe(config: AdaptiveConfig) -> Mapping[str, list[int]]:
    """Slots as /get_server_info and logs show them: {"1": [1, 3, 7], ...}."""
    return {str(s.batch_size): list(s.candidate_steps) for s in config.slots}
