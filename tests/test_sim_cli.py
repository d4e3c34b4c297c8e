"""The simulator's command line: SGLang 0.5.23's flags, argparse errors, rules and --config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from sweeper.sim.harness import http_get
from sweeper.sim.profiles import PROFILE_DIR
from tests.sim_helpers import FAST, spawn

__all__ = ["spawn"]


def run_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sweeper.sim", *args], capture_output=True,
                          text=True, timeout=30)


def draft_tp_profile(tmp_path: Path) -> Path:
    """The demo profile on a build that has --speculative-draft-tp-size."""
    data = yaml.safe_load((PROFILE_DIR / "demo.yaml").read_text())
    data["build"] = {"version": "0.5.23+drafttp", "draft_tp_flag": True}
    path = tmp_path / "drafttp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def server_info(sim) -> dict:
    status, body = http_get(sim.url + "/server_info")
    assert status == 200
    return json.loads(body)


def test_help_lists_every_flag() -> None:
    out = run_sim("--help")
    assert out.returncode == 0
    for flag in ("--model-path", "--tp-size", "--attn-dp-size", "--speculative-algorithm",
                 "--speculative-draft-model-path", "--speculative-num-steps",
                 "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                 "--speculative-attention-mode", "--speculative-draft-attention-backend",
                 "--speculative-draft-model-quantization", "--speculative-ngram-max-bfs-breadth",
                 "--mem-fraction-static", "--cuda-graph-max-bs-decode",
                 "--max-running-requests", "--disable-cuda-graph", "--disable-custom-all-reduce",
                 "--enable-nccl-nvls", "--disable-overlap-schedule", "--attention-backend",
                 "--decode-log-interval", "--trust-remote-code", "--config", "--sim-profile",
                 "--sim-seed", "--sim-noise", "--sim-startup-seconds"):
        assert flag in out.stdout, flag
    assert "--speculative-draft-tp-size" not in out.stdout  # not in upstream 0.5.23
    assert "SIMULATED" in out.stdout


def test_unknown_flag_is_an_argparse_error() -> None:
    out = run_sim("--model-path", "m", "--speculative-bogus", "3")
    assert out.returncode == 2
    assert "unrecognized arguments: --speculative-bogus 3" in out.stderr


def test_draft_tp_flag_exists_only_on_a_build_that_has_it(tmp_path: Path) -> None:
    out = run_sim("--model-path", "m", "--port", "1", "--speculative-draft-tp-size", "4")
    assert out.returncode == 2
    assert "unrecognized arguments: --speculative-draft-tp-size 4" in out.stderr
    profile = draft_tp_profile(tmp_path)
    out = run_sim("--sim-profile", str(profile), "--help")
    assert out.returncode == 0 and "--speculative-draft-tp-size" in out.stdout


def test_old_cuda_graph_name_is_ambiguous() -> None:
    out = run_sim("--model-path", "m", "--cuda-graph-max-bs", "16")
    assert out.returncode == 2
    assert ("ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
            "--cuda-graph-max-bs-prefill") in out.stderr


def test_deprecated_disable_cuda_graph_warns_and_works(spawn) -> None:
    sim = spawn([*FAST, "--disable-cuda-graph", "--cuda-graph-max-bs-decode", "8"])
    sim.wait_healthy()
    info = server_info(sim)
    assert info["disable_cuda_graph"] is True and info["cuda_graph_max_bs_decode"] == 8
    assert ("'--disable-cuda-graph' is deprecated and will be removed in a future release. "
            "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.") in sim.log()
    assert "Capture cuda graph" not in sim.log()


def test_topk_without_steps_is_sglangs_bare_assertion() -> None:
    out = run_sim("--model-path", "m", "--port", "1", "--speculative-algorithm", "EAGLE3",
                  "--speculative-eagle-topk", "2")
    assert out.returncode == 1
    assert out.stderr.rstrip().endswith("AssertionError")


def test_steps_and_topk_without_draft_tokens_are_accepted(spawn) -> None:
    sim = spawn([*FAST, "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
                 "--speculative-eagle-topk", "1"])
    sim.wait_healthy()
    info = server_info(sim)
    assert info["speculative_num_steps"] == 2 and info["speculative_num_draft_tokens"] == 3
    assert ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
            "speculative_eagle_topk == 1") in sim.log()


def test_unsimulated_algorithms_are_refused_as_a_build_without_them() -> None:
    for name in ("DFLASH", "DSPARK", "UNO", "MEDUSA"):
        out = run_sim("--model-path", "m", "--port", "1", "--speculative-algorithm", name)
        assert out.returncode == 1, name
        assert f"ValueError: Unknown speculative algorithm name: {name}" in out.stderr


def test_nextn_and_ngram_with_their_own_defaults(spawn) -> None:
    nextn = spawn([*FAST, "--speculative-algorithm", "nextn"])
    ngram = spawn([*FAST, "--speculative-algorithm", "NGRAM",
                   "--speculative-ngram-max-bfs-breadth", "2"])
    nextn.wait_healthy()
    ngram.wait_healthy()
    info = server_info(nextn)
    assert info["speculative_algorithm"] == "EAGLE"  # NEXTN is an alias
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == (3, 1, 4)  # non-Llama default
    info = server_info(ngram)
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == (6, 2, 12)
    assert "speculative_num_draft_tokens is set to 12 by default for ngram" in ngram.log()


def test_dp_attention_rules(spawn) -> None:
    out = run_sim("--model-path", "m", "--port", "1", "--tp-size", "4", "--attn-dp-size", "3")
    assert out.returncode == 1
    assert "AssertionError: tp_size must be divisible by attn_dp_size" in out.stderr
    out = run_sim("--model-path", "m", "--port", "1", "--attn-dp-size", "2",
                  "--speculative-algorithm", "NGRAM")
    assert out.returncode == 1
    assert "ngram speculative decoding does not support dp attention" in out.stderr
    sim = spawn([*FAST, "--tp-size", "4", "--enable-dp-attention", "--dp-size", "2"])
    sim.wait_healthy()
    info = server_info(sim)
    assert info["attn_dp_size"] == 2 and info["dp_size"] == 1
    assert "'--enable-dp-attention' is deprecated" in sim.log()


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
        "cuda-graph-max-bs-decode": 16,
        "cuda-graph-config": {"max_bs": 16},  # a nested map: passed on as JSON
        "cuda-graph-bs-decode": [1, 2, 4, 8, 16],
    }))
    sim = spawn([*FAST, "--config", str(config), "--speculative-num-steps", "2"])
    sim.wait_healthy()
    info = server_info(sim)
    assert info["tp_size"] == 2 and info["cuda_graph_max_bs_decode"] == 16
    assert json.loads(info["cuda_graph_config"]) == {"max_bs": 16}
    assert info["cuda_graph_bs_decode"] == [1, 2, 4, 8, 16]
    assert info["disable_custom_all_reduce"] is True and info["enable_nccl_nvls"] is False
    assert info["speculative_num_steps"] == 2 and info["speculative_num_draft_tokens"] == 3
    assert ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
            "speculative_eagle_topk == 1") in sim.log()


def test_config_yaml_errors(tmp_path: Path) -> None:
    def run_config(name: str, text: str, *extra: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / name
        path.write_text(text)
        return run_sim("--port", "1", "--config", str(path), *extra)

    out = run_config("launch.json", "model-path: m\n")
    assert out.returncode == 1
    assert "ValueError: Config file must be YAML format, got: .json" in out.stderr
    out = run_config("dep.yaml", "model-path: m\ndisable-cuda-graph: true\n")
    assert out.returncode == 1
    assert ("ValueError: Unsupported config option 'disable_cuda_graph' with action "
            "'DeprecatedStoreTrueAction'") in out.stderr
    out = run_config("dp.yml", "model-path: m\nenable_dp_attention: false\n")
    assert out.returncode == 1 and "'enable_dp_attention'" in out.stderr
    # a boolean for a valued flag is "--key true", which that flag then refuses
    out = run_config("bool.yaml", "model-path: m\nspeculative-attention-mode: true\n")
    assert out.returncode == 2
    assert "argument --speculative-attention-mode: invalid choice: 'true'" in out.stderr
    out = run_config("unknown.yaml", "model-path: m\nnot-a-flag: 3\n")
    assert out.returncode == 2 and "unrecognized arguments: --not-a-flag 3" in out.stderr
    out = run_config("root.yaml", "- model-path\n")
    assert out.returncode == 1
    assert "Config file must contain a dictionary at root level" in out.stderr
    out = run_config("twice.yaml", "model-path: m\n", "--config", str(tmp_path / "x.yaml"))
    assert out.returncode == 1 and "Multiple config files specified" in out.stderr


def test_config_equals_form_is_not_merged(tmp_path: Path) -> None:
    path = tmp_path / "launch.yaml"
    path.write_text("model-path: m\n")
    out = run_sim("--port", "1", f"--config={path}")
    assert out.returncode == 2  # the file was not read: no --model-path
    assert "the following arguments are required: --model-path" in out.stderr


def test_unknown_profile_is_a_clear_error() -> None:
    out = run_sim("--model-path", "m", "--sim-profile", "nope")
    assert out.returncode == 2 and "unknown sim profile 'nope'" in out.stderr
