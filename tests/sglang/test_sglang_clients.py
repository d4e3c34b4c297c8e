"""SGLang 0.5.23's own benchmark clients against the SIMULATED server (sweeper.sim, a test
double): ``python -m sglang.bench_serving`` (backends sglang, sglang-oai, sglang-oai-chat)
and ``python -m sglang.bench_one_batch_server`` run without errors and agree with
``sweeper bench`` within 3% on tok/s (measured one after the other, alone, on a quiet machine)
and exactly on accept length (noise off, one stream).

Accept length, like with like. SGLang's clients all print the server's
``avg_spec_accept_length`` (tokens of the verify steps / verify steps since the last
/flush_cache, added to at each decode log line), as ``sweeper bench --api chat`` reads it
after each round. So SGLang's clients flush after their warm-up (``--flush-cache``; without
it the figure also counts whatever the server served before), and the simulator logs every
decode iteration (``--decode-log-interval 1``): at 0.5.23's default of 40 the last
iterations of a window are not counted yet, and two clients that flush at different points
count different verify steps (that lag is tested in tests/test_sim_endpoints.py).
``sweeper bench --api generate`` reads /generate's ``meta_info`` instead, SGLang's own
per-request figure, completion tokens / verify steps: it also counts the first token,
which the prefill makes, not a verify step.
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
       "--speculative-num-draft-tokens", "4", "--decode-log-interval", "1"]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    with SimProcess(SIM, log_dir=tmp_path_factory.mktemp("sim")) as server:
        server.wait_healthy(timeout=scaled(30))
        yield server


def sweeper_bench(sim: SimProcess, api: str) -> dict[str, Any]:
    """``sweeper bench --json`` on the simulated server through ``api``."""
    proc = run_cli("bench", "--url", sim.url, "--api", api, "--max-tokens",
                   str(OUTPUT_LEN), "--runs", str(PROMPTS), "--warmup", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def sweeper_figures(sim: SimProcess) -> dict[str, dict[str, Any]]:
    """``sweeper bench`` on the same server, each API: the reference accept lengths."""
    return {api: sweeper_bench(sim, api) for api in ("generate", "chat")}


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
        "--request-rate", "inf", "--warmup-requests", "1", "--flush-cache", "--seed", "1",
        "--disable-tqdm",
        "--output-file", str(out)], tmp)
    return json.loads(out.read_text().splitlines()[-1])


# wall-clock tok/s, so measured alone on a quiet machine (tests/quiet.py) and once more when
# it misses (the Makefile); sweeper's figure is taken right after SGLang's client, under the
# same load, where one taken minutes earlier read 3.4% apart on a busy machine
@pytest.mark.timing
@pytest.mark.parametrize("backend, api", [
    pytest.param("sglang", "generate", id="sglang"),
    pytest.param("sglang-oai", "chat", id="sglang-oai"),
    pytest.param("sglang-oai-chat", "chat", id="sglang-oai-chat"),
])
def test_bench_serving_agrees_with_sweeper_bench(
        backend: str, api: str, sim: SimProcess, sweeper_figures: dict[str, dict[str, Any]],
        tiny_model: Path, tmp_path: Path) -> None:
    got = bench_serving(sim, backend, tiny_model, tmp_path)
    ours = sweeper_bench(sim, api)
    assert got["completed"] == PROMPTS
    assert got["total_output_tokens"] == PROMPTS * OUTPUT_LEN
    # tok/s of a request, as sweeper measures it: its tokens over its end-to-end latency
    # (SGLang's output_throughput also counts the client's gaps between requests)
    per_request = OUTPUT_LEN / (got["mean_e2e_latency_ms"] / 1000)
    assert per_request == pytest.approx(ours["value"], rel=0.03)
    assert got["output_throughput"] <= per_request * 1.001
    # the server's average over the measured prompts, read by both (module docstring)
    server_avg = sweeper_figures["chat"]["accept_length"]
    assert sweeper_figures["chat"]["accept_length_source"] == "server_rounds"
    assert got["accept_length"] == pytest.approx(server_avg, abs=1e-4)  # printed to 4 places
    NOTES.append(f"bench_serving --backend {backend} on the simulator: {per_request:.1f} tok/s "
                 f"a request (sweeper bench {ours['value']:.1f}), accept length "
                 f"{got['accept_length']:.4f} (sweeper {server_avg:.4f})")


def test_generate_meta_counts_the_first_token_too(
        sweeper_figures: dict[str, dict[str, Any]]) -> None:
    """/generate's meta_info figure (completion tokens / verify steps) is the server's
    average with the prefill's first token added to every request's verify tokens."""
    meta, server = sweeper_figures["generate"], sweeper_figures["chat"]
    assert meta["accept_length_source"] == "generate_meta"
    verify_steps = (OUTPUT_LEN - 1) / server["accept_length"]  # per request, every one alike
    assert round(verify_steps) == pytest.approx(verify_steps, abs=0.01)
    assert meta["accept_length"] == pytest.approx(OUTPUT_LEN / round(verify_steps), rel=1e-9)


@pytest.mark.timing  # wall-clock tok/s, as above
def test_bench_one_batch_server_agrees_with_sweeper_bench(
        sim: SimProcess, sweeper_figures: dict[str, dict[str, Any]], tiny_model: Path,
        tmp_path: Path) -> None:
    out = tmp_path / "one_batch.jsonl"
    sglang_client("sglang.bench_one_batch_server", [
        "--base-url", sim.url, "--model-path", str(tiny_model),
        "--local-tokenizer-path", str(tiny_model), "--batch-size", "1",
        "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
        # token ids drawn locally: the default "random" samples ShareGPT from the Hub
        "--dataset-name", "random-ids", "--result-filename", str(out)], tmp_path)
    got = json.loads(out.read_text().splitlines()[-1])
    ours = sweeper_bench(sim, "generate")
    # tokens over the time after the first token: sweeper's decode tok/s
    assert got["output_throughput"] == pytest.approx(ours["decode_tok_s"]["mean"], rel=0.03)
    # SGLang writes the server's average rounded to two places (module docstring)
    NOTES.append(f"bench_one_batch_server on the simulator: output_throughput "
                 f"{got['output_throughput']:.1f} tok/s, last_ttft {got['last_ttft']:.4f} s "
                 f"(sweeper bench decode {ours['decode_tok_s']['mean']:.1f} tok/s, TTFT "
                 f"{ours['ttft_s']['mean']:.4f} s)")
    assert got["acc_length"] == round(sweeper_figures["chat"]["accept_length"], 2)
