"""The benchmark client against the simulated SGLang server (a real HTTP server process)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from sweeper.launch import LaunchConfig
from sweeper.measure import BenchSpec, compare_outputs, run_benchmark
from sweeper.sim.harness import SimProcess

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


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    flags = ["--sim-profile", "demo", "--sim-seed", "3", "--sim-noise", "0",
             "--sim-startup-seconds", "0.5", *LaunchConfig(args=ARGS).flag_argv()]
    with SimProcess(flags, log_dir=tmp_path_factory.mktemp("sim"), model_path="m") as proc:
        proc.wait_healthy(20)
        yield proc.url


def _expected() -> tuple[float, float]:
    from sweeper.sim import expected_throughput

    e = expected_throughput("demo", ARGS, {}, concurrency=1)
    assert e.tok_s is not None and e.accept_length is not None
    return e.tok_s, e.accept_length


@pytest.mark.timing  # wall-clock tok/s against the model: alone, on a quiet machine
def test_chat_against_simulator_matches_ground_truth(sim: str) -> None:
    tok_s, accept = _expected()
    res = run_benchmark(sim, BenchSpec(max_tokens=500, runs=2, warmup=1))
    assert res.n_errors == 0 and res.n_short == 0 and res.stats.n == 2
    assert all(r.completion_tokens == 500 for run in res.runs for r in run.requests)
    assert res.stats.mean == pytest.approx(tok_s, rel=0.02)
    assert res.accept_length == pytest.approx(accept, rel=0.01)  # noise off: off by 0.3% at most


def test_generate_against_simulator_reports_acceptance(sim: str) -> None:
    _, accept = _expected()
    # 200 tokens keep the test fast; the tok/s ground truth is for 500 (checked over chat)
    spec = BenchSpec(api="generate", max_tokens=200, runs=2, warmup=0)
    res = run_benchmark(sim, spec)
    assert res.n_errors == 0 and res.n_short == 0
    assert res.accept_length_source == "generate_meta"
    assert res.accept_length == pytest.approx(accept, rel=0.01)  # noise off: off by 0.3% at most
    if res.per_position_acceptance is not None:
        assert all(p is None or 0 <= p <= 1 for p in res.per_position_acceptance)
    # temperature 0 on the same prompts: the same text again (the lossless check's basis)
    again = run_benchmark(sim, spec)
    assert compare_outputs(res.outputs(), again.outputs()) == []
