"""The benchmark client against the simulated SGLang server (a real HTTP server process)."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sweeper.bench import BenchSpec, compare_outputs, run_benchmark

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sweeper.sim.__main__") is None,
    reason="the simulator CLI (python -m sweeper.sim) is not available",
)

ARGS = {
    "speculative-algorithm": "EAGLE3",
    "speculative-draft-model-path": "sim/draft",
    "speculative-num-steps": 2,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 3,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    flags = [tok for k, v in ARGS.items() for tok in (f"--{k}", str(v))]
    cmd = [
        sys.executable,
        "-m",
        "sweeper.sim",
        "--model-path",
        "m",
        "--port",
        str(port),
        "--sim-profile",
        "demo",
        "--sim-seed",
        "3",
        "--sim-noise",
        "0",
        "--sim-startup-seconds",
        "0.5",
        *flags,
    ]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # its own group: never a broad kill
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"simulator exited: {log.read_text()[-600:]}"
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    pytest.fail("simulator not healthy within 20 s")


def _expected() -> tuple[float, float]:
    from sweeper.sim import expected_throughput

    e = expected_throughput("demo", ARGS, {}, concurrency=1)
    assert e.tok_s is not None and e.accept_length is not None
    return e.tok_s, e.accept_length


def test_chat_against_simulator_matches_ground_truth(sim: str) -> None:
    tok_s, accept = _expected()
    res = run_benchmark(sim, BenchSpec(max_tokens=500, runs=2, warmup=1))
    assert res.n_errors == 0 and res.n_short == 0 and res.stats.n == 2
    assert all(r.completion_tokens == 500 for run in res.runs for r in run.requests)
    assert res.stats.mean == pytest.approx(tok_s, rel=0.02)
    assert res.accept_length == pytest.approx(accept, rel=0.1)


def test_generate_against_simulator_reports_acceptance(sim: str) -> None:
    _, accept = _expected()
    # 200 tokens keep the test fast; the tok/s ground truth is for 500 (checked over chat)
    spec = BenchSpec(api="generate", max_tokens=200, runs=2, warmup=0)
    res = run_benchmark(sim, spec)
    assert res.n_errors == 0 and res.n_short == 0
    assert res.accept_length_source == "generate_meta"
    assert res.accept_length == pytest.approx(accept, rel=0.1)
    if res.per_position_acceptance is not None:
        assert all(p is None or 0 <= p <= 1 for p in res.per_position_acceptance)
    # temperature 0 on the same prompts: the same text again (the lossless check's basis)
    again = run_benchmark(sim, spec)
    assert compare_outputs(res.outputs(), again.outputs()) == []
