"""A real SGLang 0.5.23 server as a process of the tests: started in its own session, waited
for with a bounded deadline, stopped by process group (TERM, then KILL).

CPU-only recipe (this machine has no GPU): ``SGLANG_USE_CPU_ENGINE=1 python -m
sglang.launch_server --model-path TINY --device cpu --attention-backend torch_native
--max-total-tokens 8192 --skip-server-warmup``, with the test-only ``sgl_kernel`` stand-in
(stand_in/) first on PYTHONPATH and the hub switched off (the model is on local disk).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from sweeper.launch import LaunchConfig
from sweeper.remote import free_port
from tests.timeouts import scaled

HERE = Path(__file__).resolve().parent
STAND_IN = HERE / "stand_in"
READY_LINE = "The server is fired up and ready to roll!"
# Seconds on an idle machine (scaled by SWEEPER_TEST_TIMEOUT_FACTOR): a start takes 1.5-3
# minutes on 2 busy cores, mostly importing torch and SGLang.
START_DEADLINE = 420.0
# What the closing note of `make test-sglang` prints (conftest.pytest_terminal_summary).
NOTES: list[str] = []


def sglang_python() -> Path:
    value = os.environ.get("SWEEPER_SGLANG_PYTHON")
    assert value, "SWEEPER_SGLANG_PYTHON is unset: run `make test-sglang`"
    path = Path(value)
    assert path.exists(), f"SWEEPER_SGLANG_PYTHON={value} does not exist: run `make test-sglang`"
    return path


def sglang_env(**extra: str) -> dict[str, str]:
    """The environment of every SGLang process here: the stand-in first on the path, the
    CPU engine, and no hub (nothing is downloaded: the model is a local folder)."""
    path = os.pathsep.join(filter(None, [str(STAND_IN), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "SGLANG_USE_CPU_ENGINE": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **extra}


def server_flags(model: Path, port: int) -> dict[str, str | int | bool]:
    """The flags of the CPU recipe, as a study's ``server.args`` (dashed names)."""
    return {"model-path": str(model), "device": "cpu", "attention-backend": "torch_native",
            "max-total-tokens": 8192, "skip-server-warmup": True, "host": "127.0.0.1",
            "port": port}


def server_args(model: Path, port: int) -> list[str]:
    """The same flags as argv words (without the launcher)."""
    return LaunchConfig(args=server_flags(model, port)).flag_argv()


def server_env() -> dict[str, str]:
    """What a server here needs in its environment beyond this process's own."""
    env = sglang_env()
    return {k: env[k] for k in ("PYTHONPATH", "SGLANG_USE_CPU_ENGINE", "HF_HUB_OFFLINE",
                                "TRANSFORMERS_OFFLINE")}


def launcher() -> str:
    """A study's ``server.launcher`` for the cached venv's SGLang."""
    return f"{sglang_python()} -m sglang.launch_server"


def kill_group(pgid: int, grace: float = 20.0) -> None:
    """TERM the group, then KILL what is left after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """A live (non-zombie) process in the group."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
            if int(pgrp) == pgid and state != "Z":
                return True
    return False


def wait_until(cond: Any, timeout: float, what: str, log: Path | None = None) -> Any:
    """Poll ``cond`` within a bounded (scaled) deadline; fail with the log's tail."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}"
                         + (f"\n--- {log} (tail) ---\n{tail(log)}" if log else ""))


def tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class RealServer:
    """One ``sglang.launch_server`` process on a free port, logging to a file."""

    def __init__(self, model: Path, workdir: Path, port: int | None = None,
                 extra: list[str] | None = None) -> None:
        self.model = model
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"sglang-{self.port}.log"
        self.argv = [str(sglang_python()), "-m", "sglang.launch_server",
                     *server_args(model, self.port), *(extra or [])]
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.ready_after: float | None = None

    def start(self) -> RealServer:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=sglang_env(),
                                         start_new_session=True)
        self.started = time.monotonic()
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, label: str) -> float:
        """Seconds from start to /health 200; fails at once, with the log, if it exits."""
        assert self.proc is not None

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"SGLang exited with {self.proc.returncode} before it "
                                     f"was healthy\n--- {self.log_path} (tail) ---\n"
                                     f"{tail(self.log_path)}")
            return self.healthy()

        wait_until(ready, START_DEADLINE, f"SGLang /health on port {self.port}", self.log_path)
        self.ready_after = time.monotonic() - self.started
        NOTES.append(f"server start ({label}): healthy after {self.ready_after:.0f} s")
        return self.ready_after

    def stop(self) -> None:
        if self.proc is not None:
            kill_group(self.proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
