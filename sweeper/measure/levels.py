"""Every concurrency level of a study, measured on the same server start (the restart is
the expensive part; each extra level costs only its benchmark).

Per level: tok/s per request (each request's tokens / its end-to-end time, averaged over the
round's requests), total tok/s (all tokens of a round / its wall time), time to first token,
inter-token latency (the decode time per token after the first), accept length. Each as
per-run values and a summary with a 95% interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from sweeper.errors import BenchmarkInterrupted
from sweeper.measure.client import run_benchmark
from sweeper.measure.prompts import PromptSet
from sweeper.measure.runs import BenchResult
from sweeper.measure.stats import summarize
from sweeper.study import BenchSpec
from sweeper.study.objective import Objective


def run_levels(base_url: str, spec: BenchSpec, *,
               on_progress: Callable[[str], None] | None = None,
               check_server: Callable[[], None] | None = None,
               prompts: PromptSet | None = None, **kwargs: Any) -> dict[int, BenchResult]:
    """One benchmark per level of ``spec.concurrency``, in the study's order."""
    progress = on_progress or (lambda _msg: None)
    out: dict[int, BenchResult] = {}
    levels = spec.levels
    for level in levels:
        tag = f"concurrency {level}: " if len(levels) > 1 else ""

        def tagged(msg: str, tag: str = tag) -> None:
            progress(f"{tag}{msg}")

        try:
            out[level] = run_benchmark(base_url, spec.at_level(level), on_progress=tagged,
                                       check_server=check_server, prompts=prompts, **kwargs)
        except KeyboardInterrupt as exc:  # the levels already measured are kept too
            done = {c: [r.per_request_tok_s for r in b.runs if r.counted]
                    for c, b in out.items()}
            raise BenchmarkInterrupted({**done, **getattr(exc, "levels", {})}) from exc
    return out


def _stat(values: list[float]) -> dict[str, float | int | None] | None:
    return summarize(values).to_dict() if values else None


def level_summary(result: BenchResult) -> dict[str, Any]:
    """What a trial records for one level (JSON-ready)."""
    counted = [run for run in result.runs if run.counted]
    per_request = [run.per_request_tok_s for run in counted]
    total = [run.tok_s for run in counted]
    reqs = [r for run in counted for r in run.requests if r.ok]
    ttft = [r.ttft_s for r in reqs if r.ttft_s is not None]
    itl = [1.0 / r.decode_tok_s for r in reqs if r.decode_tok_s]
    return {
        "per_request_runs": per_request, "total_runs": total,
        "per_request": _stat(per_request), "total": _stat(total),
        "ttft_s": _stat(ttft), "itl_s": _stat(itl),
        "accept_length": result.accept_length,
    }


def objective_runs(levels: dict[int, dict[str, Any]],
                   combine: Callable[[dict[int, float]], float]) -> list[float]:
    """The objective per run index: run i of every level combined (every level has the same
    number of counted runs unless some were flagged; then the shortest decides)."""
    series = {c: s["per_request_runs"] for c, s in levels.items()}
    n = min((len(v) for v in series.values()), default=0)
    out = []
    for i in range(n):
        value = combine({c: v[i] for c, v in series.items()})
        if math.isfinite(value):
            out.append(value)
    return out


def _aggregate(values: list[float], how: str) -> float:
    st = summarize(values)
    return float(getattr(st, how, st.mean))


def objective_figures(results: dict[int, BenchResult], goal: Objective, how: str = "mean"
                      ) -> tuple[dict[int, dict[str, Any]], list[float], list[float]]:
    """What a trial records: every level's summary, the objective's per-run series (the
    trial's runs: replicates pool them) and the values Optuna is told (``how`` = the
    study's mean/median/min over runs; ``pareto``: tok/s per request at the lowest level
    and total tok/s at the highest, each over its own runs)."""
    levels = {c: level_summary(r) for c, r in results.items()}
    series = objective_runs(levels, goal.combine)
    if goal.multi:
        low, high = min(goal.levels), max(goal.levels)
        values = [_aggregate(levels[low]["per_request_runs"], how),
                  _aggregate(levels[high]["total_runs"], how)]
    else:
        values = [_aggregate(series, how)] if series else []
    return levels, series, values
