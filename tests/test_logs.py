"""SGLang log parsing: decode lines (both spellings) and failure classes.

Decode cases run on real excerpts in tests/fixtures/sglang_logs/ (sources in SOURCES.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.logs import DecodeStat, classify_failure, parse_decode_lines, summarize_decode

FIXTURES = Path(__file__).parent / "fixtures" / "sglang_logs"


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.log").read_text(encoding="utf-8")

OLD = (
    "[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 186, token usage: 0.00, "
    "accept len: 1.95, accept rate: 0.49, cuda graph: True, gen throughput (token/s): 178.86, "
    "#queue-req: 0,"
)
NEW = (
    "[2026-01-05 08:00:01 DP0 TP3] Decode batch, #running-req: 4, #token: 9000, token usage: 0.12, "
    "cuda graph: False, gen throughput (token/s): 361.20, #queue-req: 2"
)


def test_parses_both_spellings_ignoring_prefix() -> None:
    text = "\n".join(["[x TP0] Prefill batch. #new-seq: 1", OLD, "noise", NEW])
    old, new = parse_decode_lines(text)
    assert (old.running_req, old.accept_len, old.accept_rate) == (1, 1.95, 0.49)
    assert (old.gen_throughput, old.cuda_graph, old.token, old.queue_req) == (178.86, True, 186, 0)
    assert (new.running_req, new.accept_len, new.accept_rate) == (4, None, None)
    assert (new.gen_throughput, new.cuda_graph, new.queue_req) == (361.2, False, 2)


def test_no_decode_lines() -> None:
    assert parse_decode_lines("The server is fired up and ready to roll!\n") == []


@pytest.mark.parametrize(
    ("log", "kind"),
    [
        ("Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory.", "oom"),
        ("Capture cuda graph failed: ...\nTraceback", "oom"),
        ("Not enough memory. Please try to increase --mem-fraction-static.", "oom"),
        ("launch_server.py: error: unrecognized arguments: --foo", "invalid_args"),
        ("error: ambiguous option: --speculative-num could match", "invalid_args"),
        ("Traceback (most recent call last):\nAssertionError: topk requires steps", "invalid_args"),
        ("error: argument --tp-size: invalid int value: 'x'", "invalid_args"),
        ("Scheduler hit an exception: ...\nNCCL error in: ... unhandled system error", "nccl"),
        ("node:1:1 [0] NCCL WARN Call to connect returned Connection refused", "nccl"),
        ("Initialization failed. warmup error: ...", "crash"),
        ("Scheduler hit an exception: Traceback ...", "crash"),
        ("The server is fired up and ready to roll!", None),
        ("", None),
    ],
)
def test_classify_failure(log: str, kind: str | None) -> None:
    assert classify_failure(log) == kind


def test_summarize_decode() -> None:
    s = summarize_decode(parse_decode_lines("\n".join([OLD, OLD.replace("1.95", "2.05"), NEW])))
    assert s.n_lines == 3 and s.eager_lines == 1
    assert s.accept_len == pytest.approx(2.0) and s.accept_rate == pytest.approx(0.49)
    assert s.gen_throughput == pytest.approx((178.86 * 2 + 361.2) / 3)
    empty = summarize_decode([])
    assert (empty.n_lines, empty.accept_len, empty.gen_throughput) == (0, None, None)


# --- decode lines of real SGLang versions ----------------------------------------------------


def stat(running: int, accept_len: float | None, accept_rate: float | None, thr: float,
         graph: bool | None, token: int | None, queue: int | None) -> DecodeStat:
    return DecodeStat(running, accept_len, accept_rate, thr, graph, token, queue)


# fixture -> (number of decode lines, first line, last line), read off the fixture by hand
DECODES: dict[str, tuple[int, DecodeStat, DecodeStat]] = {
    "decode_2024_08_no_prefix": (
        1, stat(1010, None, None, 1397.13, None, 55006, 12279),
        stat(1010, None, None, 1397.13, None, 55006, 12279)),
    "decode_2024_08_time_only_prefix": (
        10, stat(2, None, None, 447.31, None, 4078, 0), stat(1, None, None, 239.0, None, 4142, 0)),
    "decode_2025_02_no_graph_field": (
        9, stat(8, None, None, 183.54, None, 67724, 0),
        stat(8, None, None, 182.11, None, 70284, 0)),
    "decode_2025_03_largest_len": (
        7, stat(509, None, None, 7897.87, None, 180776, 0),
        stat(182, None, None, 5287.55, None, 113993, 0)),
    "decode_2025_05_dp_attention_accept_len_only": (
        5, stat(8, 2.90, None, 171.01, True, 37217, 0),
        stat(8, 2.58, None, 152.08, True, 37787, 0)),
    "decode_2025_10_eagle3_accept_len_rate": (
        5, stat(1, 2.17, 0.54, 0.39, True, 108, 0), stat(1, 1.80, 0.45, 165.59, True, 412, 0)),
    "decode_2025_11_comma_graph_mix": (
        8, stat(46, None, None, 1447.08, False, 34901, 0),
        stat(11, None, None, 475.19, True, 13642, 0)),
    "decode_2026_04_prefill_has_graph_too": (
        1, stat(32, None, None, 1635.11, True, 11179, 0),
        stat(32, None, None, 1635.11, True, 11179, 0)),
    "decode_2026_05_pd_disagg_dp_tp_ep": (
        3, stat(8, None, None, 1082.11, True, 7198, 0),
        stat(11, None, None, 1111.11, True, 10385, 0)),
    "decode_2026_08_hybrid_swa_cap_len": (  # "#full token" stands in for "#token"
        4, stat(1, 4.22, 0.65, 3.08, True, 512, 0), stat(1, 3.70, 0.54, 392.30, True, 1024, 0)),
    "decode_2026_07_npu_graph_tp_ep": (  # "npu graph" is the graph flag on Ascend
        3, stat(24, 3.05, 0.68, 239.06, True, 233600, 2),
        stat(22, 2.83, 0.61, 648.87, True, 222720, 4)),
    "decode_2026_04_hisparse_gpu_cpu_tokens": (
        6, stat(5, None, None, 153.75, True, 20800, 0),
        stat(5, None, None, 151.58, True, 20800, 0)),
    "decode_2026_05_garbled_terminal_copy": (  # "token usaccept rate" is not "accept rate"
        1, stat(45, None, None, 863.65, False, 44672, None),
        stat(45, None, None, 863.65, False, 44672, None)),
    "decode_2026_06_python_logging_format": (
        3, stat(1, None, None, 126.29, True, 227, 0), stat(1, None, None, 82.34, True, 26, 0)),
    "decode_2025_12_fork_logging_eager_spec": (
        2, stat(48, 1.00, 0.11, 5452.63, False, 3894, 0),
        stat(48, 1.00, 0.11, 5399.46, False, 5814, 0)),
    "decode_2025_12_jax_cache_miss": (
        3, stat(1, None, None, 84.39, None, 64, 0), stat(1, None, None, 84.41, None, 64, 0)),
}


@pytest.mark.parametrize("name", sorted(DECODES))
def test_real_decode_lines(name: str) -> None:
    n, first, last = DECODES[name]
    got = parse_decode_lines(fixture(name))
    assert (len(got), got[0], got[-1]) == (n, first, last)


def test_synthetic_spellings_from_sglang_source() -> None:
    # Synthetic: the "[N]" iteration counter (SGLANG_LOG_FORWARD_ITERS) and a non-finite
    # accept length are in scheduler_metrics_mixin.py's format, not in any log we found.
    (s,) = parse_decode_lines(
        "[2026-01-05 08:00:01 TP0] Decode batch [4096], #running-req: 2, #token: 10, "
        "accept len: nan, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 7.5, "
        "#queue-req: 0, est. decode TFLOPS/s (per GPU): 1.23"
    )
    assert (s.running_req, s.accept_len, s.accept_rate, s.gen_throughput) == (2, None, 0.5, 7.5)
    # a window whose throughput is not a number is no sample at all
    assert parse_decode_lines("Decode batch, #running-req: 2, gen throughput (token/s): nan") == []


def test_summary_over_a_real_window() -> None:
    s = summarize_decode(parse_decode_lines(fixture("decode_2025_11_comma_graph_mix")))
    assert (s.n_lines, s.eager_lines, s.accept_len) == (8, 2, None)
    assert s.gen_throughput == pytest.approx(
        (1447.08 + 1262.64 + 1086.59 + 895.36 + 768.87 + 681.65 + 532.14 + 475.19) / 8)
    spec = summarize_decode(parse_decode_lines(fixture("decode_2025_10_eagle3_accept_len_rate")))
    assert spec.accept_len == pytest.approx((2.17 + 1.95 + 1.80 + 2.05 + 1.80) / 5)
    assert spec.accept_rate == pytest.approx((0.54 + 0.49 + 0.45 + 0.51 + 0.45) / 5)
