"""Throughput benchmark of a running SGLang server over HTTP (httpx, streaming).

One benchmark = ``warmup`` unmeasured runs, then ``runs`` measured runs. A run is one round of
``concurrency`` concurrent streaming requests (threads sharing one ``httpx.Client``). Per
request we time the first token and the end of the stream, read the token count from the
server's usage / meta_info (a chunk may carry several tokens when a verify step accepts
several drafts, so chunks are never counted) and keep the generated text for the lossless
check. Runs with errors or short outputs are flagged and excluded from the statistics.

Failure handling, and why it looks like this: a transport error (connection refused or cut,
a stalled stream, a 5xx) may mean the server process died, which is the configuration's fault
and must become a crash trial, or a blip on the network, which deserves a retry. So on a
transport error we first ask ``check_server()`` (it raises ``ConfigurationFailure`` when the
process is gone) and only then retry, within a hard time budget; when retries run out we raise
``BenchmarkTransportError`` (the infrastructure's fault). A server that answers with an error
event or a 4xx is not retried: asking again gives the same answer.

Typical use::

    result = run_benchmark("http://127.0.0.1:30000", BenchSpec(runs=5))
    print(result.value, result.stats.ci_low, result.stats.ci_high)
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import httpx
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
)

from sweeper.errors import BenchmarkTransportError, InputError, SweeperError
from sweeper.measure.prompts import Message, PromptSet, load_prompts, render_plain
from sweeper.measure.sse import SSEEvent, error_text, iter_sse_events
from sweeper.measure.stats import Stats, summarize

if TYPE_CHECKING:
    from rich.table import Table

OBJECTIVES = ("mean", "median", "min")
# re-exported: callers import the whole benchmark surface from here
__all__ = ["BenchResult", "BenchSpec", "BenchmarkError", "Message", "PromptSet", "RequestResult",
           "RunResult", "SSEEvent", "compare_outputs", "format_table", "iter_sse_events",
           "load_prompts", "render_plain", "run_benchmark"]


class BenchmarkError(SweeperError):
    """No measured run was usable (every run had errors or short outputs).

    ``result`` holds the flagged runs so the caller can store them with the trial.
    """

    def __init__(self, message: str, result: BenchResult) -> None:
        super().__init__(message)
        self.result = result


# --------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class BenchSpec:
    """What to measure. Field names follow the study file's ``benchmark:`` block."""

    api: Literal["chat", "generate"] = "chat"
    max_tokens: int = 500
    runs: int = 5
    warmup: int = 1
    concurrency: int = 1
    prompts: str = "builtin"  # or a path to a .jsonl file
    request_timeout: float = 600.0  # total deadline per request, enforced by us
    model: str | None = None  # None -> ask /v1/models, else send "default"
    objective: str = "mean"  # "mean" | "median" | "min" of per-run tok/s
    # A stream silent this long is stalled (httpx's read timeout is per chunk).
    stall_timeout: float = 120.0
    connect_timeout: float = 10.0
    # Transport retries per request: at most this many attempts, within this many seconds.
    max_attempts: int = 3
    retry_budget_s: float = 60.0
    retry_wait_s: float = 0.5  # first back-off; doubles per attempt, capped at 5 s

    def __post_init__(self) -> None:
        problems = []
        if self.api not in ("chat", "generate"):
            problems.append(f"api must be chat or generate, not {self.api!r}")
        if self.objective not in OBJECTIVES:
            problems.append(f"objective must be one of {', '.join(OBJECTIVES)}")
        for name in ("max_tokens", "runs", "concurrency", "max_attempts"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
        if self.warmup < 0:
            problems.append("warmup must be >= 0")
        for name in ("request_timeout", "stall_timeout", "connect_timeout"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0")
        if problems:
            raise InputError("benchmark: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- requests


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


class _Retryable(Exception):
    """A transport-level failure worth another attempt (after check_server)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Stream:
    """Accumulates one response stream: timings, text, token counts."""

    def __init__(self, api: str, t0: float) -> None:
        self.api = api
        self.t0 = t0
        self.text = ""
        self.chunk_times: list[float] = []
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.verify_ct: int | None = None
        self.histogram: list[int] | None = None

    def add(self, obj: dict[str, Any], now: float) -> None:
        if self.api == "chat":
            self._add_chat(obj, now)
        else:
            self._add_generate(obj, now)

    def _add_chat(self, obj: dict[str, Any], now: float) -> None:
        usage = obj.get("usage")
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            self.completion_tokens = int(usage["completion_tokens"])
            pt = usage.get("prompt_tokens")
            self.prompt_tokens = None if pt is None else int(pt)
        got = False
        for choice in obj.get("choices") or ():
            content = (choice.get("delta") or {}).get("content")
            if content:
                self.text += content
                got = True
        if got:
            self.chunk_times.append(now)

    def _add_generate(self, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("meta_info") or {}
        before = self.completion_tokens or 0
        text = obj.get("text")
        if isinstance(text, str):
            # /generate streams the cumulative text by default; a build with incremental
            # streaming output sends pieces. Accept both.
            self.text = text if text.startswith(self.text) else self.text + text
        if meta.get("completion_tokens") is not None:
            self.completion_tokens = int(meta["completion_tokens"])
        if meta.get("prompt_tokens") is not None:
            self.prompt_tokens = int(meta["prompt_tokens"])
        if meta.get("spec_verify_ct") is not None:
            self.verify_ct = int(meta["spec_verify_ct"])
        hist = meta.get("spec_accept_histogram", meta.get("spec_correct_drafts_histogram"))
        if isinstance(hist, list):
            self.histogram = [int(x) for x in hist]
        if (self.completion_tokens or 0) > before:
            self.chunk_times.append(now)

    def result(
        self,
        *,
        ok: bool,
        error: str | None,
        end: float,
        max_tokens: int,
        prompt_index: int,
        attempts: int,
        cpu_s: float,
    ) -> RequestResult:
        tokens = self.completion_tokens or 0
        e2e = max(end - self.t0, 1e-9)
        ttft = self.chunk_times[0] - self.t0 if self.chunk_times else None
        gaps = [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]
        decode = None
        if ttft is not None and tokens > 1 and e2e > ttft:
            decode = (tokens - 1) / (e2e - ttft)
        if ok and self.completion_tokens is None:
            ok, error = False, "the stream carried no token count (usage / meta_info)"
        return RequestResult(
            ok=ok,
            error=error,
            prompt_index=prompt_index,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=tokens,
            ttft_s=ttft,
            e2e_s=e2e,
            tok_s=tokens / e2e,
            decode_tok_s=decode,
            n_chunks=len(self.chunk_times),
            gap_mean_s=sum(gaps) / len(gaps) if gaps else None,
            gap_max_s=max(gaps) if gaps else None,
            short=ok and tokens < max_tokens,
            text=self.text,
            attempts=attempts,
            client_cpu_s=cpu_s,
            spec_verify_ct=self.verify_ct,
            spec_accept_histogram=self.histogram,
        )


class _DeadlineExceeded(Exception):
    """The request's total deadline passed while the stream was still going."""


def _until(lines: Iterable[str], deadline: float) -> Iterator[str]:
    # Checked per line, keep-alive comments included, so a server that trickles comments
    # forever still hits the deadline. A fully silent stream hits httpx's read timeout.
    for line in lines:
        if time.perf_counter() > deadline:
            raise _DeadlineExceeded
        yield line


def _response_error(resp: httpx.Response) -> str:
    try:
        obj = resp.json()
        if isinstance(obj, dict):
            msg = error_text(obj) or obj.get("detail") or obj.get("message")
            if msg:
                return str(msg)[:300]
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return resp.text[:300] or resp.reason_phrase


def _describe(exc: BaseException) -> str:
    if isinstance(exc, _Retryable):
        return exc.reason
    if isinstance(exc, httpx.TimeoutException):
        return f"no data for the stall timeout ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# --------------------------------------------------------------------------- runs


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
            "requests": [r.to_dict(include_text) for r in self.requests],
        }


def _make_run(index: int, requests: list[RequestResult], wall: float, warmup: bool) -> RunResult:
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
    )


# --------------------------------------------------------------------------- accept length


def window_accept_length(
    a_start: float | None,
    a_before: float | None,
    a_after: float | None,
    warmup_tokens: int,
    window_tokens: int,
) -> tuple[float | None, str]:
    """Estimate the measured window's accept length from a cumulative-since-boot average.

    The server reports A = tokens / verify steps since boot. We read it before the warm-up
    (``a_start``), before the window (``a_before``) and after it (``a_after``), and we know the
    tokens our warm-up and window generated. Unknowns: the tokens served before us (u) and the
    window's rate x, assumed also to be the warm-up's (same prompts, same server). Two
    readings give two linear equations in (u, 1/x). Returns (value, source) where source is
    "window" (estimated), "cumulative" (only the raw after-value was usable) or "none".
    """
    if a_after is None or a_after <= 0 or window_tokens <= 0:
        return None, "none"
    if a_before is None or a_before <= 0:
        return a_after, "window"  # nothing verified before the window: the average is ours
    if warmup_tokens <= 0:
        return a_after, "cumulative"
    tw, t1 = float(warmup_tokens), float(warmup_tokens + window_tokens)
    inv_start = 0.0 if a_start is None or a_start <= 0 else 1.0 / a_start
    # u * (1/a_before - 1/a_start) - tw * y = -tw / a_before
    # u * (1/a_after  - 1/a_start) - t1 * y = -t1 / a_after
    a11, a12, b1 = 1.0 / a_before - inv_start, -tw, -tw / a_before
    a21, a22, b2 = 1.0 / a_after - inv_start, -t1, -t1 / a_after
    if inv_start == 0.0:
        # no tokens before the warm-up: u = 0, and y follows from the two readings directly
        dv = t1 / a_after - tw / a_before
        return (window_tokens / dv, "window") if dv > 0 else (a_after, "cumulative")
    det = a11 * a22 - a12 * a21
    if abs(det) < 1e-12 * max(1.0, t1):
        return a_after, "cumulative"  # readings too close to tell history from window
    u = (b1 * a22 - a12 * b2) / det
    y = (a11 * b2 - a21 * b1) / det
    if u < 0 or y <= 0 or not 1.0 <= 1.0 / y <= 64.0:
        return a_after, "cumulative"
    return 1.0 / y, "window"


def acceptance_per_position(histogram: Sequence[int]) -> list[float | None]:
    """p_k = P(accepted >= k | accepted >= k - 1) for k = 1..len(H)-1.

    ``histogram[n]`` counts verify steps that accepted exactly n draft tokens. p_k is the
    chance the k-th draft token is accepted given the k-1 before it were: the per-depth
    acceptance a cost model of speculation needs. None where no step reached position k.
    """
    out: list[float | None] = []
    for k in range(1, len(histogram)):
        reached = sum(histogram[k - 1 :])
        out.append(sum(histogram[k:]) / reached if reached else None)
    return out


# --------------------------------------------------------------------------- result


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
    accept_length_source: str = "none"  # generate_meta | window | cumulative | none
    accept_length_server: dict[str, float | None] = field(default_factory=dict)
    accept_histogram: list[int] | None = None
    per_position_acceptance: list[float | None] | None = None

    @property
    def value(self) -> float:
        """The objective over per-run tok/s (spec.objective: mean, median or min)."""
        return getattr(self.stats, self.spec.objective)

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
            "objective": self.spec.objective,
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
            "prompt_hash": self.prompt_hash,
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


# --------------------------------------------------------------------------- runner


class _Runner:
    def __init__(
        self,
        base_url: str,
        spec: BenchSpec,
        prompts: PromptSet,
        client: httpx.Client,
        check_server: Callable[[], None] | None,
    ) -> None:
        self.base = base_url.rstrip("/")
        self.spec = spec
        self.prompts = prompts
        self.client = client
        self._check = check_server
        self._check_lock = threading.Lock()  # check_server may be called from worker threads
        self.model: str | None = spec.model

    def check_server(self) -> None:
        if self._check is not None:
            with self._check_lock:
                self._check()

    def resolve_model(self) -> str:
        try:
            r = self.client.get(f"{self.base}/v1/models", timeout=self.spec.connect_timeout)
            if r.status_code == 200:
                data = r.json().get("data") or []
                if data and data[0].get("id"):
                    return str(data[0]["id"])
        except (httpx.HTTPError, ValueError, AttributeError):
            pass  # the model name is cosmetic for SGLang: "default" is accepted
        return "default"

    def request_body(self, idx: int) -> tuple[str, dict[str, Any]]:
        msgs = self.prompts.prompts[idx]
        if self.spec.api == "chat":
            return f"{self.base}/v1/chat/completions", {
                "model": self.model or "default",
                "messages": msgs,
                "max_tokens": self.spec.max_tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
                "ignore_eos": True,
            }
        return f"{self.base}/generate", {
            "text": render_plain(msgs),
            "sampling_params": {
                "max_new_tokens": self.spec.max_tokens,
                "temperature": 0,
                "ignore_eos": True,
            },
            "stream": True,
        }

    def _stream_once(self, url: str, body: dict[str, Any], idx: int, attempt: int) -> RequestResult:
        cpu0 = time.thread_time()
        t0 = time.perf_counter()
        deadline = t0 + self.spec.request_timeout
        acc = _Stream(self.spec.api, t0)

        def finish(ok: bool, error: str | None) -> RequestResult:
            return acc.result(
                ok=ok,
                error=error,
                end=time.perf_counter(),
                max_tokens=self.spec.max_tokens,
                prompt_index=idx,
                attempts=attempt,
                cpu_s=time.thread_time() - cpu0,
            )

        with self.client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                resp.read()
                msg = f"HTTP {resp.status_code}: {_response_error(resp)}"
                if resp.status_code == 429 or resp.status_code >= 500:
                    raise _Retryable(msg)
                return finish(False, msg)
            try:
                for ev in iter_sse_events(_until(resp.iter_lines(), deadline)):
                    if ev.kind == "error":
                        return finish(False, f"server error event: {ev.message}")
                    if ev.kind == "done":
                        return finish(True, None)
                    assert ev.data is not None
                    acc.add(ev.data, time.perf_counter())
            except _DeadlineExceeded:
                return finish(False, f"request deadline of {self.spec.request_timeout:g}s exceeded")
        raise _Retryable("the stream ended before [DONE] (server closed the connection)")

    def request(self, idx: int) -> RequestResult:
        url, body = self.request_body(idx)
        attempts = 0

        def once() -> RequestResult:
            nonlocal attempts
            attempts += 1
            try:
                return self._stream_once(url, body, idx, attempts)
            except (httpx.TransportError, _Retryable) as exc:
                # Did the server die? check_server raises ConfigurationFailure if so, which
                # propagates untouched: that is how a mid-benchmark death becomes a crash.
                self.check_server()
                raise _Retryable(_describe(exc)) from exc

        retrying = Retrying(
            stop=stop_before_delay(self.spec.retry_budget_s)
            | stop_after_attempt(self.spec.max_attempts),
            wait=wait_exponential(multiplier=self.spec.retry_wait_s, max=5),
            retry=retry_if_exception_type(_Retryable),
            reraise=True,
        )
        try:
            return retrying(once)
        except _Retryable as exc:
            raise BenchmarkTransportError(
                f"benchmark request to {url} failed after {attempts} attempt(s): {exc.reason}"
            ) from exc

    def run_round(self, pool: ThreadPoolExecutor, index: int, warmup: bool) -> RunResult:
        c, n = self.spec.concurrency, len(self.prompts)
        # Run i uses prompt i; concurrent streams take the following prompts, so a round
        # never sends one prompt twice when the set is large enough.
        idxs = [(index * c + j) % n for j in range(c)]
        t0 = time.perf_counter()
        if c == 1:
            reqs = [self.request(idxs[0])]
        else:
            futures = [pool.submit(self.request, i) for i in idxs]
            reqs = [f.result() for f in futures]
        return _make_run(index, reqs, time.perf_counter() - t0, warmup)

    def server_accept_length(self) -> float | None:
        """avg_spec_accept_length of DP rank 0; None when absent or not speculative."""
        for path in ("/get_server_info", "/server_info"):
            try:
                r = self.client.get(f"{self.base}{path}", timeout=self.spec.connect_timeout)
                if r.status_code != 200:
                    continue
                info = r.json()
            except (httpx.HTTPError, ValueError):
                continue  # a probe must never fail the benchmark
            if not isinstance(info, dict):
                continue
            if "speculative_algorithm" in info and not info["speculative_algorithm"]:
                return None
            states = info.get("internal_states") or [{}]
            if isinstance(states, dict):  # tolerate a single rank's dict
                states = [states]
            rank0 = states[0] if isinstance(states, list) and isinstance(states[0], dict) else {}
            val = rank0.get("avg_spec_accept_length")
            return float(val) if isinstance(val, int | float) and val > 0 else None
        return None


def _fmt_run(run: RunResult, label: str) -> str:
    if not run.ok:
        return f"{label}: ERROR {run.error}"
    short = " (SHORT: fewer than max_tokens)" if run.short else ""
    return f"{label}: {run.tok_s:.1f} tok/s{short}"


def run_benchmark(
    base_url: str,
    spec: BenchSpec,
    *,
    on_progress: Callable[[str], None] | None = None,
    check_server: Callable[[], None] | None = None,
    prompts: PromptSet | None = None,
) -> BenchResult:
    """Benchmark the server at ``base_url``: warm-up, measured runs, statistics.

    ``check_server`` is called between runs and after any transport error (possibly from a
    worker thread); it should raise ``ConfigurationFailure`` when the server process died.
    Raises ``BenchmarkTransportError`` when the server cannot be reached after retries and
    ``BenchmarkError`` when no measured run was usable.
    """
    prompt_set = prompts or load_prompts(spec.prompts)
    progress = on_progress or (lambda _msg: None)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    timeout = httpx.Timeout(
        connect=spec.connect_timeout,
        read=min(spec.stall_timeout, spec.request_timeout),
        write=spec.connect_timeout,
        pool=spec.request_timeout,
    )
    limits = httpx.Limits(max_connections=spec.concurrency + 2, max_keepalive_connections=None)
    with (
        httpx.Client(timeout=timeout, limits=limits) as client,
        ThreadPoolExecutor(max_workers=spec.concurrency, thread_name_prefix="bench") as pool,
    ):
        runner = _Runner(base_url, spec, prompt_set, client, check_server)
        if spec.api == "chat" and runner.model is None:
            runner.model = runner.resolve_model()
        a_start = runner.server_accept_length()
        warm: list[RunResult] = []
        for w in range(spec.warmup):
            runner.check_server()
            warm.append(runner.run_round(pool, w, warmup=True))
            progress(_fmt_run(warm[-1], f"warm-up {w + 1}/{spec.warmup}"))
        a_before = runner.server_accept_length() if spec.warmup else a_start
        runs: list[RunResult] = []
        for i in range(spec.runs):
            runner.check_server()
            runs.append(runner.run_round(pool, i, warmup=False))
            progress(_fmt_run(runs[-1], f"run {i + 1}/{spec.runs}"))
        a_after = runner.server_accept_length()

    def tokens(rs: list[RunResult]) -> int:
        return sum(r.completion_tokens for run in rs for r in run.requests)

    accept, source = window_accept_length(a_start, a_before, a_after, tokens(warm), tokens(runs))
    hist: list[int] | None = None
    measured = [r for run in runs for r in run.requests if r.ok]
    verify = sum(r.spec_verify_ct or 0 for r in measured)
    if verify > 0:
        # /generate reports verify steps per request: exact, no estimate needed.
        accept, source = sum(r.completion_tokens for r in measured) / verify, "generate_meta"
    hists = [r.spec_accept_histogram for r in measured if r.spec_accept_histogram]
    if hists:
        hist = [0] * max(len(h) for h in hists)
        for h in hists:
            for k, v in enumerate(h):
                hist[k] += v

    counted = [r.tok_s for r in runs if r.counted]
    result = BenchResult(
        runs=runs,
        warmup_runs=warm,
        stats=summarize(counted) if counted else Stats(0, *(math.nan,) * 7),
        spec=spec,
        prompt_hash=prompt_set.hash,
        base_url=base_url,
        model=runner.model,
        started_at=started,
        duration_s=time.perf_counter() - t_start,
        accept_length=accept,
        accept_length_source=source,
        accept_length_server={"start": a_start, "before": a_before, "after": a_after},
        accept_histogram=hist,
        per_position_acceptance=acceptance_per_position(hist) if hist else None,
    )
    if not counted:
        reasons = sorted({run.error or "short output" for run in runs})
        raise BenchmarkError(f"no usable measured run at {base_url}: {'; '.join(reasons)}", result)
    return result


# --------------------------------------------------------------------------- display


def format_table(result: BenchResult) -> Table:
    """A rich table of the runs and the summary, for ``sweeper bench``."""
    from rich.table import Table  # imported here: only the CLI renders tables

    s = result.stats
    ci = "n/a" if math.isnan(s.ci_low) else f"{s.ci_low:.1f}-{s.ci_high:.1f}"
    title = (
        f"{result.spec.objective} {result.value:.1f} tok/s (95% CI {ci}, n={s.n}) "
        f"{result.spec.api} x{result.spec.concurrency}, {result.spec.max_tokens} tokens"
    )
    table = Table(title=title)
    for col in ("run", "tok/s", "per-req tok/s", "TTFT s", "decode tok/s", "tokens", "status"):
        table.add_column(col, justify="left" if col in ("run", "status") else "right")
    for run in result.warmup_runs + result.runs:
        reqs = run.requests
        ttfts = [r.ttft_s for r in reqs if r.ttft_s is not None]
        decs = [r.decode_tok_s for r in reqs if r.decode_tok_s is not None]
        status = "ok" if run.counted else ("SHORT" if run.ok else f"ERROR {run.error}")
        table.add_row(
            f"warm-up {run.index + 1}" if run.warmup else str(run.index + 1),
            f"{run.tok_s:.1f}",
            f"{run.per_request_tok_s:.1f}",
            f"{sum(ttfts) / len(ttfts):.3f}" if ttfts else "-",
            f"{sum(decs) / len(decs):.1f}" if decs else "-",
            str(sum(r.completion_tokens for r in reqs)),
            status + (" (excluded)" if not run.warmup and not run.counted else ""),
            style="dim" if run.warmup else None,
        )
    table.add_section()
    table.add_row("mean", f"{s.mean:.1f}", "", "", "", "", f"median {s.median:.1f}")
    table.add_row("stdev", f"{s.stdev:.2f}", "", "", "", "", f"min {s.min:.1f} max {s.max:.1f}")
    if result.accept_length is not None:
        table.add_row(
            "accept len", f"{result.accept_length:.2f}", "", "", "", "", result.accept_length_source
        )
    if result.per_position_acceptance:
        pp = " ".join("-" if p is None else f"{p:.2f}" for p in result.per_position_acceptance)
        table.add_row("p(accept)", "", "", "", "", "", pp)
    table.caption = (
        f"prompts {result.prompt_hash[:12]}, {result.n_errors} errors, "
        f"{result.n_short} short, {result.n_excluded} runs excluded"
    )
    return table
