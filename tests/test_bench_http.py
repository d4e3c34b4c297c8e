"""The benchmark client against a real HTTP server on loopback, serving scripted responses.

The server is stdlib http.server in a thread; each test scripts what a route answers on its
n-th call (normal SSE, errors, a socket closed mid-stream, a stall...). No HTTP mocks.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from rich.console import Console

from sweeper.errors import BenchmarkTransportError, ConfigurationFailure
from sweeper.measure import (
    BenchmarkError,
    BenchSpec,
    PromptSet,
    format_table,
    run_benchmark,
)

from .timeouts import scaled

Route = Callable[["_Handler", Any, int], None]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        self.server.fake.dispatch(self, "GET", None)

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        self.server.fake.dispatch(self, "POST", json.loads(self.rfile.read(n) or b"null"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that gave up (a timeout test) closed the socket: expected
        super().handle_error(request, client_address)


class FakeServer:
    """Scripted HTTP server. ``routes[(method, path)] = fn(handler, body, call_number)``."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Route] = {}
        self.calls: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.fake = self
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # a short poll interval keeps shutdown() (and so each test's teardown) fast
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.calls if p == path)

    def dispatch(self, h: _Handler, method: str, body: Any) -> None:
        with self._lock:
            self.calls.append((h.path, body))
            n = self.count(h.path)
        route = self.routes.get((method, h.path))
        if route is None:
            send_json(h, {"detail": "Not Found"}, 404)
        else:
            route(h, body, n)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    server = FakeServer()
    try:
        yield server
    finally:
        server.close()


def send_json(h: _Handler, obj: Any, status: int = 200) -> None:
    data = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def send_sse(
    h: _Handler, parts: list[str], *, delay: float = 0.0, cut: bool = False, chunked: bool = True
) -> None:
    """Stream SSE text pieces. ``cut``: close the socket before the end of the body.
    ``chunked=False``: a close-delimited body (ends when the socket closes)."""
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header(
        "Transfer-Encoding" if chunked else "Connection", "chunked" if chunked else "close"
    )
    h.end_headers()
    for part in parts:
        if delay:
            time.sleep(delay)
        data = part.encode()
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
        h.wfile.flush()
    if chunked and not cut:
        h.wfile.write(b"0\r\n\r\n")
    else:
        h.close_connection = True


def chunk(content: str) -> str:
    obj = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": content}}],
    }
    return f"data: {json.dumps(obj)}\n\n"


def usage(completion: int, prompt: int = 12) -> str:
    u = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return f"data: {json.dumps({'choices': [], 'usage': u})}\n\n"


DONE = "data: [DONE]\n\n"
PROMPTS = PromptSet(
    prompts=[[{"role": "user", "content": f"question {i}"}] for i in range(3)],
    hash="h" * 64,
    source="t",
)


def spec(**kw: Any) -> BenchSpec:
    base: dict[str, Any] = dict(
        max_tokens=8, runs=2, warmup=0, retry_budget_s=3.0, retry_wait_s=0.05, stall_timeout=5.0
    )
    base.update(kw)
    return BenchSpec(**base)


def good_stream(h: _Handler, body: Any, n: int) -> None:
    # 8 tokens in 3 content chunks (multi-token chunks), keep-alive comments between them.
    send_sse(
        h,
        [": ping\n\n", chunk("Hel"), chunk("lo wor"), ": ping\n\n", chunk("ld!"), usage(8), DONE],
        delay=0.01,
    )


