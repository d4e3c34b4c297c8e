"""Every configuration is measured on the same prompts, in the same order, over real HTTP
against the simulated SGLang server (a test double)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sweeper.launch import LaunchConfig
from sweeper.measure import BenchSpec, load_prompts, run_benchmark
from sweeper.sim.harness import SimProcess

from .timeouts import scaled

CHAIN = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "sim/draft",
         "speculative-num-steps": 2, "speculative-eagle-topk": 1,
         "speculative-num-draft-tokens": 3}
TREE = {**CHAIN, "speculative-num-steps": 3, "speculative-eagle-topk": 2,
        "speculative-num-draft-tokens": 6}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    procs = []
    try:
        for i, args in enumerate((CHAIN, TREE)):
            flags = ["--sim-profile", "demo", "--sim-seed", str(11 + i),
                     "--sim-startup-seconds", "0.3", *LaunchConfig(args=args).flag_argv()]
            proc = SimProcess(flags, log_dir=tmp_path_factory.mktemp(f"sim{i}"),
                              model_path="m").start()
            procs.append(proc)
        for proc in procs:
            proc.wait_healthy(scaled(20))
        yield [p.url for p in procs]
    finally:
        for proc in procs:
            proc.terminate()


def _sent(result) -> list[int]:  # noqa: ANN001
    return [r.prompt_index for run in result.runs for r in run.requests]


def test_two_configurations_receive_the_same_prompt_sequence(servers: list[str]) -> None:
    ps = load_prompts()
    spec = BenchSpec(max_tokens=16, runs=4, warmup=0)
    a, b = (run_benchmark(url, spec, prompts=ps) for url in servers)
    assert _sent(a) == _sent(b) == list(ps.sequence[:4])
    # the next batch of a configuration continues where its previous one stopped
    a2 = run_benchmark(servers[0], spec, prompts=ps, first_round=4)
    assert _sent(a2) == list(ps.sequence[4:8])
    assert [r.position for r in a2.runs] == [4, 5, 6, 7] == a2.counted_positions
    assert [r.categories for r in a2.runs] == [[ps.category(i)] for i in ps.sequence[4:8]]
    # concurrent streams take consecutive places of the same sequence
    c2 = run_benchmark(servers[1], BenchSpec(max_tokens=16, runs=2, warmup=0,
                                             concurrency=2), prompts=ps, first_round=1)
    assert sorted(_sent(c2)) == sorted(ps.sequence[2:6])
    assert [r.position for r in c2.runs] == [2, 4]


def test_temperature_reaches_the_server_and_warm_up_stays_at_zero(servers: list[str]
                                                                  ) -> None:
    ps = load_prompts()
    greedy = run_benchmark(servers[0], BenchSpec(max_tokens=16, runs=1, warmup=0),
                           prompts=ps)
    spec = BenchSpec(max_tokens=16, runs=1, warmup=1, temperature=0.8)
    hot = [run_benchmark(servers[0], spec, prompts=ps) for _ in range(2)]
    # sampled outputs differ between two measurements of the same prompt ...
    assert hot[0].runs[0].requests[0].text != hot[1].runs[0].requests[0].text
    # ... while the warm-up (the lossless check's reference) is greedy
    assert hot[0].warmup_runs[0].requests[0].text == greedy.runs[0].requests[0].text
    assert hot[0].to_dict()["spec"]["temperature"] == 0.8
