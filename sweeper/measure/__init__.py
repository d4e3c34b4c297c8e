"""Measuring a running server: the streaming benchmark client, what it produces, the
statistics, accept-length algebra, and SGLang's log lines.

    result = run_benchmark("http://127.0.0.1:30000", BenchSpec(runs=5))
    print(result.value, result.stats.ci_low, result.stats.ci_high)
"""

from sweeper.measure.accept import acceptance_per_position, window_accept_length
from sweeper.measure.client import run_benchmark
from sweeper.measure.prompts import Message, PromptSet, load_prompts, render_plain
from sweeper.measure.runs import (
    BenchmarkError,
    BenchResult,
    RequestResult,
    RunResult,
    compare_outputs,
)
from sweeper.measure.sse import SSEEvent, iter_sse_events
from sweeper.measure.table import format_table
from sweeper.study import BenchSpec

__all__ = ["BenchResult", "BenchSpec", "BenchmarkError", "Message", "PromptSet",
           "RequestResult", "RunResult", "SSEEvent", "acceptance_per_position",
           "compare_outputs", "format_table", "iter_sse_events", "load_prompts",
           "render_plain", "run_benchmark", "window_accept_length"]
