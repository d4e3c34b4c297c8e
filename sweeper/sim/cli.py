"""Command line of ``python -m sweeper.sim``: SGLang's launch flags, plus --sim-* knobs.

Flag names, types and argparse behaviour follow ``python -m sglang.launch_server`` (unknown
flag -> "unrecognized arguments", exit 2), including ``--config FILE.yaml``: dashed keys,
scalars -> ``--key value``, lists -> ``--key v1 v2``, ``flag: true`` for presence flags,
nested maps refused; the command line overrides the file.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

ATTENTION_BACKENDS = (
    "triton", "torch_native", "flex_attention", "cutlass_mla", "fa3", "fa4", "flashinfer",
    "flashmla", "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave",
)
SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
# flags that are the simulator's own, not SGLang's: kept out of /get_server_info's args
SIM_FLAGS = ("sim_profile", "sim_seed", "sim_noise", "sim_startup_seconds", "sim_echo_env",
             "sim_fault", "config")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sweeper.sim",
        description=(
            "SIMULATED SGLang server (a test double for sweeper): SGLang's flags, HTTP API and "
            "log lines with a modelled speed. Not a real inference server."
        ),
    )
    add = p.add_argument
    add("--model-path", type=str, required=True, help="Model weights path (only echoed).")
    add("--tokenizer-path", type=str, default=None)
    add("--served-model-name", type=str, default=None)
    add("--host", type=str, default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--tp-size", "--tensor-parallel-size", type=int, default=None, dest="tp_size",
        help="Tensor parallel degree (default: the sim profile's).")
    add("--trust-remote-code", action="store_true")
    add("--dtype", type=str, default="auto")
    add("--kv-cache-dtype", type=str, default="auto")
    add("--context-length", type=int, default=None)
    add("--random-seed", type=int, default=None)
    add("--log-level", type=str, default="info")
    add("--api-key", type=str, default=None,
        help="Require 'Authorization: Bearer KEY' on every endpoint but /health*, /metrics.")
    add("--speculative-algorithm", type=str.upper, choices=SPECULATIVE_ALGORITHMS, default=None)
    add("--speculative-draft-model-path", type=str, default=None)
    add("--speculative-draft-model-revision", type=str, default=None)
    add("--speculative-num-steps", type=int, default=None)
    add("--speculative-eagle-topk", type=int, default=None)
    add("--speculative-num-draft-tokens", type=int, default=None)
    add("--speculative-accept-threshold-single", type=float, default=1.0)
    add("--speculative-accept-threshold-acc", type=float, default=1.0)
    add("--speculative-draft-tp-size", type=int, default=None,
        help="Draft model TP degree (some SGLang builds); default: --tp-size.")
    add("--speculative-adaptive", action="store_true",
        help="Adjust speculative steps at runtime by running batch size (EAGLE/EAGLE3, topk 1).")
    add("--speculative-adaptive-config", type=str, default=None,
        help='JSON keyed by batch size, e.g. {"1": {"candidate_steps": [1, 3, 7]}}.')
    add("--mem-fraction-static", type=float, default=None)
    add("--cuda-graph-max-bs", type=int, default=None)
    add("--max-running-requests", type=int, default=None)
    add("--chunked-prefill-size", type=int, default=None)
    add("--disable-cuda-graph", action="store_true")
    add("--disable-custom-all-reduce", action="store_true")
    add("--enable-nccl-nvls", action="store_true")
    add("--enable-symm-mem", action="store_true")
    add("--enable-torch-symm-mem", action="store_true")
    add("--disable-overlap-schedule", action="store_true")
    add("--attention-backend", type=str, choices=ATTENTION_BACKENDS, default=None)
    add("--decode-log-interval", type=int, default=40)
    add("--config", type=str, default=None, help="Read CLI options from a YAML file.")
    sim = p.add_argument_group("simulator (not SGLang flags)")
    sim.add_argument("--sim-profile", type=str, default="demo",
                     help="Built-in profile (demo, kimi-k2.5-8xh200) or a profile YAML path.")
    sim.add_argument("--sim-seed", type=int, default=None,
                     help="Seed of the run-to-run noise (default: random).")
    sim.add_argument("--sim-noise", type=float, default=1.0,
                     help="Noise scale: 1 = the profile's spread, 0 = off (ground truth).")
    sim.add_argument("--sim-startup-seconds", type=float, default=None,
                     help="Total weight-load + graph-capture time (not token speed).")
    sim.add_argument("--sim-echo-env", action="append", default=[], metavar="NAME",
                     help="Log NAME=<value of that environment variable> at start-up "
                          "(repeatable): a secret for log-scrubbing tests.")
    sim.add_argument("--sim-fault", action="append", default=[], metavar="KIND[:N]",
                     help="Add a fault to this launch (repeatable): lossy[:EVERY] when "
                          "speculative; http_500, crash_serving[:REQUESTS] always.")
    return p


def config_tokens(path: str, parser: argparse.ArgumentParser) -> list[str]:
    """A --config YAML file as argv tokens, by SGLang's rules."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        parser.error(f"argument --config: cannot read {path}: {exc}")
    if data is None:
        return []
    if not isinstance(data, dict):
        parser.error(f"argument --config: {path} must be a mapping of flag names to values")
    tokens: list[str] = []
    for key, value in data.items():
        flag = f"--{key}"
        if isinstance(value, dict):
            parser.error(f"argument --config: {path}: nested maps are not supported ({key})")
        if value is True:
            tokens.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            tokens += [flag, *(str(v) for v in value)]
        else:
            tokens += [flag, str(value)]
    return tokens


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse like SGLang: --config contents first, so the command line overrides them."""
    parser = build_parser()
    argv = list(argv)
    rest: list[str] = []
    path = None
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--config":
            if i + 1 >= len(argv):
                parser.error("argument --config: expected one argument")
            path = argv[i + 1]
            i += 2
            continue
        if token.startswith("--config="):
            path = token.split("=", 1)[1]
        else:
            rest.append(token)
        i += 1
    merged = (config_tokens(path, parser) if path else []) + rest
    ns = parser.parse_args(merged)
    ns.config = path
    return ns


def launch_args(ns: argparse.Namespace) -> dict[str, Any]:
    """SGLang flags as given (dashed names, no --), for the performance model."""
    return {
        key.replace("_", "-"): value
        for key, value in vars(ns).items()
        if key not in SIM_FLAGS and value is not None
    }
