"""SGLang 0.5.23's own benchmark clients against the SIMULATED server (sweeper.sim, a test
double): ``python -m sglang.bench_serving`` (backends sglang, sglang-oai, sglang-oai-chat)
and ``python -m sglang.bench_one_batch_server`` run without errors and agree with
``sweeper bench`` within 3% on tok/s and exactly on accept length (noise off, one stream).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sweeper.sim.harness import SimProcess
from tests.conftest import run_cli
from tests.sglang.real import NOTES, sglang_env, sglang_python
from tests.timeouts import scaled

pytestmark = pytest.mark.sglang

OUTPUT_LEN = 400
INPUT_LEN = 64
PROMPTS = 5
SIM = ["--sim-profile", "demo", "--sim-seed", "7", "--sim-noise", "0",
       "--sim-startup-seconds", "0.05", "--tp-size", "4",
       "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/demo-eagle3",
       "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
       "--speculative-num-draft-tokens", "4"]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    with SimProcess(SIM, log_dir=tmp_path_factory.mktemp("sim")) as server:
        server.wait_healthy(timeout=scaled(30))
        yield server


@pytest.fixture(scope="module")
def sweeper_figures(sim: SimProcess) -> dict[str, dict[str, Any]]:
    """``sweeper bench`` on the same server, each API: the reference figures."""
    out = {}
    for api in ("generate", "chat"):
        proc = run_cli("bench", "--url", sim.url, "--api", api, "--max-tokens",
                       str(OUTPUT_LEN), "--runs", str(PROMPTS), "--warmup", "1", "--json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[api] = json.loads(proc.stdout)
    return out


def sglang_client(module: str, args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(sglang_python()), "-m", module, *args], capture_output=True,
                          text=True, timeout=scaled(600), env=sglang_env(), cwd=tmp)
    assert proc.returncode == 0, f"{module} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def bench_serving(sim: SimProcess, backend: str, tiny_model: Path, tmp: Path) -> dict[str, Any]:
    out = tmp / f"{backend}.jsonl"
    sglang_client("sglang.bench_serving", [
        "--backend", backend, "--base-url", sim.url, "--model", "sim-model",
        "--tokenizer", str(tiny_model), "--dataset-name", "random-ids",
        "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
        "--random-range-ratio", "1", "--num-prompts", str(PROMPTS), "--max-concurrency", "1",
        "--request-rate", "inf", "--warmup-requests", "1", "--seed", "1", "--disable-tqdm",
        "--output-file", str(out)], tmp)
    return json.loads(out.read_text().splitlines()[-1])


@pytest.mark.parametrize("backend, api", [
    pytest.param("sglang", "generate", id="sglang"),
    pytest.param("sglang-oai", "chat", id="sglang-oai"),
    pytest.param("sglang-oai-chat", "chat", id="sglang-oai-chat"),
])
def test_bench_serving_agrees_with_sweeper_bench(
        backend: str, api: str, sim: SimProcess, sweeper_figures: dict[str, dict[str, Any]],
        tiny_model: Path, tmp_path: Path) -> None:
    got = bench_serving(sim, backend, tiny_model, tmp_path)
    ours = sweeper_figures[api]
    assert got["completed"] == PROMPTS
    assert got["total_output_tokens"] == PROMPTS * OUTPUT_LEN
    # tok/s of a request, as sweeper measures it: its tokens over its end-to-end latency
    # (SGLang's output_throughput also counts the client's gaps between requests)
    per_request = OUTPUT_LEN / (got["mean_e2e_latency_ms"] / 1000)
    assert per_request == pytest.approx(ours["value"], rel=0.03)
    assert got["output_throughput"] <= per_request * 1.001
    assert ours["accept_length"] is not None
    # the same figure as both print it (two decimals): SGLang's client reads the server's
    # running average, sweeper the benchmark's own window
    assert round(got["accept_length"], 2) == round(ours["accept_length"], 2)
    NOTES.append(f"bench_serving --backend {backend} on the simulator: {per_request:.1f} tok/s "
                 f"a request (sweeper bench {ours['value']:.1f}), accept length "
                 f"{got['accept_length']:.4f} (sweeper {ours['accept_length']:.4f})")


def test_bench_one_batch_server_agrees_with_sweeper_bench(
        sim: SimProcess, sweeper_figures: dict[str, dict[str, Any]], tiny_model: Path,
        tmp_path: Path) -> None:
    out = tmp_path / "one_batch.jsonl"
    sglang_client("sglang.bench_one_batch_server", [
        "--base-url", sim.url, "--model-path", str(tiny_model),
        "--local-tokenizer-path", str(tiny_model), "--batch-size", "1",
        "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
        "--result-filename", str(out)], tmp_path)
    got = json.loads(out.read_text().splitlines()[-1])
    ours = sweeper_figures["generate"]
    # tokens over the time after the first token: sweeper's decode tok/s
    assert got["output_throughput"] == pytest.approx(ours["decode_tok_s"]["mean"], rel=0.03)
    assert round(got["acc_length"], 2) == round(ours["accept_length"], 2)
