"""What "best" means when a study measures several concurrency levels.

The best speculative configuration depends on how many requests a server runs at once:
more draft tokens are nearly free for one stream and cost real compute at 32. So a study
may measure a list of levels (``benchmark.concurrency: [1, 8, 32]``, every level on the
same server start) and say which it is tuned for:

* ``objective: {at: 8}``: tok/s per request at one level;
* ``objective: {mix: {1: 0.2, 8: 0.5, 32: 0.3}}``: a traffic mix, as the *weighted
  geometric mean* of tok/s per request over the levels. Per-request speed falls as
  concurrency grows, so an arithmetic mean would let the low levels dominate; the geometric
  mean weighs a 10% gain at 32 exactly like a 10% gain at 1 (times their weights);
* ``objective: pareto``: two objectives, tok/s per request at the lowest level (one user's
  experience) and total tok/s at the highest (the server's throughput); Optuna's
  multi-objective study, whose dashboard draws the Pareto front.

Without ``objective``, a single level is the objective and several levels are mixed with
equal weights. Levels and objective are part of what a study is: a stored study refuses a
study file that changed them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sweeper.study.base import fail, show

MAX_LEVELS = 8


@dataclass(frozen=True)
class Objective:
    kind: Literal["at", "mix", "pareto"]
    levels: tuple[int, ...]
    at: int | None = None
    weights: Mapping[int, float] = field(default_factory=dict)  # mix: normalised to 1

    @property
    def multi(self) -> bool:
        return self.kind == "pareto"

    @property
    def primary(self) -> int:
        """The level whose single-level figures stand for the trial (accept length, the
        benchmark JSON's headline): the objective's level, else the lowest."""
        return self.at if self.at is not None else min(self.levels)

    def metric_names(self) -> list[str]:
        if self.kind == "at":
            return ["tok/s" if self.levels == (self.at,) and self.at == 1
                    else f"tok/s per request @{self.at}"]
        if self.kind == "mix":
            return [f"tok/s per request, mix {self.mix_text()}"]
        return [f"tok/s per request @{min(self.levels)}", f"total tok/s @{max(self.levels)}"]

    def mix_text(self) -> str:
        return " ".join(f"{c}:{w:.0%}" for c, w in self.weights.items())

    def describe(self) -> str:
        if self.kind == "at":
            return f"tok/s per request at concurrency {self.at}"
        if self.kind == "mix":
            return f"a traffic mix of concurrency {self.mix_text()} (weighted geometric mean)"
        return (f"Pareto: tok/s per request at {min(self.levels)} against total tok/s at "
                f"{max(self.levels)}")

    def combine(self, per_request: Mapping[int, float]) -> float:
        """The scalar objective from tok/s per request at each level (``at`` and ``mix``;
        for ``pareto``, its first objective)."""
        if self.kind == "at":
            return per_request[self.at]  # type: ignore[index]
        if self.kind == "mix":
            return math.exp(sum(w * math.log(max(per_request[c], 1e-9))
                                for c, w in self.weights.items()))
        return per_request[min(self.levels)]

    def values(self, per_request: Mapping[int, float], total: Mapping[int, float]
               ) -> list[float]:
        """What Optuna is told: one value, or two for ``pareto``."""
        if self.multi:
            return [per_request[min(self.levels)], total[max(self.levels)]]
        return [self.combine(per_request)]

    def signature(self) -> dict[str, Any]:
        return {"kind": self.kind, "levels": list(self.levels), "at": self.at,
                "weights": {str(k): round(v, 6) for k, v in self.weights.items()}}

    @classmethod
    def from_signature(cls, data: Mapping[str, Any] | None) -> Objective:
        """The objective a study stored (``signature()``); a study stored before levels
        existed measured concurrency 1."""
        if not data:
            return cls("at", (1,), at=1)
        return cls(data["kind"], tuple(int(c) for c in data["levels"]), at=data.get("at"),
                   weights={int(k): float(v) for k, v in (data.get("weights") or {}).items()})

    def describe_change(self, stored: Objective) -> str:
        """What differs from the stored objective, in words (for the refusal)."""
        if stored.levels != self.levels:
            return (f"benchmark.concurrency is {list(self.levels)}, the stored study measured "
                    f"{list(stored.levels)}")
        return f"objective is {self.describe()}, the stored study's is {stored.describe()}"


def parse_levels(path: Path, raw: Any) -> tuple[int, ...]:
    key = "benchmark.concurrency"
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        fail(path, key, "an empty list", "give at least one level, e.g. [1, 8]")
    if len(values) > MAX_LEVELS:
        fail(path, key, f"{len(values)} levels", f"keep it to {MAX_LEVELS} (each one is "
             "measured in every trial)")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            fail(path, f"{key}[{i}]" if isinstance(raw, list) else key,
                 f"expected a whole number >= 1, got {v!r}", "write e.g. 1 or [1, 8, 32]")
    if len(set(values)) != len(values):
        fail(path, key, f"a level is listed twice in {values}", "list each level once")
    return tuple(values)


def parse_objective(path: Path, raw: Any, levels: Sequence[int]) -> Objective:
    lv = tuple(levels)
    if raw is None:
        if len(lv) == 1:
            return Objective("at", lv, at=lv[0])
        return Objective("mix", lv, weights={c: 1 / len(lv) for c in lv})
    if raw == "pareto":
        if len(lv) < 2:
            fail(path, "objective", "pareto needs at least two concurrency levels",
                 "list them in benchmark.concurrency, e.g. [1, 32]")
        return Objective("pareto", lv)
    if not isinstance(raw, dict) or len(raw) != 1 or next(iter(raw)) not in ("at", "mix"):
        fail(path, "objective", f"{show(raw)} is not an objective",
             "write {at: 8}, {mix: {1: 0.2, 8: 0.8}} or pareto")
    (form, body), = raw.items()
    if form == "at":
        if isinstance(body, bool) or not isinstance(body, int) or body not in lv:
            fail(path, "objective.at", f"{show(body)} is not one of the measured levels "
                 f"{list(lv)}", "pick a level from benchmark.concurrency")
        return Objective("at", lv, at=body)
    if not isinstance(body, dict) or not body:
        fail(path, "objective.mix", f"expected a mapping of level: weight, got {show(body)}",
             "write e.g. {1: 0.2, 8: 0.5, 32: 0.3}")
    weights: dict[int, float] = {}
    for level, w in body.items():
        key = f"objective.mix.{level}"
        if isinstance(level, bool) or not isinstance(level, int) or level not in lv:
            fail(path, key, f"{show(level)} is not one of the measured levels {list(lv)}",
                 "weigh only levels listed in benchmark.concurrency")
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) \
                or w <= 0:
            fail(path, key, f"weight {show(w)} is not a positive number", "write e.g. 0.5")
        weights[level] = float(w)
    total = sum(weights.values())
    return Objective("mix", lv, weights={c: w / total for c, w in weights.items()})

