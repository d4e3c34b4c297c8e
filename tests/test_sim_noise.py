"""The simulated server (a test double) has a real node's noise: a speed per server start,
an optional slow drift, and acceptance that depends on the prompt's category; its ground
truth over a prompt set is the mean over the set's prompts."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
import yaml

from sweeper.launch import LaunchConfig
from sweeper.measure import BenchSpec, load_prompts, run_benchmark
from sweeper.sim import expected_throughput
from sweeper.sim import prompts as sim_prompts
from sweeper.sim.engine import NoiseSource
from sweeper.sim.harness import SimProcess
from sweeper.sim.profiles import PROFILE_DIR, builtin_profiles, load_profile

from .timeouts import scaled

CHAIN = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "sim/draft",
         "speculative-num-steps": 3, "speculative-eagle-topk": 1,
         "speculative-num-draft-tokens": 4}


def _profile(tmp_path: Path, **noise: object) -> Path:
    data = yaml.safe_load((PROFILE_DIR / "demo.yaml").read_text())
    data["noise"] = {"cycle_sd": 0.0, "accept_sd": 0.0, **noise}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("name", builtin_profiles())
def test_shipped_profiles_have_start_noise_and_prompt_dependent_acceptance(name: str) -> None:
    noise = load_profile(name).noise
    assert noise.start_sd == pytest.approx(0.015)
    accepts = [c.accept for c in noise.categories]
    assert max(accepts) / min(accepts) >= 1.10


def test_one_speed_factor_per_start_with_the_profile_sd(tmp_path: Path) -> None:
    prof = load_profile(_profile(tmp_path, start_sd=0.1))
    factors = []
    for seed in range(400):
        src = NoiseSource(prof, seed, 1.0)
        draws = {src.draw() for _ in range(5)}
        assert len(draws) == 1  # no per-request noise here: every request of a start alike
        (time_factor, accept), = draws
        assert accept == 1.0 and time_factor == pytest.approx(1 / src.start_factor)
        factors.append(math.log(src.start_factor))
    assert statistics.stdev(factors) == pytest.approx(0.1, rel=0.12)
    assert NoiseSource(prof, 5, 1.0).start_factor == NoiseSource(prof, 5, 1.0).start_factor
    assert NoiseSource(prof, 5, 0.0).start_factor == 1.0  # --sim-noise 0: none


def test_drift_is_a_random_walk_in_serving_time(tmp_path: Path) -> None:
    prof = load_profile(_profile(tmp_path, drift_sd=0.05))
    ends = []
    for seed in range(300):
        now = [0.0]
        src = NoiseSource(prof, seed, 1.0, clock=lambda now=now: now[0])
        for _ in range(4):  # four draws a quarter of an hour apart: one hour
            now[0] += 900.0
            factor, _ = src.draw()
        ends.append(math.log(factor))
    assert statistics.stdev(ends) == pytest.approx(0.05, rel=0.15)


def test_ground_truth_is_the_mean_over_the_prompt_set() -> None:
    prof = load_profile("demo")
    ps = load_prompts()
    texts = ["\n".join(m["content"] for m in p) for p in ps.prompts]
    names = [getattr(sim_prompts.category(prof, t), "name", None) for t in texts]
    code, story = texts[names.index("code")], texts[names.index("creative")]
    fast = expected_throughput(prof, CHAIN, prompts=[code])
    slow = expected_throughput(prof, CHAIN, prompts=[story])
    assert fast.accept_length > slow.accept_length and fast.tok_s > slow.tok_s * 1.03
    whole = expected_throughput(prof, CHAIN, prompts=texts)
    each = [expected_throughput(prof, CHAIN, prompts=[t]).tok_s for t in texts]
    assert whole.tok_s == pytest.approx(sum(each) / len(each))
    # no speculation: the prompt does not matter
    base = expected_throughput(prof, {}, prompts=texts).tok_s
    assert base == expected_throughput(prof, {}).tok_s


@pytest.mark.timing  # wall-clock tok/s against the model: alone, on a quiet machine
def test_the_server_serves_each_prompt_what_the_ground_truth_says(tmp_path: Path) -> None:
    """Over HTTP, noise only from the prompts: every prompt's measured tok/s is its ground
    truth, so a study's mean over the set is the set's ground truth."""
    prof_path = _profile(tmp_path, **yaml.safe_load((PROFILE_DIR / "demo.yaml").read_text())
                         ["noise"] | {"cycle_sd": 0.0, "accept_sd": 0.0, "start_sd": 0.0})
    prof = load_profile(prof_path)
    ps = load_prompts()
    picks = [i for i in ps.sequence[:6]]
    lines = [json.dumps({"messages": ps.prompts[i]}) for i in picks]
    (tmp_path / "set.jsonl").write_text("\n".join(lines) + "\n")
    sub = load_prompts(str(tmp_path / "set.jsonl"))
    flags = ["--sim-profile", str(prof_path), "--sim-seed", "1", "--sim-startup-seconds",
             "0.3", *LaunchConfig(args=CHAIN).flag_argv()]
    with SimProcess(flags, log_dir=tmp_path, model_path="m") as proc:
        proc.wait_healthy(scaled(20))
        res = run_benchmark(proc.url, BenchSpec(max_tokens=500, runs=len(sub), warmup=1),
                            prompts=sub)
    texts = ["\n".join(m["content"] for m in p) for p in sub.prompts]
    for run in res.runs:
        idx = run.requests[0].prompt_index
        truth = expected_throughput(prof, CHAIN, prompts=[texts[idx]]).tok_s
        assert run.tok_s == pytest.approx(truth, rel=0.03)
    truth = expected_throughput(prof, CHAIN, prompts=texts).tok_s
    assert res.stats.mean == pytest.approx(truth, rel=0.02)
    spread = max(r.tok_s for r in res.runs) / min(r.tok_s for r in res.runs)
    assert spread > 1.03  # the prompts made a difference the statistics must see