def test_chat_stream_counts_tokens_from_usage(fake: FakeServer) -> None:
    fake.routes[("POST", "/v1/chat/completions")] = good_stream
    fake.routes[("GET", "/v1/models")] = lambda h, b, n: send_json(h, {"data": [{"id": "kimi"}]})
    progress: list[str] = []
    res = run_benchmark(fake.url, spec(warmup=1), on_progress=progress.append, prompts=PROMPTS)

    assert [p.split(":")[0] for p in progress] == ["warm-up 1/1", "run 1/2", "run 2/2"]
    assert res.stats.n == 2 and res.n_errors == 0 and res.n_short == 0
    req = res.runs[0].requests[0]
    assert (req.completion_tokens, req.prompt_tokens, req.n_chunks, req.text) == (
        8,
        12,
        3,
        "Hello world!",
    )
    assert req.ttft_s is not None and 0 < req.ttft_s < req.e2e_s
    assert req.tok_s == pytest.approx(8 / req.e2e_s)
    assert req.decode_tok_s == pytest.approx(7 / (req.e2e_s - req.ttft_s))
    assert req.gap_max_s is not None and req.gap_mean_s is not None
    assert 0 < req.gap_mean_s <= req.gap_max_s
    assert res.runs[0].tok_s == req.tok_s
    assert res.value == res.stats.mean and res.model == "kimi"
    assert res.accept_length is None and res.accept_length_source == "none"
    # request shape: the campaign's settings
    bodies = [b for p, b in fake.calls if p == "/v1/chat/completions"]
    assert bodies[0]["stream_options"] == {"include_usage": True}
    assert (bodies[0]["temperature"], bodies[0]["ignore_eos"], bodies[0]["max_tokens"]) == (
        0,
        True,
        8,
    )
    assert bodies[0]["model"] == "kimi"
    # the set's one order (measure/prompts.py): warm-up w sends run w's prompt
    seq = PROMPTS.sequence
    assert [b["messages"][0]["content"] for b in bodies] == [
        f"question {seq[0]}",
        f"question {seq[0]}",
        f"question {seq[1]}",
    ]
    assert [r.position for r in res.runs] == [0, 1]
    d = res.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["prompt_hash"] == "h" * 64 and d["stats"]["n"] == 2 and d["spec"]["max_tokens"] == 8
    assert d["runs"][0]["requests"][0]["text"] == "Hello world!"
    assert "text" not in res.to_dict(include_text=False)["runs"][0]["requests"][0]
    out = io.StringIO()
    Console(file=out, width=140).print(format_table(res))
    assert "warm-up 1" in out.getvalue() and "tok/s" in out.getvalue()


def test_error_event_flags_the_run_without_retry(fake: FakeServer) -> None:
    def route(h: _Handler, body: Any, n: int) -> None:
        if n == 2:
            send_sse(h, [chunk("x"), 'data: {"object": "error", "message": "KV cache full"}\n\n'])
        else:
            good_stream(h, body, n)

    fake.routes[("POST", "/v1/chat/completions")] = route
    res = run_benchmark(fake.url, spec(runs=3, model="m"), prompts=PROMPTS)
    assert fake.count("/v1/chat/completions") == 3  # not retried
    assert [r.counted for r in res.runs] == [True, False, True]
    assert "KV cache full" in (res.runs[1].error or "")
    assert res.stats.n == 2 and res.n_errors == 1


@pytest.mark.parametrize("objective", ["median", "min"])
def test_objective_selects_the_statistic(fake: FakeServer, objective: str) -> None:
    fake.routes[("POST", "/v1/chat/completions")] = good_stream
    res = run_benchmark(fake.url, spec(runs=3, model="m", objective=objective), prompts=PROMPTS)
    assert res.value == getattr(res.stats, objective)
    assert res.to_dict()["value"] == res.value


def test_short_outputs_are_flagged_and_excluded(fake: FakeServer) -> None:
    def route(h: _Handler, body: Any, n: int) -> None:
        send_sse(h, [chunk("short"), usage(5 if n == 1 else 8), DONE])

    fake.routes[("POST", "/v1/chat/completions")] = route
    res = run_benchmark(fake.url, spec(runs=3, model="m"), prompts=PROMPTS)
    assert res.runs[0].ok and res.runs[0].short and not res.runs[0].counted
    assert res.n_short == 1 and res.stats.n == 2 and res.to_dict()["n_excluded"] == 1


def test_no_usable_run_raises_with_the_runs(fake: FakeServer) -> None:
    fake.routes[("POST", "/v1/chat/completions")] = lambda h, b, n: send_json(
        h, {"object": "error", "message": "model not loaded"}, 400
    )
    with pytest.raises(BenchmarkError, match="model not loaded") as info:
        run_benchmark(fake.url, spec(model="m"), prompts=PROMPTS)
    assert fake.count("/v1/chat/completions") == 2  # a 4xx is not retried
    assert len(info.value.result.runs) == 2


def test_missing_usage_is_an_error_not_a_chunk_count(fake: FakeServer) -> None:
    fake.routes[("POST", "/v1/chat/completions")] = lambda h, b, n: send_sse(
        h, [chunk("a b"), DONE]
    )
    with pytest.raises(BenchmarkError, match="no token count"):
        run_benchmark(fake.url, spec(runs=1, model="m"), prompts=PROMPTS)


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked-cut", "close-delimited"])
def test_stream_cut_midway_is_retried(fake: FakeServer, chunked: bool) -> None:
    def route(h: _Handler, body: Any, n: int) -> None:
        if n == 1:
            send_sse(h, [chunk("Hel")], cut=True, chunked=chunked)
        else:
            good_stream(h, body, n)

    fake.routes[("POST", "/v1/chat/completions")] = route
    checks: list[int] = []
    res = run_benchmark(
        fake.url, spec(runs=1, model="m"), prompts=PROMPTS, check_server=lambda: checks.append(1)
    )
    assert res.runs[0].requests[0].attempts == 2 and res.runs[0].counted
    assert len(checks) == 2  # once before the run, once after the cut


