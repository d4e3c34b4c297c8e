"""The numeric launch flags of SGLang 0.5.23, and the check of a study's values for them.

SGLang's argparse reads each of these with ``int()`` or ``float()`` and exits on a value it
cannot read (``argument --tp-size: invalid int value: '4 --trust-remote-code'``). Found by
the server, that is a restart spent on a typo, minutes on a GPU node; found here, it is one
line from ``sweeper validate`` before anything starts. The names are SGLang's own:
tools/sglang_flags.py records every flag's converter from SGLang's argparse
(tests/fixtures/sglang-0.5.23-flags.json) and tests/test_flag_types.py checks these sets
against it. Flags SGLang reads with converters of its own (``human_readable_int``: "4k",
JSON) are left to SGLang.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeper.study.base import fail, render_value, show

INT_FLAGS = frozenset({
    "asr-max-buffer-seconds", "asr-max-concurrent-sessions", "attention-context-parallel-size",
    "attention-data-parallel-size", "attn-cp-size", "attn-dp-size", "base-gpu-id",
    "batch-notify-size", "c128-page-size", "chunked-prefill-size",
    "constrained-json-max-whitespace-cnt", "cpu-offload-gb", "cuda-graph-bs-decode",
    "cuda-graph-bs-prefill", "cuda-graph-max-bs-decode", "cuda-graph-max-bs-prefill",
    "cuda-graph-max-seq-len-prefill", "data-parallel-size", "dcp-size",
    "debug-tensor-dump-layers", "decode-context-parallel-size", "decode-log-interval",
    "decoupled-spec-rank", "default-priority-value", "detokenizer-worker-num",
    "disaggregation-bootstrap-port", "disaggregation-decode-extra-slots",
    "disaggregation-decode-polling-interval", "dist-timeout", "dp-size", "dsa-triton-union",
    "dwdp-size", "dynamic-batch-tokenizer-batch-size", "elastic-ep-initial-size",
    "elastic-ep-join-rank-offset", "encoder-bootstrap-port", "engine-info-bootstrap-port",
    "ep", "ep-num-redundant-experts", "ep-size", "eplb-rebalance-layers-per-chunk",
    "eplb-rebalance-num-iterations", "expert-distribution-recorder-buffer-size",
    "expert-parallel-size", "fuseep-mode", "gated-launch-port", "gc-threshold", "gpu-id-step",
    "grpc-http-sidecar-port", "grpc-port", "grpc-response-timeout-secs", "hicache-size",
    "hicache-storage-prefetch-retry-max-attempts",
    "hicache-storage-prefetch-retry-poll-interval", "http2-initial-connection-window-size",
    "http2-max-concurrent-streams", "int8-mamba-ckpt-size", "kt-cpuinfer",
    "kt-max-deferred-experts-per-token", "kt-num-gpu-experts", "kt-threadpool-count",
    "kv-canary-sweep-interval", "linear-replayssm-cache-len", "load-snapshot-publish-interval",
    "log-requests-level", "mamba-cache-philox-rounds", "mamba-max-states-per-path",
    "mamba-track-interval", "max-ep-size", "max-loaded-loras", "max-lora-chunk-size",
    "max-lora-rank", "max-loras-per-batch", "max-mamba-cache-size", "max-queued-requests",
    "max-running-requests", "media-url-max-file-size-mb", "min-free-slots-delay",
    "mm-io-worker-num", "mm-preprocess-cache-size-mb", "mm-processor-worker-num",
    "moe-data-parallel-size", "moe-dense-tp-size", "moe-dp-size", "nccl-port", "nnodes",
    "node-rank", "num-continuous-decode-steps", "num-reserved-decode-tokens", "numa-node",
    "offload-group-size", "offload-num-in-group", "offload-prefetch-step",
    "optimistic-prefill-attempts", "page-size", "paged-experts-num-resident",
    "pipeline-parallel-size", "port", "pp-async-batch-depth", "pp-max-micro-batch-size",
    "pp-size", "prefill-decode-interval", "prefill-decode-interval-min-bs",
    "prefill-delayer-max-delay-passes", "prefill-max-requests",
    "priority-scheduling-preemption-threshold", "random-seed",
    "remote-instance-weight-loader-seed-instance-service-port",
    "return-aux-hidden-state-layer-ids", "sampling-mask-max-tokens", "scheduler-recv-interval",
    "shared-experts-tp-size", "sm-group-num", "smg-http-sidecar-port",
    "speculative-dflash-block-size", "speculative-domino-candidate-pool-size",
    "speculative-draft-sink-size", "speculative-draft-window-size",
    "speculative-dspark-block-size", "speculative-eagle-topk", "speculative-ngram-capacity",
    "speculative-ngram-external-corpus-max-tokens", "speculative-ngram-external-sam-budget",
    "speculative-ngram-max-bfs-breadth", "speculative-ngram-max-trie-depth",
    "speculative-ngram-min-bfs-breadth", "speculative-num-draft-tokens",
    "speculative-num-steps", "stream-interval", "swa-prefix-tails", "tensor-parallel-size",
    "tokenizer-worker-num", "torch-compile-max-bs", "tp-size",
    "triton-attention-num-kv-splits", "triton-attention-split-tile-size",
    "weight-cache-timeout", "weight-loader-prefetch-num-threads",
})
FLOAT_FLAGS = frozenset({
    "bucket-e2e-request-latency", "bucket-inter-token-latency", "bucket-time-to-first-token",
    "disaggregation-decode-host-receive-threshold", "dynamic-batch-tokenizer-batch-timeout",
    "elastic-ep-scale-timeout", "eplb-min-rebalancing-utilization-threshold",
    "gc-warning-threshold-secs", "hicache-host-memory-fraction", "hicache-ratio",
    "lora-drain-wait-threshold", "mamba-full-memory-ratio", "mem-fraction-static",
    "prefill-delayer-forward-passes-buckets", "prefill-delayer-max-delay-ms",
    "prefill-delayer-queue-min-ratio", "prefill-delayer-token-usage-low-watermark",
    "prefill-delayer-wait-seconds-buckets", "schedule-conservativeness",
    "soft-watchdog-timeout", "speculative-accept-threshold-acc",
    "speculative-accept-threshold-single", "swa-full-tokens-ratio",
    "tbo-token-distribution-threshold", "watchdog-timeout",
})


def read_as(value: Any, convert: type) -> Any:
    """``value`` (as sweeper renders it) as SGLang's argparse reads it with ``convert``;
    None when it cannot (true renders a bare flag, not a number)."""
    if isinstance(value, bool):
        return None
    try:
        return convert(render_value(value))
    except (TypeError, ValueError, OverflowError):
        return None


def _readable(value: Any, convert: type) -> bool:
    """Whether SGLang's argparse would read ``value`` with ``convert``; a list is several
    values (a flag of nargs '+')."""
    items = value if isinstance(value, list) else [value]
    return all(read_as(item, convert) is not None for item in items)


def check_flag_values(path: Path, space: Mapping[str, Any], args: Mapping[str, Any]) -> None:
    """Every fixed value (server.args) and searched one (space) of a numeric SGLang flag is
    a number SGLang can read; else one error naming the key (exit code 2)."""
    for name, value in args.items():
        _check(path, f"server.args.{name}", name, [value])
    for name, param in space.items():
        if param.kind == "float" and name in INT_FLAGS:
            fail(path, f"space.{name}", f"{name} takes whole numbers (SGLang reads it with "
                 "int()), not a float range", "use {int: [lo, hi]} or integer choices")
        values = list(param.choices) if param.kind == "choices" else [param.low, param.high]
        _check(path, f"space.{name}", name, values)


def _check(path: Path, key: str, name: str, values: list[Any]) -> None:
    convert = int if name in INT_FLAGS else float if name in FLOAT_FLAGS else None
    if convert is None:
        return
    for value in values:
        if value is None:  # absent: SGLang's default
            continue
        if not _readable(value, convert):
            what = "a whole number" if convert is int else "a number"
            fail(path, key, f"{name} takes {what} (SGLang reads it with {convert.__name__}()), "
                 f"got {show(value, key)}", f"write {what}")
