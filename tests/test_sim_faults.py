"""Fault modes driven by the profile's ``faults:`` rules or --sim-fault: lossy output, HTTP 500
on every generation request, a scheduler crash while serving."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.sim.faults import active_faults, parse_cli_fault
from sweeper.sim.harness import http_get, http_post
from sweeper.sim.model import resolve_config
from sweeper.sim.profiles import PROFILE_DIR, ProfileError, load_profile
from tests.sim_helpers import EAGLE, FAST, spawn, wait_for

__all__ = ["spawn"]

TREE = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6"]
FAULTS = """
faults:
  - kind: lossy
    when: {args: {speculative-eagle-topk: [2, 4]}}
    every: 5
    reason: the tree-verify kernel accepts a wrong branch
  - kind: http_500
    when: {env: {SIM_BROKEN_TOKENIZER: "1"}}
  - kind: crash_serving
    when: {args: {speculative-num-steps: 6}}
    requests: 1
"""


@pytest.fixture
def faulty(tmp_path: Path) -> str:
    path = tmp_path / "faulty.yaml"
    path.write_text((PROFILE_DIR / "demo.yaml").read_text() + FAULTS)
    return str(path)


def generate(url: str, text: str, n: int = 40) -> str:
    status, body = http_post(url + "/generate", {
        "text": text, "sampling_params": {"max_new_tokens": n, "temperature": 0,
                                          "ignore_eos": True}})
    assert status == 200, body
    return str(json.loads(body)["text"])


def test_rules_match_resolved_flags_and_env(faulty: str) -> None:
    profile = load_profile(faulty)
    assert [r.kind for r in profile.faults] == ["lossy", "http_500", "crash_serving"]
    tree = resolve_config(profile, {"speculative-algorithm": "EAGLE3",
                                    "speculative-num-steps": 3, "speculative-eagle-topk": 2,
                                    "speculative-num-draft-tokens": 6}, {})
    chain = resolve_config(profile, {"speculative-algorithm": "EAGLE3"}, {})
    assert active_faults(profile, tree).lossy_every == 5
    assert not active_faults(profile, chain)
    env = resolve_config(profile, {"speculative-algorithm": "EAGLE3"},
                         {"SIM_BROKEN_TOKENIZER": "1"})
    assert active_faults(profile, env).http_500 and env.env == {}  # any variable matches
    # profile rules leave the no-speculation server alone unless they say otherwise
    plain = resolve_config(profile, {}, {"SIM_BROKEN_TOKENIZER": "1"})
    assert not active_faults(profile, plain)
    # the built-in profiles have no faults: every launch is healthy
    assert load_profile("demo").faults == ()
    baseline = resolve_config(load_profile("demo"), {}, {})
    assert not active_faults(load_profile("demo"), baseline, [parse_cli_fault("lossy")])
    assert active_faults(load_profile("demo"), baseline,
                         [parse_cli_fault("crash_serving:3")]).crash_after == 3


def test_bad_fault_rules_are_clear_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((PROFILE_DIR / "demo.yaml").read_text() + "faults:\n  - kind: melt\n")
    with pytest.raises(ProfileError, match=r"faults\[0\]: kind must be one of"):
        load_profile(bad)
    with pytest.raises(ValueError, match="kind must be one of"):
        parse_cli_fault("explode")


def test_lossy_changes_greedy_text_only_where_the_rule_matches(spawn, faulty: str) -> None:
    common = [*FAST, "--sim-profile", faulty, "--sim-noise", "0"]
    sims = {"base": spawn(common), "chain": spawn([*common, *EAGLE]),
            "tree": spawn([*common, *TREE]), "cli": spawn([*FAST, *EAGLE, "--sim-fault", "lossy"])}
    for sim in sims.values():
        sim.wait_healthy()
    texts = {name: generate(sim.url, "the same prompt") for name, sim in sims.items()}
    assert texts["chain"] == texts["base"]  # a matching rule only breaks matching launches
    for broken in ("tree", "cli"):
        words, reference = texts[broken].split(), texts["base"].split()
        assert len(words) == len(reference) == 40
        wrong = [i for i, (a, b) in enumerate(zip(words, reference, strict=True)) if a != b]
        assert wrong and len(wrong) <= 40 // 5 + 1, broken
    assert "SIMULATED fault(s) of this launch: lossy" in sims["tree"].log()
    # the lossy server is deterministic too: the same wrong text every time
    assert generate(sims["tree"].url, "the same prompt") == texts["tree"]
    # the baseline with --sim-fault lossy keeps its outputs: nothing speculative to break
    base_cli = spawn([*FAST, "--sim-fault", "lossy"])
    base_cli.wait_healthy()
    assert generate(base_cli.url, "the same prompt") == texts["base"]


def test_http_500_is_healthy_but_every_generation_fails(spawn) -> None:
    sim = spawn([*FAST, "--sim-fault", "http_500"])  # applies without speculation too
    sim.wait_healthy()
    assert http_get(sim.url + "/get_model_info")[0] == 200
    status, body = http_post(sim.url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "stream": True})
    error = json.loads(body)
    assert status == 500 and error["object"] == "error" and error["code"] == 500
    assert error["type"] == "InternalServerError"
    assert error["message"].startswith("Internal server error: ")
    status, body = http_post(sim.url + "/generate", {"text": "x"})
    assert status == 500 and "message" in json.loads(body)["error"]
    log = sim.log()
    assert "Error in request: " in log and "[http_server] Error: " in log
    assert sim.proc is not None and sim.proc.poll() is None


@pytest.mark.parametrize("source", ["cli", "profile"])
def test_crash_serving_exits_1_after_n_requests(spawn, faulty: str, source: str) -> None:
    if source == "cli":
        sim, served = spawn([*FAST, "--sim-fault", "crash_serving"]), 2  # default N
    else:
        six = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "6",
               "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "7"]
        sim, served = spawn([*FAST, "--sim-profile", faulty, *six]), 1
    sim.wait_healthy()
    for i in range(served):
        assert generate(sim.url, f"request {i}", 10)
    assert "Scheduler hit an exception" not in sim.log()
    try:
        status, _ = http_post(sim.url + "/generate", {"text": "the last straw"}, timeout=10)
    except OSError:
        status = 0  # the process may go away before it answers
    assert status != 200
    assert sim.wait_exit(timeout=10) == 1
    log = sim.log()
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    wait_for(lambda: http_get(sim.url + "/health", timeout=0.5)[0] == 0, 5, "port closed")
