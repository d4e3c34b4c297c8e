"""SGLang log parsing: decode lines (both spellings) and failure classes."""

from __future__ import annotations

import pytest

from sweeper.measure.logs import classify_failure, parse_decode_lines, summarize_decode

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
