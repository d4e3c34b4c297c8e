"""One streamed response: its timings, text and token counts, its deadline, and the
errors worth another attempt."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpx

from sweeper.measure.runs import RequestResult
from sweeper.measure.sse import error_text


class Retryable(Exception):
    """A transport-level failure worth another attempt (after check_server)."""

    def __init__(self, reason: str, status: int | None = None, body: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status  # an HTTP status the server answered (429, 5xx), if any
        self.body = body  # and its response body, for the trial's evidence


class Stream:
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


class DeadlineExceeded(Exception):
    """The request's total deadline passed while the stream was still going."""


def until(lines: Iterable[str], deadline: float) -> Iterator[str]:
    # Checked per line, keep-alive comments included, so a server that trickles comments
    # forever still hits the deadline. A fully silent stream hits httpx's read timeout.
    for line in lines:
        if time.perf_counter() > deadline:
            raise DeadlineExceeded
        yield line


def response_error(resp: httpx.Response) -> str:
    try:
        obj = resp.json()
        if isinstance(obj, dict):
            msg = error_text(obj) or obj.get("detail") or obj.get("message")
            if msg:
                return str(msg)[:300]
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return resp.text[:300] or resp.reason_phrase


def describe(exc: BaseException) -> str:
    if isinstance(exc, Retryable):
        return exc.reason
    if isinstance(exc, httpx.TimeoutException):
        return f"no data for the stall timeout ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