def test_server_dying_midstream_becomes_configuration_failure(fake: FakeServer) -> None:
    fake.routes[("POST", "/v1/chat/completions")] = lambda h, b, n: send_sse(
        h, [chunk("a")], cut=True
    )
    calls = 0

    def check_server() -> None:
        nonlocal calls
        calls += 1
        if calls > 1:  # alive before the run, dead after the stream was cut
            raise ConfigurationFailure("crash", "server exited with code -9")

    with pytest.raises(ConfigurationFailure) as info:
        run_benchmark(fake.url, spec(model="m"), prompts=PROMPTS, check_server=check_server)
    assert info.value.kind == "crash" and fake.count("/v1/chat/completions") == 1


def test_persistent_cut_raises_transport_error_with_reason(fake: FakeServer) -> None:
    fake.routes[("POST", "/v1/chat/completions")] = lambda h, b, n: send_sse(
        h, [chunk("a")], cut=True
    )
    with pytest.raises(BenchmarkTransportError, match="3 attempt") as info:
        run_benchmark(fake.url, spec(model="m"), prompts=PROMPTS)
    assert "RemoteProtocolError" in str(info.value)
    assert fake.count("/v1/chat/completions") == 3


def test_5xx_is_retried_then_succeeds(fake: FakeServer) -> None:
    def route(h: _Handler, body: Any, n: int) -> None:
        if n == 1:
            send_json(h, {"detail": "overloaded"}, 503)
        else:
            good_stream(h, body, n)

    fake.routes[("POST", "/v1/chat/completions")] = route
    res = run_benchmark(fake.url, spec(runs=1, model="m"), prompts=PROMPTS)
    assert res.runs[0].requests[0].attempts == 2


def test_connection_refused_is_a_transport_error() -> None:
    server = FakeServer()
    url = server.url
    server.close()  # nothing listens on the port any more
    t0 = time.monotonic()
    with pytest.raises(BenchmarkTransportError, match="ConnectError"):
        run_benchmark(url, spec(model="m", retry_budget_s=1.0), prompts=PROMPTS)
    assert time.monotonic() - t0 < 1.0 + scaled(4)  # the retry budget, plus slack


def test_total_deadline_cuts_a_trickling_stream(fake: FakeServer) -> None:
    # keep-alives every 50 ms forever: httpx's per-read timeout never fires, our deadline does
    fake.routes[("POST", "/v1/chat/completions")] = lambda h, b, n: send_sse(
        h, [chunk("a")] + [": ping\n\n"] * 40, delay=0.05
    )
    with pytest.raises(BenchmarkError, match="deadline"):
        run_benchmark(fake.url, spec(runs=1, model="m", request_timeout=0.3), prompts=PROMPTS)


def test_stalled_stream_times_out_and_is_retried_within_budget(fake: FakeServer) -> None:
    fake.routes[("POST", "/v1/chat/completions")] = lambda h, b, n: send_sse(
        h, [chunk("a"), ": late\n\n"], delay=0.6
    )
    t0 = time.monotonic()
    with pytest.raises(BenchmarkTransportError, match="stall"):
        run_benchmark(
            fake.url,
            spec(runs=1, model="m", stall_timeout=0.2, retry_budget_s=1.0, max_attempts=5),
            prompts=PROMPTS,
        )
    assert time.monotonic() - t0 < 1.0 + scaled(2)  # the retry budget, plus slack


def test_concurrency_aggregates_over_the_round(fake: FakeServer) -> None:
    fake.routes[("POST", "/v1/chat/completions")] = lambda h, b, n: send_sse(
        h, [chunk("a"), chunk("b"), usage(8), DONE], delay=0.1
    )
    res = run_benchmark(fake.url, spec(runs=1, concurrency=3, model="m"), prompts=PROMPTS)
    run = res.runs[0]
    assert len(run.requests) == 3 and run.wall_s < 0.55  # concurrent, not 3 x 0.3 s
    assert run.tok_s == pytest.approx(24 / run.wall_s)
    assert run.per_request_tok_s == pytest.approx(sum(r.tok_s for r in run.requests) / 3)
    assert sorted(r.prompt_index for r in run.requests) == [0, 1, 2]


