"""Several concurrency levels read back from the study: each configuration's figures per
level (replicates pooled), the winner per level, and the Pareto front of a ``pareto``
study (tok/s per request at the lowest level against total tok/s at the highest).

The winner at a level is the configuration with the highest mean tok/s per request there
(one user's speed at that load); the baseline competes too, since at high concurrency no
speculation can be the fastest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sweeper.measure.stats import Stats, summarize
from sweeper.study.objective import Objective


@dataclass
class LevelRuns:
    """One configuration at one level, every trial's runs pooled."""

    level: int
    per_request: list[float] = field(default_factory=list)  # per-run tok/s per request
    total: list[float] = field(default_factory=list)  # per-run total tok/s
    ttft_s: list[float] = field(default_factory=list)  # per trial: mean time to first token
    itl_s: list[float] = field(default_factory=list)  # per trial: mean inter-token latency
    accept: list[float] = field(default_factory=list)  # per trial: accept length

    def add(self, summary: dict[str, Any]) -> None:
        """A trial's ``level_summary`` (measure/levels.py)."""
        self.per_request.extend(float(v) for v in summary.get("per_request_runs") or [])
        self.total.extend(float(v) for v in summary.get("total_runs") or [])
        for name, out in (("ttft_s", self.ttft_s), ("itl_s", self.itl_s)):
            mean = (summary.get(name) or {}).get("mean")
            if mean is not None:
                out.append(float(mean))
        if summary.get("accept_length") is not None:
            self.accept.append(float(summary["accept_length"]))

    @property
    def stats(self) -> Stats:
        return summarize(self.per_request)

    @property
    def total_stats(self) -> Stats:
        return summarize(self.total)

    @staticmethod
    def _mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    @property
    def ttft(self) -> float | None:
        return self._mean(self.ttft_s)

    @property
    def itl(self) -> float | None:
        return self._mean(self.itl_s)

    @property
    def accept_length(self) -> float | None:
        return self._mean(self.accept)


class Leveled(Protocol):
    """What the per-level rules read of a pooled result (results/verdict.ConfigResult):
    a protocol, so that verdict.py imports this module and not the other way round."""

    @property
    def levels(self) -> Mapping[int, LevelRuns]: ...


ConfigResult = TypeVar("ConfigResult", bound=Leveled)


def _measured(results: Sequence[ConfigResult], level: int) -> list[ConfigResult]:
    return [r for r in results if level in r.levels and r.levels[level].per_request]


def level_winners(results: Sequence[ConfigResult], levels: Sequence[int]
                  ) -> dict[int, ConfigResult]:
    """The best configuration at each level (highest mean tok/s per request there)."""
    out: dict[int, ConfigResult] = {}
    for level in levels:
        cands = _measured(results, level)
        if cands:
            out[level] = max(cands, key=lambda r: r.levels[level].stats.mean)
    return out


def pareto_point(result: ConfigResult, goal: Objective) -> tuple[float, float] | None:
    """(tok/s per request at the lowest level, total tok/s at the highest), pooled means."""
    low, high = min(goal.levels), max(goal.levels)
    if low not in result.levels or high not in result.levels:
        return None
    a, b = result.levels[low], result.levels[high]
    if not a.per_request or not b.total:
        return None
    return a.stats.mean, b.total_stats.mean


def pareto_front(results: Sequence[ConfigResult], goal: Objective) -> list[ConfigResult]:
    """Configurations no other beats on both objectives, by tok/s per request (best
    first)."""
    points = [(r, p) for r in results if (p := pareto_point(r, goal)) is not None]
    front = [r for r, p in points
             if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for _, q in points)]
    return sorted(front, key=lambda r: -(pareto_point(r, goal) or (0.0, 0.0))[0])
