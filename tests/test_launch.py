"""LaunchConfig: argv, quoting, redaction, SGLang's --config YAML."""

from __future__ import annotations

import shlex

import yaml

from sweeper.launch import LaunchConfig, redact_env


def test_argv_keeps_hostile_values_as_single_tokens() -> None:
    cfg = LaunchConfig(args={"model-path": "/m/a b; touch /tmp/x $(id)", "port": 8000})
    argv = cfg.argv("/opt/my python/bin/python3")
    assert argv[0] == "/opt/my python/bin/python3"
    assert argv[argv.index("--model-path") + 1] == "/m/a b; touch /tmp/x $(id)"
    # the display line parses back to the same argv: quoted once, correctly
    assert shlex.split(cfg.command_line("/opt/my python/bin/python3"))== argv


def test_booleans_follow_sglang_config_rules() -> None:
    cfg = LaunchConfig(args={"trust-remote-code": True, "disable-cuda-graph": False,
                             "tp-size": 8})
    assert "--trust-remote-code" in cfg.argv()
    assert "--disable-cuda-graph" not in cfg.argv()
    data = yaml.safe_load(cfg.sglang_yaml())
    assert data == {"trust-remote-code": True, "tp-size": 8}


def test_baseline_drops_every_speculative_flag() -> None:
    cfg = LaunchConfig(args={"tp-size": 8, "speculative-algorithm": "EAGLE3",
                             "speculative-num-steps": 2})
    assert cfg.speculative
    base = cfg.without_speculation()
    assert not base.speculative and base.args == {"tp-size": 8}


def test_secrets_redacted_in_display_and_env_file() -> None:
    cfg = LaunchConfig(env={"HF_TOKEN": "hf_abc", "NCCL_ALGO": "Ring", "MY_API_KEY": "k"})
    line = cfg.command_line()
    assert "hf_abc" not in line and "NCCL_ALGO=Ring" in line
    assert "hf_abc" not in cfg.env_file() and "k\n" not in cfg.env_file()
    assert redact_env(cfg.env)["NCCL_ALGO"] == "Ring"


def test_identity_ignores_where_it_runs() -> None:
    a = LaunchConfig(args={"tp-size": 8, "port": 1})
    b = LaunchConfig(args={"tp-size": 8, "port": 2})
    c = LaunchConfig(args={"tp-size": 4, "port": 1})
    assert a.identity() == b.identity() != c.identity()


def test_yaml_round_trip() -> None:
    cfg = LaunchConfig(args={"model-path": "m", "mem-fraction-static": 0.85,
                             "trust-remote-code": True, "cuda-graph-bs": [1, 2, 4]})
    back = LaunchConfig.from_sglang_yaml(cfg.sglang_yaml())
    assert back.argv() == cfg.argv()


def test_secret_flags_redacted_everywhere_but_argv() -> None:
    cfg = LaunchConfig(args={"api-key": "sk-123", "model-path": "m", "tp-size": 8,
                             "speculative-num-draft-tokens": 6, "max-total-tokens": 4096})
    assert cfg.argv()[cfg.argv().index("--api-key") + 1] == "sk-123"  # the server gets it
    assert "sk-123" not in cfg.command_line()
    assert "sk-123" not in cfg.sglang_yaml()
    assert "sk-123" not in str(cfg.to_dict())
    # "tokens" in a flag name is a count, not a secret
    assert cfg.redacted().args == {"api-key": "***", "model-path": "m", "tp-size": 8,
                                   "speculative-num-draft-tokens": 6, "max-total-tokens": 4096}
    assert "--speculative-num-draft-tokens 6" in cfg.command_line()
