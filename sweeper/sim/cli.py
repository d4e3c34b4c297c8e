"""Command line of ``python -m sweeper.sim``: SGLang 0.5.23's launch flags, plus --sim-* knobs.

Flag names, aliases, actions, choices and deprecations follow ``sglang serve`` 0.5.23
(tests/fixtures/sglang-0.5.23-flags.json, recorded from SGLang's own argparse, is the
reference a test checks this parser against). argparse behaves as SGLang's does: an
unknown flag is "unrecognized arguments" (exit 2), a prefix of two flags is an "ambiguous
option" (``--cuda-graph-max-bs``, renamed ``--cuda-graph-max-bs-decode`` / ``-prefill``),
a deprecated flag warns and still works on the command line. ``--speculative-draft-tp-size``
exists only when the profile declares a build that has it (``build.draft_tp_flag``).
``--config FILE`` follows sweeper.sim.config (SGLang's merger rules).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from sweeper.sim.config import ConfigError, merge_config
from sweeper.sim.profiles import Build, ProfileError, load_profile

ATTENTION_BACKENDS = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed",
    "fa3", "fa4", "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla",
    "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "hpc_ops", "minicpm_flashattn",
    "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
)
QUANTIZATIONS = (
    "awq", "fp8", "mxfp8", "gptq", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf",
    "modelopt", "modelopt_fp8", "modelopt_fp4", "nvfp4_online", "modelopt_mixed",
    "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "w4afp8", "mxfp4", "auto-round",
    "auto-round-int8", "compressed-tensors", "modelslim", "mxfp_w4a8", "quark",
    "quark_int4fp8_moe", "quark_mxfp4", "mlx_q4", "mlx_q8", "unquant", "humming",
)
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4",
                   "fp4_mx_block16")
CUDA_GRAPH_BACKENDS = ("full", "breakable", "disabled")
# flags that are the simulator's own, not SGLang's: kept out of /server_info's args
SIM_FLAGS = ("sim_profile", "sim_seed", "sim_noise", "sim_startup_seconds", "sim_echo_env",
             "sim_fault", "sim_chatty", "config", "deprecations")


class DeprecatedStoreTrueAction(argparse.Action):
    """SGLang's retired boolean: stores True, warns (the warning is logged at start-up)."""

    def __init__(self, option_strings: Sequence[str], dest: str, new_flag: str | None = None,
                 nargs: int = 0, const: Any = True, default: Any = False,
                 **kwargs: Any) -> None:
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default,
                         **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        notes = list(getattr(namespace, "deprecations", None) or [])
        notes.append(f"'{option_string}' is deprecated and will be removed in a future "
                     f"release.{replacement}")
        namespace.deprecations = notes
        setattr(namespace, self.dest, True)


