"""--speculative-adaptive: SGLang's per-batch-size step switching, in the model and over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sweeper.sim import expected_throughput, load_profile
from sweeper.sim.adaptive import Controller, Slot, SlotState, parse_config
from sweeper.sim.harness import http_get, stream_chat
from sweeper.sim.model import InvalidArgs, resolve_config
from tests.sim_helpers import FAST, spawn, wait_for

__all__ = ["spawn"]

ADAPTIVE = {"speculative-algorithm": "EAGLE3", "speculative-adaptive": True}


def fixed(steps: int) -> dict[str, Any]:
    return {"speculative-algorithm": "EAGLE3", "speculative-num-steps": steps,
            "speculative-eagle-topk": 1, "speculative-num-draft-tokens": steps + 1}


def write(tmp_path: Path, data: Any, name: str = "adaptive.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_steps_follow_the_batch_size_slot(tmp_path: Path) -> None:
    # one candidate per slot: steps are a pure function of the running batch
    path = write(tmp_path, {"1": {"candidate_steps": [3]}, "4": {"candidate_steps": [1]}})
    args = {**ADAPTIVE, "speculative-adaptive-config": path}
    for concurrency, steps in ((1, 3), (2, 3), (3, 1), (4, 1), (16, 1)):
        got = expected_throughput("demo", args, {}, concurrency=concurrency)
        want = expected_throughput("demo", fixed(steps), {}, concurrency=concurrency)
        assert got.steps == steps, concurrency
        assert got.tok_s == pytest.approx(want.tok_s, rel=1e-9), concurrency


def test_zero_step_slot_runs_the_draft_extend_unless_the_env_skips_it(tmp_path: Path) -> None:
    path = write(tmp_path, {"1": {"candidate_steps": [0]}})
    args = {**ADAPTIVE, "speculative-adaptive-config": path, "speculative-num-steps": 0}
    plain = expected_throughput("demo", {}, {})
    zero = expected_throughput("demo", args, {})
    skipped = expected_throughput("demo", args, {"SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND": "1"})
    assert zero.steps == skipped.steps == 0
    # the draft extend still runs at 0 steps: slower than the baseline it was meant to be
    assert (zero.cycle_ms or 0) > (skipped.cycle_ms or 0) == pytest.approx(plain.cycle_ms)


def test_non_integer_keys_are_merged_into_every_slot() -> None:
    config = parse_config({"ema_alpha": 0.5, "update_interval": 3,
                           "1": {"candidate_steps": [1, 3]},
                           "8": {"candidate_steps": [0, 1], "update_interval": 7}})
    one, eight = config.slots
    assert one.ema_alpha == eight.ema_alpha == 0.5
    assert (one.update_interval, eight.update_interval) == (3, 7)  # a slot's own key wins


def test_routing_pads_to_captured_graph_sizes_then_takes_the_lower_slot() -> None:
    config = parse_config({"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [2]},
                           "32": {"candidate_steps": [0]}})
    ctl = Controller(config, 3, [1, 2, 4, 8, 16, 24, 32, 40, 48])
    assert [ctl.slot_key(b) for b in (1, 4, 5, 8, 17, 25, 31, 33, 64)] == [
        1, 1, 8, 8, 8, 32, 32, 32, 32]
    no_graphs = Controller(config, 3, None)
    assert no_graphs.slot_key(5) == 1  # without CUDA graphs nothing pads the batch


def test_ema_moves_up_on_good_acceptance_and_down_on_bad() -> None:
    slot = Slot(batch_size=1, candidate_steps=(1, 3, 5))
    state = SlotState.start(slot, 1)
    switches = [state.update([state.current]) for _ in range(40)]
    assert [s for s in switches if s] == [3, 5]  # accepted everything: deeper and deeper
    for _ in range(40):
        state.update([0])
    assert state.current == 1
    # a zero-step slot probes its next candidate every update_interval batches
    zero = SlotState.start(Slot(batch_size=1, candidate_steps=(0, 1)), 0)
    assert [zero.update([0]) for _ in range(15)][-1] == 1


def test_the_ema_controller_settles_and_the_model_reports_it() -> None:
    # kimi at batch 1: started on 1 step, the EMA climbs past 0.5 and settles at 3
    path_args = {**ADAPTIVE, "speculative-num-steps": 1}
    cfg = resolve_config(load_profile("kimi-k2.5-8xh200"), path_args, {})
    assert cfg.adaptive is not None and cfg.steps == 1 and cfg.draft_tokens == 2
    got = expected_throughput("kimi-k2.5-8xh200", path_args, {})
    assert got.steps == 3
    assert got.tok_s == pytest.approx(
        expected_throughput("kimi-k2.5-8xh200", fixed(3), {}).tok_s, rel=1e-9)
    # SGLang's default config: no drafting at all once a batch reaches the 64 slot
    lifted = {**ADAPTIVE, "max-running-requests": 128}
    assert expected_throughput("demo", lifted, {}, concurrency=64).steps == 0


@pytest.mark.parametrize(("data", "message"), [
    ([1, 3], "must be a JSON object, got list"),
    ({"candidate_steps": [1, 3, 7]}, "must contain at least one integer-string BS key"),
    ({"1": {"candidate_steps": []}}, "BS 1: candidate_steps must be a list of non-negative"),
    ({"1": {"candidate_steps": [1, -2]}}, "non-negative ints, got [1, -2]"),
    ({"1": {"candidate_steps": [1]}, "strategy": "fast"}, "'strategy' must be 'ema' or"),
])
def test_bad_configs_are_refused_like_sglang(tmp_path: Path, data: Any, message: str) -> None:
    args = {**ADAPTIVE, "speculative-adaptive-config": write(tmp_path, data)}
    with pytest.raises(InvalidArgs) as info:
        resolve_config(load_profile("demo"), args, {})
    assert info.value.kind == "ValueError" and message in str(info.value)
    assert expected_throughput("demo", args, {}).failure == "invalid_args"


def test_launch_steps_must_be_a_candidate_and_unsupported_setups_fall_back() -> None:
    demo = load_profile("demo")
    with pytest.raises(InvalidArgs, match=r"--speculative-num-steps=4 is not in the adaptive "
                                          r"config candidate_steps \[0, 1, 3, 5, 7\]"):
        resolve_config(demo, {**ADAPTIVE, "speculative-num-steps": 4}, {})
    tree = resolve_config(demo, {**fixed(3), "speculative-eagle-topk": 2,
                                 "speculative-num-draft-tokens": 6,
                                 "speculative-adaptive": True}, {})
    assert tree.adaptive is None and tree.steps == 3
    assert "speculative_adaptive disabled: speculative_eagle_topk=2" in tree.warnings[0]


def run_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sweeper.sim", "--model-path", "m",
                           "--port", "1", *args], capture_output=True, text=True, timeout=30)


def test_a_bad_config_file_exits_with_sglangs_error(tmp_path: Path) -> None:
    bad = write(tmp_path, {"1": {"candidate_steps": "3"}})
    out = run_sim("--speculative-algorithm", "EAGLE3", "--speculative-adaptive",
                  "--speculative-adaptive-config", bad)
    assert out.returncode == 1
    assert "adaptive_spec_params.py" in out.stderr
    assert "ValueError: BS 1: candidate_steps must be a list of non-negative ints" in out.stderr
    missing = run_sim("--speculative-algorithm", "EAGLE3", "--speculative-adaptive",
                      "--speculative-adaptive-config", str(tmp_path / "nope.json"))
    assert missing.returncode == 1 and "FileNotFoundError: [Errno 2]" in missing.stderr


def _adaptive_server(spawn, tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    path = write(tmp_path, {"1": {"candidate_steps": [3]}, "4": {"candidate_steps": [1]}})
    flags = ["--speculative-algorithm", "EAGLE3", "--speculative-adaptive",
             "--speculative-adaptive-config", path]
    sim = spawn([*FAST, "--sim-noise", "0", *flags])
    sim.wait_healthy()
    return sim, {**ADAPTIVE, "speculative-adaptive-config": path}


def _four_at_once(url: str, tokens: int = 500) -> list[float]:
    results: list[float] = []
    barrier = threading.Barrier(4)

    def one() -> None:
        barrier.wait(timeout=10)
        results.append(stream_chat(url, "four", tokens).tok_s)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_server_takes_the_adaptive_config_and_serves_a_batch(spawn, tmp_path: Path) -> None:
    sim, args = _adaptive_server(spawn, tmp_path)
    info = json.loads(http_get(sim.url + "/get_server_info")[1])
    assert info["speculative_adaptive"] is True
    assert info["speculative_adaptive_config"] == args["speculative-adaptive-config"]
    assert "AdaptiveSpeculativeParams initialized: steps=3" in sim.log()
    assert len(_four_at_once(sim.url)) == 4
    assert expected_throughput("demo", args, {}, concurrency=4).steps == 1


@pytest.mark.timing  # wall-clock tok/s: `make test` runs these alone, on a quiet machine
def test_server_switches_steps_by_batch_and_matches_the_model(spawn, tmp_path: Path) -> None:
    # Streams of 2000 tokens (about 2 s each): a stream's tok/s carries its fixed costs (the
    # request, the first token, a thread starting late past the barrier) over its length;
    # at 500 tokens 18 ms of those made 3% (CI missed twice in one run), at 2000 it takes 70.
    sim, args = _adaptive_server(spawn, tmp_path)
    alone = stream_chat(sim.url, "alone", 2000).tok_s
    assert alone == pytest.approx(expected_throughput("demo", args, {}).tok_s, rel=0.02)
    results = _four_at_once(sim.url, tokens=2000)
    at4 = expected_throughput("demo", args, {}, concurrency=4)
    three_at4 = expected_throughput("demo", fixed(3), {}, concurrency=4).tok_s or 0
    assert at4.steps == 1 and len(results) == 4
    assert all(r == pytest.approx(at4.tok_s, rel=0.03) for r in results), (
        f"four streams {[round(r, 1) for r in results]} tok/s, the model {at4.tok_s:.1f} at 1 "
        f"step, {three_at4:.1f} had it stayed at 3; alone {alone:.1f}")
    assert abs((at4.tok_s or 0) / three_at4 - 1) > 0.06  # distinguishable from staying at 3


def test_server_logs_the_ema_switch(spawn, tmp_path: Path) -> None:
    path = write(tmp_path, {"1": {"candidate_steps": [1, 3]}})
    sim = spawn([*FAST, "--sim-noise", "0", "--speculative-algorithm", "EAGLE3",
                 "--speculative-adaptive", "--speculative-adaptive-config", path,
                 "--speculative-num-steps", "1"])
    sim.wait_healthy()
    stream_chat(sim.url, "climb", 120)
    wait_for(lambda: "Adaptive spec params updated: steps 1 -> 3" in sim.log(), 5,
             "the EMA switch")
    info = json.loads(http_get(sim.url + "/get_server_info")[1])
    assert info["internal_states"][0]["speculative_num_steps"] == 3
