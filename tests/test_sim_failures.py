"""The simulator's failure modes as a sweeper meets them: OOM, NCCL errors, a hang, signals."""

from __future__ import annotations

import re
import time

from sweeper.sim.harness import http_get, stream_chat
from tests.sim_helpers import EAGLE, FAST, spawn, wait_for, wait_http_up

from .timeouts import scaled

__all__ = ["spawn"]

BIG_TREE = [
    "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "6",
    "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16",
]


def test_capture_oom_is_503_first_then_sglang_messages_and_exit(spawn) -> None:
    sim = spawn(["--sim-startup-seconds", "1.5", *BIG_TREE])
    wait_http_up(sim)
    assert http_get(sim.url + "/health")[0] == 503
    assert sim.wait_exit(timeout=10) != 0
    log = sim.log()
    assert "Load weight end" in log
    assert "torch.OutOfMemoryError: CUDA out of memory" in log
    assert "Capture cuda graph failed" in log
    assert "fired up" not in log
    # PyTorch's message, with figures that add up as a real GPU's do
    m = re.search(r"total capacity of ([\d.]+) GiB of which ([\d.]+) GiB is free\. Including "
                  r"non-PyTorch memory, this process has ([\d.]+) GiB memory in use\. Of the "
                  r"allocated memory ([\d.]+) GiB is allocated by PyTorch, and ([\d.]+) GiB",
                  log)
    assert m is not None, log
    total, free, in_use, allocated, reserved = map(float, m.groups())
    assert abs(free + in_use - total) < 0.02 and allocated + reserved < in_use, m.group(0)


def test_mem_fraction_too_low_is_not_enough_memory(spawn) -> None:
    sim = spawn([*FAST, "--mem-fraction-static", "0.3"])
    assert sim.wait_exit(timeout=10) != 0
    assert "Not enough memory. Please try to increase --mem-fraction-static." in sim.log()


def test_collnet_without_collnet_is_an_nccl_error(spawn) -> None:
    sim = spawn([*FAST, *EAGLE], env={"NCCL_ALGO": "CollNetDirect"})
    assert sim.wait_exit(timeout=10) != 0
    log = sim.log()
    assert "NCCL error" in log and "NCCL WARN" in log
    assert log.index("Load weight end") < log.index("NCCL error")


def test_documented_hang_stays_alive_unhealthy_until_killed(spawn) -> None:
    sim = spawn([*FAST, *EAGLE, "--attn-dp-size", "4"],  # the draft on one GPU per group
                env={"NCCL_ALGO": "NVLSTree"})
    wait_for(lambda: "NCCL INFO" in sim.log(), 10, "the last line before the hang")
    size = len(sim.log())
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:  # bounded observation window, not a sync sleep
        assert http_get(sim.url + "/health")[0] == 503
        assert sim.proc is not None and sim.proc.poll() is None
    assert len(sim.log()) == size  # no progress in the log: what a hang watchdog sees
    started = time.monotonic()
    assert sim.terminate(timeout=5) == 0
    assert time.monotonic() - started < scaled(1.0)


def test_sigterm_while_serving_exits_promptly_with_zero(spawn) -> None:
    sim = spawn([*FAST, *EAGLE])
    sim.wait_healthy()
    assert stream_chat(sim.url, "before the end", 5).completion_tokens == 5
    started = time.monotonic()
    assert sim.terminate(timeout=5) == 0
    assert time.monotonic() - started < scaled(1.0)


def test_sigterm_during_weight_loading_exits_promptly(spawn) -> None:
    sim = spawn(["--sim-profile", "kimi-k2.5-8xh200"])  # minutes of start-up at real time
    wait_for(lambda: "Load weight begin" in sim.log(), 10, "weight loading")
    started = time.monotonic()
    assert sim.terminate(timeout=5) == 0
    assert time.monotonic() - started < scaled(1.0)
