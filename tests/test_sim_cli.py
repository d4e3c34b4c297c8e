"""The simulator's command line: SGLang's flags, argparse errors, rules and --config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from sweeper.sim.harness import http_get
from tests.sim_helpers import FAST, spawn

__all__ = ["spawn"]


def run_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sweeper.sim", *args], capture_output=True,
                          text=True, timeout=30)


def test_help_lists_every_flag() -> None:
    out = run_sim("--help")
    assert out.returncode == 0
    for flag in ("--model-path", "--tp-size", "--speculative-algorithm",
                 "--speculative-draft-model-path", "--speculative-num-steps",
                 "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                 "--speculative-draft-tp-size", "--mem-fraction-static", "--cuda-graph-max-bs",
                 "--max-running-requests", "--disable-cuda-graph", "--disable-custom-all-reduce",
                 "--enable-nccl-nvls", "--disable-overlap-schedule", "--attention-backend",
                 "--decode-log-interval", "--trust-remote-code", "--config", "--sim-profile",
                 "--sim-seed", "--sim-noise", "--sim-startup-seconds"):
        assert flag in out.stdout, flag
    assert "SIMULATED" in out.stdout


def test_unknown_flag_is_an_argparse_error() -> None:
    out = run_sim("--model-path", "m", "--speculative-bogus", "3")
    assert out.returncode == 2
    assert "unrecognized arguments: --speculative-bogus 3" in out.stderr


def test_partial_speculative_triple_is_sglangs_assertion() -> None:
    out = run_sim("--model-path", "m", "--port", "1", "--speculative-algorithm", "EAGLE3",
                  "--speculative-eagle-topk", "2")
    assert out.returncode == 1
    assert "AssertionError: If any of speculative_num_steps" in out.stderr
    assert "all of them must be set" in out.stderr


def test_config_yaml_follows_sglangs_rules_and_cli_overrides(spawn, tmp_path: Path) -> None:
    config = tmp_path / "launch.yaml"
    config.write_text(yaml.safe_dump({
        "tp-size": 2,
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": 4,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 9,  # topk 1: adjusted to steps + 1 with a warning
        "disable-custom-all-reduce": True,
        "enable-nccl-nvls": False,
        "cuda-graph-max-bs": 16,
    }))
    sim = spawn([*FAST, "--config", str(config), "--speculative-num-steps", "2"])
    sim.wait_healthy()
    status, body = http_get(sim.url + "/get_server_info")
    info = json.loads(body)
    assert status == 200
    assert info["tp_size"] == 2 and info["cuda_graph_max_bs"] == 16
    assert info["disable_custom_all_reduce"] is True and info["enable_nccl_nvls"] is False
    assert info["speculative_num_steps"] == 2 and info["speculative_num_draft_tokens"] == 3
    assert ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
            "speculative_eagle_topk == 1") in sim.log()


def test_config_yaml_errors(tmp_path: Path) -> None:
    nested = tmp_path / "nested.yaml"
    nested.write_text("model-path: m\nserver: {port: 1}\n")
    out = run_sim("--config", str(nested))
    assert out.returncode == 2 and "nested maps are not supported" in out.stderr
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("model-path: m\nnot-a-flag: 3\n")
    out = run_sim("--config", str(unknown))
    assert out.returncode == 2 and "unrecognized arguments: --not-a-flag 3" in out.stderr


def test_unknown_profile_is_a_clear_error() -> None:
    out = run_sim("--model-path", "m", "--sim-profile", "nope")
    assert out.returncode == 2 and "unknown sim profile 'nope'" in out.stderr
