"""The benchmark's HTTP side (measure/client.py runs the benchmark through it): one
streamed request and its retries, a round of ``concurrency`` concurrent requests, the
cache flush before a round, and the server's own accept-length reading.

A transport error (connection refused or cut, a stalled stream, a 5xx) is retried only
after ``check_server()`` found the process alive (a dead server raises
``ConfigurationFailure``, the configuration's fault); retries run out into
``BenchmarkTransportError`` (the infrastructure's), or ``ServerErrorResponse`` when the
server answered every attempt with a 5xx. An error event or a 4xx is not retried.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import httpx
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
)

from sweeper.errors import BenchmarkTransportError, ServerErrorResponse
from sweeper.measure.prompts import PromptSet, render_plain
from sweeper.measure.runs import RequestResult, RunResult, make_run
from sweeper.measure.sse import iter_sse_events
from sweeper.measure.stream import (
    DeadlineExceeded,
    Retryable,
    Stream,
    describe,
    response_error,
    until,
)
from sweeper.study import BenchSpec


def implausible_count(tokens: int, max_tokens: int, chunks: int) -> str | None:
    """Why a reported token count cannot be true, or None. tok/s is the server's own count
    over the client's clock: a server that over-reports (10 x max_tokens) would win the
    sweep. A response holds at most ``max_tokens`` tokens, and each streamed chunk with
    text holds at least one (a speculative step may put several in one)."""
    if tokens > max_tokens:
        return (f"the server reported {tokens} completion tokens for a request of at most "
                f"max_tokens {max_tokens}: a token count that cannot be true")
    if tokens < chunks:
        return (f"the server reported {tokens} completion tokens for {chunks} streamed "
                "chunks of text: a token count that cannot be true")
    return None


class Runner:
    """One benchmark's requests to one server: the request body (``api``: chat or
    /generate), a streamed request with its retries, a round of concurrent requests, the
    cache flush between rounds, the server's accept-length reading."""


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
        self._info_path: str | None = None  # the server-info endpoint this server answers

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

    def request_body(self, idx: int, temperature: float) -> tuple[str, dict[str, Any]]:
        msgs = self.prompts.prompts[idx]
        if self.spec.api == "chat":
            return f"{self.base}/v1/chat/completions", {
                "model": self.model or "default",
                "messages": msgs,
                "max_tokens": self.spec.max_tokens,
                "temperature": temperature,
                "stream": True,
                "stream_options": {"include_usage": True},
                "ignore_eos": True,
            }
        return f"{self.base}/generate", {
            "text": render_plain(msgs),
            "sampling_params": {
                "max_new_tokens": self.spec.max_tokens,
                "temperature": temperature,
                "ignore_eos": True,
            },
            "stream": True,
        }

    def _stream_once(self, url: str, body: dict[str, Any], idx: int, attempt: int) -> RequestResult:
        cpu0 = time.thread_time()
        t0 = time.perf_counter()
        deadline = t0 + self.spec.request_timeout
        acc = Stream(self.spec.api, t0)

        def finish(ok: bool, error: str | None) -> RequestResult:
            result = acc.result(
                ok=ok,
                error=error,
                end=time.perf_counter(),
                max_tokens=self.spec.max_tokens,
                prompt_index=idx,
                attempts=attempt,
                cpu_s=time.thread_time() - cpu0,
            )
            lie = implausible_count(result.completion_tokens, self.spec.max_tokens,
                                    result.n_chunks) if result.ok else None
            return replace(result, ok=False, error=lie, short=False) if lie else result

        with self.client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                resp.read()
                msg = f"HTTP {resp.status_code}: {response_error(resp)}"
                if resp.status_code == 429 or resp.status_code >= 500:
                    raise Retryable(msg, resp.status_code, resp.text[:4000])
                return finish(False, msg)
            try:
                for ev in iter_sse_events(until(resp.iter_lines(), deadline)):
                    if ev.kind == "error":
                        return finish(False, f"server error event: {ev.message}")
                    if ev.kind == "done":
                        return finish(True, None)
                    assert ev.data is not None
                    acc.add(ev.data, time.perf_counter())
            except DeadlineExceeded:
                return finish(False, f"request deadline of {self.spec.request_timeout:g}s exceeded")
        raise Retryable("the stream ended before [DONE] (server closed the connection)")

    def request(self, idx: int, temperature: float = 0.0) -> RequestResult:
        url, body = self.request_body(idx, temperature)
        attempts = 0
        last: list[Retryable] = []

        def once() -> RequestResult:
            nonlocal attempts
            attempts += 1
            try:
                return self._stream_once(url, body, idx, attempts)
            except (httpx.TransportError, Retryable) as exc:
                # Did the server die? check_server raises ConfigurationFailure if so, which
                # propagates untouched: that is how a mid-benchmark death becomes a crash.
                self.check_server()
                last[:] = [exc] if isinstance(exc, Retryable) else []
                raise Retryable(describe(exc)) from exc

        retrying = Retrying(
            stop=stop_before_delay(self.spec.retry_budget_s)
            | stop_after_attempt(self.spec.max_attempts),
            wait=wait_exponential(multiplier=self.spec.retry_wait_s, max=5),
            retry=retry_if_exception_type(Retryable),
            reraise=True,
        )
        try:
            return retrying(once)
        except Retryable as exc:
            answered = last[0] if last else None
            if answered is not None and answered.status is not None and answered.status >= 500:
                # up and answering, with an error every time: the server's own doing
                raise ServerErrorResponse(
                    f"the server answered every attempt of a benchmark request with an "
                    f"error ({attempts} attempt(s)): {exc.reason}", answered.body) from exc
            raise BenchmarkTransportError(
                f"benchmark request to {url} failed after {attempts} attempt(s): {exc.reason}"
            ) from exc

    def run_round(self, pool: ThreadPoolExecutor, index: int, warmup: bool,
                  prompt_round: int) -> RunResult:
        """Run ``index`` of this benchmark, on the prompts of round ``prompt_round`` of the
        set's one sequence (measure/prompts.py): concurrent streams take consecutive
        prompts of it, so a round never sends one prompt twice when the set is large enough."""
        c = self.spec.concurrency
        assert isinstance(c, int), "run_benchmark measures one level (BenchSpec.at_level)"
        idxs = self.prompts.round_prompts(prompt_round, c)
        # Warm-up runs at temperature 0 whatever benchmark.temperature says: unmeasured,
        # they are the reference outputs of the lossless check (run/confirm.py).
        temp = 0.0 if warmup else self.spec.temperature
        t0 = time.perf_counter()
        if c == 1:
            reqs = [self.request(idxs[0], temp)]
        else:
            futures = [pool.submit(self.request, i, temp) for i in idxs]
            reqs = [f.result() for f in futures]
        return make_run(index, reqs, time.perf_counter() - t0, warmup,
                        position=(prompt_round * c) % len(self.prompts),
                        categories=[self.prompts.category(i) for i in idxs])

    def flush_cache(self) -> bool:
        """POST /flush_cache (SGLang empties its prefix/radix cache; 400 while requests
        run, which never happens between two rounds). Without it, a run re-sending a prompt
        of an earlier run would skip its prefill and measure less work. A failed flush is
        counted in the result, never fatal."""
        if not self.spec.flush_cache:
            return True
        try:
            r = self.client.post(f"{self.base}/flush_cache", timeout=self.spec.connect_timeout)
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    def server_accept_length(self) -> float | None:
        """avg_spec_accept_length of DP rank 0; None when absent or not speculative.

        /server_info is the current name; builds before it answer only /get_server_info,
        which 0.5.23 still serves with a deprecation warning in its log on every call: the
        old name is asked only when the new one is missing, and the answer is remembered.
        """
        paths = [self._info_path] if self._info_path else ["/server_info", "/get_server_info"]
        for path in paths:
            try:
                r = self.client.get(f"{self.base}{path}", timeout=self.spec.connect_timeout)
                if r.status_code != 200:
                    continue
                info = r.json()
            except (httpx.HTTPError, ValueError):
                continue  # a probe must never fail the benchmark
            if not isinstance(info, dict):
                continue
            self._info_path = path
            if "speculative_algorithm" in info and not info["speculative_algorithm"]:
                return None
            states = info.get("internal_states") or [{}]
            if isinstance(states, dict):  # tolerate a single rank's dict
                states = [states]
            rank0 = states[0] if isinstance(states, list) and isinstance(states[0], dict) else {}
            val = rank0.get("avg_spec_accept_length")
            return float(val) if isinstance(val, int | float) and val > 0 else None
        return None