def test_generate_api_meta_info_and_histogram(fake: FakeServer) -> None:
    def route(h: _Handler, body: Any, n: int) -> None:
        assert body["sampling_params"] == {
            "max_new_tokens": 8,
            "temperature": 0,
            "ignore_eos": True,
        }
        assert body["text"].endswith("Assistant:") and body["stream"] is True
        parts, text = [], ""
        for i, piece in enumerate(["One", " two", " three"]):
            text += piece
            meta: dict[str, Any] = {"prompt_tokens": 9, "completion_tokens": [3, 5, 8][i]}
            if i == 2:
                meta |= {"spec_verify_ct": 4, "spec_accept_histogram": [1, 1, 1, 1]}
            parts.append(f"data: {json.dumps({'text': text, 'meta_info': meta})}\n\n")
        send_sse(h, [*parts, DONE])

    fake.routes[("POST", "/generate")] = route
    res = run_benchmark(fake.url, spec(api="generate", runs=2), prompts=PROMPTS)
    req = res.runs[0].requests[0]
    assert (req.completion_tokens, req.text, req.n_chunks, req.spec_verify_ct) == (
        8,
        "One two three",
        3,
        4,
    )
    assert res.accept_length == 2.0 and res.accept_length_source == "generate_meta"
    assert res.accept_histogram == [2, 2, 2, 2]
    assert res.per_position_acceptance == pytest.approx([6 / 8, 4 / 6, 2 / 4])
    assert fake.count("/v1/models") == 0  # /generate needs no model name


def test_accept_length_from_server_info_over_the_window(fake: FakeServer) -> None:
    # Fresh server: nothing verified at start; warm-up (8 tokens) at 2.0; window (16) at 2.0.
    readings = iter([0.0, 2.0, 2.0])
    fake.routes[("POST", "/v1/chat/completions")] = good_stream
    fake.routes[("GET", "/get_server_info")] = lambda h, b, n: send_json(
        h,
        {
            "speculative_algorithm": "EAGLE3",
            "internal_states": [{"avg_spec_accept_length": next(readings)}],
        },
    )
    res = run_benchmark(fake.url, spec(model="m", warmup=1), prompts=PROMPTS)
    assert res.accept_length == pytest.approx(2.0) and res.accept_length_source == "window"
    assert res.accept_length_server == {"start": None, "before": 2.0, "after": 2.0}


def test_server_info_fallback_and_non_speculative(fake: FakeServer) -> None:
    fake.routes[("POST", "/v1/chat/completions")] = good_stream
    fake.routes[("GET", "/server_info")] = lambda h, b, n: send_json(
        h, {"speculative_algorithm": None, "internal_states": [{"avg_spec_accept_length": 1.0}]}
    )
    res = run_benchmark(fake.url, spec(model="m", runs=1), prompts=PROMPTS)
    # the current name answers: the deprecated one (a warning per call on 0.5.23) is not asked
    assert fake.count("/get_server_info") == 0 and fake.count("/server_info") == 2
    assert res.accept_length is None


def test_old_build_server_info_name_is_asked_once_then_remembered(fake: FakeServer) -> None:
    fake.routes[("POST", "/v1/chat/completions")] = good_stream
    fake.routes[("GET", "/get_server_info")] = lambda h, b, n: send_json(
        h, {"speculative_algorithm": "EAGLE3",
            "internal_states": [{"avg_spec_accept_length": 2.5}]})
    res = run_benchmark(fake.url, spec(model="m", runs=2), prompts=PROMPTS)
    assert fake.count("/server_info") == 1 and fake.count("/get_server_info") >= 2
    assert res.accept_length == pytest.approx(2.5)


def test_accept_length_when_a_flush_empties_the_servers_average(fake: FakeServer) -> None:
    """SGLang 0.5.23: /flush_cache zeroes the counters; avg_spec_accept_length is absent
    until a decode log line counts a verify, then holds only the logged intervals."""
    state: dict[str, float | None] = {"avg": 3.0}  # left over from before the sweep
    per_round = iter([2.0, None, 4.0])  # the second round was shorter than an interval

    def flush(h: _Handler, body: Any, n: int) -> None:
        state["avg"] = None
        send_json(h, "Cache flushed.")

    def chat(h: _Handler, body: Any, n: int) -> None:
        state["avg"] = next(per_round)
        good_stream(h, body, n)

    def info(h: _Handler, body: Any, n: int) -> None:
        states = {} if state["avg"] is None else {"avg_spec_accept_length": state["avg"]}
        send_json(h, {"speculative_algorithm": "EAGLE3", "internal_states": [states]})

    fake.routes[("POST", "/flush_cache")] = flush
    fake.routes[("POST", "/v1/chat/completions")] = chat
    fake.routes[("GET", "/server_info")] = info
    res = run_benchmark(fake.url, spec(model="m", runs=3), prompts=PROMPTS)
    # 8 tokens a round: rounds at 2.0 and 4.0 pooled as tokens / verify steps
    assert res.accept_length == pytest.approx(16 / (8 / 2.0 + 8 / 4.0))
    assert res.accept_length_source == "server_rounds"
