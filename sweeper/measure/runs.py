"""What a benchmark produced: per request, per run (one round of concurrent requests),
and per benchmark (statistics, accept length), plus the lossless comparison of outputs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sweeper.errors import BenchmarkError  # noqa: F401 - re-exported
from sweeper.measure.stats import Stats, summarize
from sweeper.study import BenchSpec


@dataclass(frozen=True)
class RequestResult:
    """One streamed request. ``tok_s`` = completion_tokens / e2e_s (the campaign's figure)."""

    ok: bool
    error: str | None
    prompt_index: int
    prompt_tokens: int | None
    completion_tokens: int
    ttft_s: float | None
    e2e_s: float
    tok_s: float
    decode_tok_s: float | None
    n_chunks: int
    gap_mean_s: float | None
    gap_max_s: float | None
    short: bool
    text: str
    attempts: int = 1
    client_cpu_s: float = 0.0  # this thread's CPU time spent on the request
    spec_verify_ct: int | None = None
    spec_accept_histogram: list[int] | None = None

    def to_dict(self, include_text: bool = True) -> dict[str, Any]:
        d = asdict(self)
        if not include_text:
            d.pop("text")
        return d



@dataclass(frozen=True)
class RunResult:
    """One round of ``concurrency`` requests.

    ``tok_s``: the request's tok/s at concurrency 1; above it, aggregate output tok/s (all
    tokens of the round / its wall time). ``per_request_tok_s``: mean of the requests' tok/s.
    """

    index: int
    requests: list[RequestResult]
    tok_s: float
    per_request_tok_s: float
    wall_s: float
    ok: bool
    error: str | None
    short: bool
    warmup: bool = False
    # where its prompts start in the prompt set's one sequence (measure/prompts.py): two
    # runs at the same position and concurrency sent the same prompts (a pair)
    position: int | None = None
    categories: list[str | None] = field(default_factory=list)  # per request

    @property
    def counted(self) -> bool:
        """Whether this run enters the statistics."""
        return self.ok and not self.short

    def to_dict(self, include_text: bool = True) -> dict[str, Any]:
        return {
            "index": self.index,
            "warmup": self.warmup,
            "tok_s": self.tok_s,
            "per_request_tok_s": self.per_request_tok_s,
            "wall_s": self.wall_s,
            "ok": self.ok,
            "error": self.error,
            "short": self.short,
            "counted": self.counted,
            "position": self.position,
            "categories": self.categories,
            "requests": [r.to_dict(include_text) for r in self.requests],
        }


def make_run(index: int, requests: list[RequestResult], wall: float, warmup: bool,
             position: int | None = None,
             categories: list[str | None] | None = None) -> RunResult:
    errors = [r.error for r in requests if not r.ok]
    tokens = sum(r.completion_tokens for r in requests if r.ok)
    if len(requests) == 1:
        tok_s = requests[0].tok_s if requests[0].ok else 0.0
    else:
        tok_s = tokens / wall if wall > 0 else 0.0
    oks = [r.tok_s for r in requests if r.ok]
    return RunResult(
        index=index,
        requests=requests,
        tok_s=tok_s,
        per_request_tok_s=sum(oks) / len(oks) if oks else 0.0,
        wall_s=wall,
        ok=not errors,
        error="; ".join(sorted({str(e) for e in errors})) if errors else None,
        short=any(r.short for r in requests),
        warmup=warmup,
        position=position,
        categories=list(categories or []),
    )



@dataclass(frozen=True)
class BenchResult:
    """A benchmark of one server configuration. ``stats`` covers counted measured runs only."""

    runs: list[RunResult]
    warmup_runs: list[RunResult]
    stats: Stats
    spec: BenchSpec
    prompt_hash: str
    base_url: str
    model: str | None
    started_at: str
    duration_s: float
    accept_length: float | None = None
    accept_length_source: str = "none"  # generate_meta | server_rounds | window | cumulative | none
    accept_length_server: dict[str, float | None] = field(default_factory=dict)
    accept_histogram: list[int] | None = None
    per_position_acceptance: list[float | None] | None = None
    cache_flush_failures: int | None = None  # None: benchmark.flush_cache was off

    @property
    def value(self) -> float:
        """The aggregate of per-run tok/s (spec.aggregate: mean, median or min)."""
        return getattr(self.stats, self.spec.aggregate)

    @property
    def n_errors(self) -> int:
        """Failed requests in measured runs."""
        return sum(1 for run in self.runs for r in run.requests if not r.ok)

    @property
    def n_short(self) -> int:
        """Requests in measured runs that produced fewer than max_tokens."""
        return sum(1 for run in self.runs for r in run.requests if r.short)

    @property
    def n_excluded(self) -> int:
        return sum(1 for run in self.runs if not run.counted)

    @property
    def counted_positions(self) -> list[int | None]:
        """Per counted run (the order of ``stats``' runs), where its prompts start in the
        set's sequence: the key that pairs runs of two configurations."""
        return [r.position for r in self.runs if r.counted]

    def outputs(self) -> list[str]:
        """Generated texts of the measured runs, in run then stream order (lossless check)."""
        return [r.text for run in self.runs for r in run.requests]

    def _request_stat(self, attr: str) -> dict[str, Any] | None:
        vals = [
            getattr(r, attr)
            for run in self.runs
            if run.counted
            for r in run.requests
            if getattr(r, attr) is not None
        ]
        return summarize(vals).to_dict() if vals else None

    def to_dict(self, include_text: bool = True) -> dict[str, Any]:
        """JSON-serialisable (strict JSON: NaN becomes None) summary and raw runs."""
        return {
            "value": self.value,
            "aggregate": self.spec.aggregate,
            "stats": self.stats.to_dict(),
            "n_runs": len(self.runs),
            "n_excluded": self.n_excluded,
            "n_errors": self.n_errors,
            "n_short": self.n_short,
            "ttft_s": self._request_stat("ttft_s"),
            "decode_tok_s": self._request_stat("decode_tok_s"),
            "client_cpu_s_per_request": self._request_stat("client_cpu_s"),
            "accept_length": self.accept_length,
            "accept_length_source": self.accept_length_source,
            "accept_length_server": self.accept_length_server,
            "accept_histogram": self.accept_histogram,
            "per_position_acceptance": self.per_position_acceptance,
            "cache_flush_failures": self.cache_flush_failures,
            "prompt_hash": self.prompt_hash,
            "run_positions": self.counted_positions,
            "spec": self.spec.to_dict(),
            "base_url": self.base_url,
            "model": self.model,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "runs": [r.to_dict(include_text) for r in self.runs],
            "warmup_runs": [r.to_dict(include_text) for r in self.warmup_runs],
        }


def compare_outputs(reference: Sequence[str], candidate: Sequence[str]) -> list[int]:
    """Indices where a candidate's temperature-0 output differs from the reference's.

    Exact string comparison: speculative decoding is meant to be lossless, so any difference
    on the same prompts at temperature 0 is worth flagging (it may still be benign numerical
    nondeterminism; the caller reports, it does not judge). Indices present in only one list
    count as different.
    """
    n = max(len(reference), len(candidate))
    return [
        i
        for i in range(n)
        if i >= len(reference) or i >= len(candidate) or reference[i] != candidate[i]
    ]

