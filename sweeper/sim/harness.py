"""Run a simulated server as a real subprocess: for tests and benchmarks (stdlib only).

``with SimProcess(["--sim-profile", "demo", ...]) as sim: sim.url`` starts
``python -m sweeper.sim`` in its own session on a free port, logs to a file, and always
kills the whole process group on exit, even when the body fails.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 2.0, headers: dict[str, str] | None = None
             ) -> tuple[int, bytes]:
    """(status, body); status 0 when nothing answers."""
    try:
        req = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def http_post(url: str, body: dict[str, Any], timeout: float = 60.0,
              headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@dataclass
class StreamResult:
    """One streamed chat completion as a benchmark client sees it."""

    completion_tokens: int
    prompt_tokens: int
    e2e_s: float
    ttft_s: float
    chunks: int
    text: str
    finish_reason: str | None

    @property
    def tok_s(self) -> float:
        return self.completion_tokens / self.e2e_s


def stream_chat(
    url: str, prompt: str, max_tokens: int, ignore_eos: bool = True, timeout: float = 120.0,
    api_key: str | None = None,
) -> StreamResult:
    """POST a streaming /v1/chat/completions with include_usage; read it to [DONE]."""
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=timeout)
    body = {
        "model": "sim", "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": ignore_eos,
        "stream_options": {"include_usage": True},
    }
    start = time.monotonic()
    ttft, chunks, text, usage, finish = 0.0, 0, [], {}, None
    try:
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"chat completion failed: {resp.status} {resp.read()[:300]!r}")
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                break
            event = json.loads(data)
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices", []):
                content = choice.get("delta", {}).get("content")
                if content:
                    if not chunks:
                        ttft = time.monotonic() - start
                    chunks += 1
                    text.append(content)
                finish = choice.get("finish_reason") or finish
    finally:
        conn.close()
    return StreamResult(
        completion_tokens=int(usage.get("completion_tokens", 0)),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        e2e_s=time.monotonic() - start,
        ttft_s=ttft,
        chunks=chunks,
        text="".join(text),
        finish_reason=finish,
    )


class SimProcess:
    """A ``python -m sweeper.sim`` process on a free port; a context manager."""

    def __init__(
        self,
        args: Sequence[str],
        env: dict[str, str] | None = None,
        log_dir: str | Path | None = None,
        model_path: str = "sim-model",
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        directory = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="sim-"))
        self.log_path = directory / f"sim-{self.port}.log"
        self.argv = [
            sys.executable, "-m", "sweeper.sim", "--model-path", model_path,
            "--port", str(self.port), *args,
        ]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SimProcess:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                start_new_session=True,  # its own group: killed as one, never by name
            )
        return self

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_healthy(self, timeout: float = 15.0) -> None:
        """Poll /health until 200; fail fast when the process dies."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"sim exited with {self.proc.returncode} before healthy:\n{self.log()[-3000:]}"
                )
            if http_get(self.url + "/health", timeout=1.0)[0] == 200:
                return
            time.sleep(0.02)
        raise TimeoutError(f"sim not healthy within {timeout} s:\n{self.log()[-3000:]}")

    def wait_exit(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def terminate(self, timeout: float = 5.0) -> int:
        """SIGTERM the group and wait: the server's own clean shutdown."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        # only while unreaped: after wait() the pid (= pgid) may belong to someone else
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