def build_parser(build: Build | None = None) -> argparse.ArgumentParser:
    build = build or Build()
    p = argparse.ArgumentParser(
        prog="python -m sweeper.sim",
        description=(
            f"SIMULATED SGLang {build.version} server (a test double for sweeper): SGLang's "
            "flags, HTTP API and log lines with a modelled speed. Not a real inference server."
        ),
    )
    add = p.add_argument
    add("--model-path", "--model", type=str, help="Model weights path (only echoed).")
    add("--tokenizer-path", type=str, default=None)
    add("--served-model-name", type=str, default=None)
    add("--host", type=str, default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--tp-size", "--tensor-parallel-size", type=int, default=None, dest="tp_size",
        help="Tensor parallel degree (default: the sim profile's).")
    add("--dp-size", "--data-parallel-size", type=int, default=1, dest="dp_size")
    add("--attn-dp-size", "--attention-data-parallel-size", type=int, default=1,
        dest="attn_dp_size",
        help="Attention data parallelism: groups of tp/attn-dp-size GPUs each attend to "
             "their own requests; an EAGLE-3 draft runs inside each group.")
    add("--enable-dp-lm-head", action="store_true")
    add("--trust-remote-code", action="store_true")
    add("--dtype", type=str, choices=DTYPES, default="auto")
    add("--quantization", type=str, choices=QUANTIZATIONS, default=None)
    add("--kv-cache-dtype", type=str, choices=KV_CACHE_DTYPES, default="auto")
    add("--context-length", type=int, default=None)
    add("--page-size", type=int, default=None)
    add("--device", type=str, default=None)
    add("--random-seed", type=int, default=None)
    add("--log-level", type=str, default="info")
    add("--skip-server-warmup", action="store_true")
    add("--enable-metrics", action="store_true")
    add("--api-key", type=str, default=None,
        help="Require 'Authorization: Bearer KEY' on every endpoint but /health*, /metrics.")
    add("--speculative-algorithm", type=str, default=None)
    add("--speculative-draft-model-path", "--speculative-draft-model", type=str, default=None)
    add("--speculative-draft-model-revision", type=str, default=None)
    add("--speculative-num-steps", type=int, default=None)
    add("--speculative-eagle-topk", type=int, default=None)
    add("--speculative-num-draft-tokens", type=int, default=None)
    add("--speculative-accept-threshold-single", type=float, default=1.0)
    add("--speculative-accept-threshold-acc", type=float, default=1.0)
    add("--speculative-attention-mode", type=str, choices=["prefill", "decode"],
        default="prefill", help="Attention kernel mode of the target's verify forward.")
    add("--speculative-draft-attention-backend", type=str, default=None)
    add("--speculative-draft-model-quantization", type=str, choices=QUANTIZATIONS,
        default=None)
    if build.draft_tp_flag:
        add("--speculative-draft-tp-size", type=int, default=None,
            help="Draft model TP degree (this build only; upstream 0.5.23 has none).")
    add("--speculative-adaptive", action="store_true",
        help="Adjust speculative steps at runtime by running batch size (EAGLE/EAGLE3, topk 1).")
    add("--speculative-adaptive-config", type=str, default=None,
        help='JSON keyed by batch size, e.g. {"1": {"candidate_steps": [1, 3, 7]}}.')
    add("--speculative-ngram-min-bfs-breadth", type=int, default=1)
    add("--speculative-ngram-max-bfs-breadth", type=int, default=10)
    add("--speculative-ngram-match-type", type=str, choices=["BFS", "PROB"], default="BFS")
    add("--speculative-ngram-max-trie-depth", type=int, default=18)
    add("--speculative-ngram-capacity", type=int, default=10000000)
    add("--mem-fraction-static", type=float, default=None)
    add("--cuda-graph-config", type=str, default=None)
    add("--cuda-graph-backend-decode", type=str, choices=CUDA_GRAPH_BACKENDS, default=None)
    add("--cuda-graph-backend-prefill", type=str, choices=CUDA_GRAPH_BACKENDS, default=None)
    add("--cuda-graph-max-bs-decode", type=int, default=None,
        help="Largest decode batch run with a CUDA graph (larger batches run eager).")
    add("--cuda-graph-max-bs-prefill", type=int, default=None)
    add("--cuda-graph-bs-decode", type=int, nargs="+", default=None)
    add("--disable-decode-cuda-graph", action="store_true")
    add("--max-running-requests", type=int, default=None)
    add("--chunked-prefill-size", type=int, default=None)
    add("--disable-custom-all-reduce", action="store_true")
    add("--enable-nccl-nvls", action="store_true")
    add("--enable-symm-mem", action="store_true")
    add("--enable-torch-symm-mem", action="store_true")
    add("--disable-overlap-schedule", action="store_true")
    add("--attention-backend", type=str, choices=ATTENTION_BACKENDS, default=None)
    add("--decode-attention-backend", type=str, choices=ATTENTION_BACKENDS, default=None)
    add("--decode-log-interval", type=int, default=40)
    add("--config", type=str, help="Read CLI options from a config file. Must be a YAML file "
                                   "with configuration options.")
    add("--disable-cuda-graph", action=DeprecatedStoreTrueAction,
        new_flag="--cuda-graph-backend-{decode,prefill}=disabled",
        help="Deprecated. Use --cuda-graph-backend-{decode,prefill}=disabled instead.")
    add("--enable-dp-attention", action=DeprecatedStoreTrueAction,
        new_flag="--attn-dp-size <dp-size>",
        help="Deprecated. Use --attn-dp-size <dp-size> instead of "
             "--dp-size <dp-size> --enable-dp-attention.")
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
    sim.add_argument("--sim-chatty", type=float, default=0.0, metavar="MB",
                     help="Print MB megabytes of debug-level filler lines at start-up (a "
                          "log-capping test: far more than a server log should keep).")
    sim.add_argument("--sim-fault", action="append", default=[], metavar="KIND[:N]",
                     help="Add a fault to this launch (repeatable): lossy[:EVERY] when "
                          "speculative; http_500, crash_serving[:REQUESTS] always.")
    return p


def _profile_build(argv: Sequence[str]) -> Build:
    """The build the profile declares (its flag set); a bad profile is reported later."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--sim-profile", default="demo")
    known, _ = pre.parse_known_args(list(argv))
    try:
        return load_profile(known.sim_profile).build
    except ProfileError:
        return Build()


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse like ``sglang serve``: the --config file's flags first, the command line after."""
    argv = list(argv)
    parser = build_parser(_profile_build(argv))
    try:
        merged = merge_config(parser, argv)
    except ConfigError as exc:
        # SGLang raises before logging is set up: a bare traceback, exit 1
        raise SystemExit(exc.report()) from None
    ns = parser.parse_args(merged)
    if ns.model_path is None:
        parser.error("the following arguments are required: --model-path")
    if not hasattr(ns, "deprecations"):
        ns.deprecations = []
    return ns


def launch_args(ns: argparse.Namespace) -> dict[str, Any]:
    """SGLang flags as given (dashed names, no --), for the performance model."""
    return {
        key.replace("_", "-"): value
        for key, value in vars(ns).items()
        if key not in SIM_FLAGS and value is not None
    }
