"""Shared helpers for the simulator tests: spawn servers that are always cleaned up."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from sweeper.sim.harness import SimProcess, http_get

from .timeouts import scaled

FAST = ["--sim-startup-seconds", "0.05"]
EAGLE = [
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "draft",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
]

Spawn = Callable[..., SimProcess]


def spawner(tmp_path: Path) -> Iterator[Spawn]:
    """Yield a function starting SimProcess servers; kill every one of them afterwards."""
    started: list[SimProcess] = []

    def spawn(args: Sequence[str], env: dict[str, str] | None = None) -> SimProcess:
        sim = SimProcess(list(args), env=env, log_dir=tmp_path)
        started.append(sim)
        return sim.start()

    try:
        yield spawn
    finally:
        for sim in started:
            sim.kill()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    yield from spawner(tmp_path)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll with a bounded deadline; never a bare sleep as synchronisation."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def wait_http_up(sim: SimProcess, timeout: float = 10.0) -> None:
    wait_for(lambda: http_get(sim.url + "/get_model_info")[0] == 200, timeout, "HTTP up")


def sse_events(port: int, path: str, body: dict) -> list[str]:
    """POST a streaming request; the ``data:`` payloads, de-chunked by http.client."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("Content-Type") == "text/event-stream"
        raw = resp.read().decode()
    finally:
        conn.close()
    return [line[6:] for line in raw.split("\n") if line.startswith("data: ")]


class Busy:
    """A request running in a thread; ``done`` is set when the client has its last byte."""

    def __init__(self, request: Callable[[], object]) -> None:
        self.done = threading.Event()

        def run() -> None:
            try:
                request()
            finally:
                self.done.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout=scaled(timeout))


@contextmanager
def refused_while_busy(
    request: Callable[[], object], ask: Callable[[], tuple[int, bytes]],
    refused: Callable[[int, bytes], bool], rounds: int = 3,
) -> Iterator[Busy]:
    """Start ``request``, ``ask`` until the server ``refused`` it; the context is that request.

    Whether the server is busy when a call arrives can only be raced: a loaded machine can
    stall the test process for seconds between two calls, long enough for a seconds-long
    request to end in between (CI saw one busy answer and then an idle server). So each
    round starts a fresh request and asks until refused or the request has ended; a server
    that never refuses fails every round. Leaving the context joins the request's thread,
    also when the caller failed.
    """
    answers: set[tuple[int, bytes]] = set()
    for _ in range(rounds):
        busy = Busy(request)
        last: list[tuple[int, bytes]] = []

        def refused_or_ended(busy: Busy = busy, last: list[tuple[int, bytes]] = last) -> bool:
            last[:] = [ask()]
            answers.add(last[0])
            return refused(*last[0]) or busy.done.is_set()

        try:
            wait_for(refused_or_ended, 10, "a busy server refusing")
            if refused(*last[0]):
                yield busy
                return
        finally:
            busy.join(60)
    pytest.fail(f"{rounds} requests ended before the server refused; it answered "
                f"{sorted(answers)}")
