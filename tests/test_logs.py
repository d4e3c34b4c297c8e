"""SGLang log parsing: decode lines (both spellings) and failure classes.

Most cases run on real excerpts in tests/fixtures/sglang_logs/ (sources in SOURCES.md).
Lines written here for a test are labelled synthetic.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from sweeper.errors import CONFIG_FAILURE_KINDS
from sweeper.measure.logs import (
    FAILURE_KINDS,
    INFRASTRUCTURE_KINDS,
    Classified,
    DecodeStat,
    classify_failure,
    classify_failure_line,
    parse_decode_lines,
    strip_prefix,
    summarize_decode,
)
from sweeper.sim.log import SimLog

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


# --- failures of real SGLang servers ----------------------------------------------------------

OOM_DSV4 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a "
    "total capacity of 95.07 GiB of which 298.69 MiB is free. Including non-PyTorch memory, this "
    "process has 94.77 GiB memory in use. Of the allocated memory 79.00 GiB is allocated by "
    "PyTorch, and 206.06 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PY            YTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
    "avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/"
    "docs/stable/notes/cuda.html#optimizing-memory-usage-wit            th-pytorch-cuda-alloc-conf)"
)
NCCL_SYSTEM = (
    "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
)
WARMUP_502 = "AssertionError: res=<Response [502]>, res.text=''"

# fixture -> (kind, the deciding line without its "[time rank] " prefix)
FAILURES: dict[str, tuple[str, str]] = {
    "oom_capture_torch_oom_2026_dsv4": ("oom", OOM_DSV4),
    "oom_runtime_cuda_error_2025_03": ("oom", "RuntimeError: CUDA error: out of memory"),
    "crash_capture_illegal_memory_access_v0_4_4": (
        "crash",
        "Exception: Capture cuda graph failed: RuntimeError: CUDA error: an illegal memory "
        "access was encountered"),
    "crash_warmup_502_2026_01": ("crash", WARMUP_502),
    "crash_warmup_502_2024_12": ("crash", WARMUP_502),
    "crash_other_ranks_mention_oom_2025_12": (
        "crash",
        "ValueError: TP rank 1 could finish the model loading, but there are other ranks that "
        "didn't finish loading. It is likely due to unexpected failures (e.g., OOM) or a slow "
        "node."),
    "crash_nccl_info_then_value_error_v0_4_4": (
        "crash", "Scheduler hit an exception: Traceback (most recent call last):"),
    "nccl_pynccl_system_error_2025_03": ("nccl", NCCL_SYSTEM),
    "nccl_after_nccl_info_unindented_2025_08": ("nccl", NCCL_SYSTEM),
    "nccl_warn_socket_then_scheduler_exception_2025_04": (
        "nccl",
        "h100-15:139:1092 [7] socket.c:485 NCCL WARN socketStartConnect: Connect to "
        "10.0.0.82<38455> failed : Software caused connection abort"),
    "nccl_distbackend_internal_error_torch": (
        "nccl",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "NCCLUtils.hpp:317, internal error - please report this issue to the NCCL developers, "
        "NCCL version 2.21.5"),
    "port_in_use_uvicorn": (
        "port_in_use",
        "ERROR (uvicorn.error):  [Errno 98] error while attempting to bind on address "
        "('0.0.0.0', 7878): address already in use"),
    "port_in_use_c10d_tcpstore": (
        "port_in_use",
        "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 "
        "(errno: 98 - Address already in use)."),
    "invalid_args_unrecognized_v0_5_5": (
        "invalid_args",
        "launch_server.py: error: unrecognized arguments: --reasoning_parser kimi_k2"),
    "invalid_args_unrecognized_speculative_2024_06": (
        "invalid_args",
        "launch_server.py: error: unrecognized arguments: --speculative-model [ngram] "
        "--tensor-parallel-size 1 --num-speculative-tokens 3 --ngram-prompt-lookup-max 4 "
        "--use-v2-block-manager"),
    "invalid_args_invalid_choice_2025_09": (
        "invalid_args",
        "launch_server.py: error: argument --mm-attention-backend: invalid choice: 'triton' "
        "(choose from 'sdpa', 'fa3', 'triton_attn', 'ascend_attn')"),
    "invalid_args_invalid_choice_sglang_cli": (
        "invalid_args",
        "sglang: error: argument --attention-backend: invalid choice: 'torch_sdpa' (choose from "
        "'triton', 'torch_native', 'flex_attention', 'nsa', 'cutlass_mla', 'fa3', 'fa4', "
        "'flashinfer', 'flashmla', 'trtllm_mla', 'trtllm_mha', 'dual_chunk_flash_attn', 'aiter', "
        "'wave', 'intel_amx', 'ascend', 'intel_xpu')"),
    "invalid_args_ambiguous_option": (
        "invalid_args",
        "launch_server.py: error: ambiguous option: --disable-flashinfer could match "
        "--disable-flashinfer-autotune, --disable-flashinfer-cutlass-moe-fp4-allgather"),
}


@pytest.mark.parametrize("name", sorted(FAILURES))
def test_real_failure_logs(name: str) -> None:
    kind, line = FAILURES[name]
    text = fixture(name)
    assert classify_failure_line(text) == Classified(kind, line)
    assert classify_failure(text) == kind


def test_every_fixture_has_expectations_and_a_source() -> None:
    on_disk = {p.stem for p in FIXTURES.glob("*.log")}
    assert on_disk == set(FAILURES) | set(DECODES)
    sources = (FIXTURES / "SOURCES.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in sources for name in on_disk)


# Precedence on real lines: two fixtures joined (the composition is ours, the lines are not).
@pytest.mark.parametrize(
    ("first", "second", "kind", "line"),
    [
        # an OOM beats NCCL lines whichever comes first: peers die of the OOM's consequences
        ("nccl_warn_socket_then_scheduler_exception_2025_04", "oom_capture_torch_oom_2026_dsv4",
         "oom", OOM_DSV4),
        ("oom_capture_torch_oom_2026_dsv4", "nccl_pynccl_system_error_2025_03", "oom", OOM_DSV4),
        # an NCCL error beats a later crash traceback: the crash is its consequence
        ("nccl_after_nccl_info_unindented_2025_08", "crash_warmup_502_2026_01", "nccl",
         NCCL_SYSTEM),
        # a bind failure is infrastructure even when a crash traceback follows
        ("port_in_use_c10d_tcpstore", "crash_other_ranks_mention_oom_2025_12", "port_in_use",
         "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 "
         "(errno: 98 - Address already in use)."),
        # an argument error means nothing else ran
        ("invalid_args_unrecognized_v0_5_5", "oom_runtime_cuda_error_2025_03", "invalid_args",
         "launch_server.py: error: unrecognized arguments: --reasoning_parser kimi_k2"),
    ],
)
def test_precedence_on_composed_real_logs(first: str, second: str, kind: str, line: str) -> None:
    assert classify_failure_line(fixture(first) + fixture(second)) == Classified(kind, line)


def test_nccl_info_lines_alone_are_no_failure() -> None:
    head = fixture("nccl_after_nccl_info_unindented_2025_08").split("File ", 1)[0]
    assert "NCCL INFO" in head and classify_failure_line(head) is None


def test_port_in_use_is_the_only_infrastructure_kind() -> None:
    assert {"port_in_use"} == INFRASTRUCTURE_KINDS
    assert set(FAILURE_KINDS) - INFRASTRUCTURE_KINDS <= set(CONFIG_FAILURE_KINDS)


# --- the simulated server's fatal output (sweeper.sim.fatal) ----------------------------------


def sim_log(write: Callable[[SimLog], None]) -> str:
    out = io.StringIO()
    write(SimLog(out))
    return out.getvalue()


def test_simulated_server_failures() -> None:
    from sweeper.sim import fatal
    from sweeper.sim.model import Failure, InvalidArgs, MemoryPlan

    plan = MemoryPlan(total_gb=80, static_gb=70, weights_gb=40, kv_gb=30, free_gb=2, graph_gb=4)
    cases = {
        "oom": sim_log(lambda log: fatal.capture_oom(log, plan)),
        "invalid_args": sim_log(lambda log: fatal.invalid_args(
            log, InvalidArgs("speculative_num_steps, ... must be positive."))),
        "nccl": sim_log(lambda log: fatal.nccl_error(
            log, Failure("nccl", "NCCL_ALGO=CollNetDirect: no CollNet", {}))),
    }
    for kind, text in cases.items():
        assert classify_failure(text) == kind, text
    assert classify_failure_line(cases["oom"]).line.startswith(  # type: ignore[union-attr]
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert classify_failure(sim_log(fatal.not_enough_memory)) == "oom"


def test_strip_prefix() -> None:
    assert strip_prefix("[2026-05-07 13:40:42 DP0 TP0 EP0] Decode batch, x") == "Decode batch, x"
    assert strip_prefix("[04:40:55 TP0] Decode batch. x") == "Decode batch. x"
    assert strip_prefix("[2024-07-10 14:49:44,231] torch.distributed.run: y") == (
        "torch.distributed.run: y")
    assert strip_prefix("[W socket.cpp:464] [c10d] z") == "[W socket.cpp:464] [c10d] z"


# --- the short synthetic cases this module was first written against --------------------------


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


def test_config_merger_and_algorithm_errors_are_the_configurations_fault() -> None:
    merger = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/site-packages/sglang/srt/utils/server_args_config_parser.py",'
        " line 175, in _convert_config_to_args\n"
        "    raise ValueError(msg)\n"
        "ValueError: Unsupported config option 'disable_cuda_graph' with action "
        "'DeprecatedStoreTrueAction'\n"
    )
    got = classify_failure_line(merger)
    assert got is not None and got.kind == "invalid_args"
    assert got.line.startswith("ValueError: Unsupported config option")
    algo = (
        "Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/speculative/spec_info.py", line 65, in from_string\n'
        '    raise ValueError(f"Unknown speculative algorithm name: {name}")\n'
        "ValueError: Unknown speculative algorithm name: DFLASH\n"
    )
    got = classify_failure_line(algo)
    assert got is not None and got.kind == "invalid_args"


def test_parses_the_0_5_23_line() -> None:
    line = ("[2026-12-01 10:00:00 TP0] Decode batch, #running-req: 1, #token: 512, "
            "token usage: 0.01, accept len: 2.71, accept rate: 0.57, cuda graph: True, "
            "gen throughput (token/s): 88.40, #queue-req: 0")
    (stat,) = parse_decode_lines(line)
    assert (stat.accept_len, stat.accept_rate, stat.gen_throughput, stat.queue_req) == (
        2.71, 0.57, 88.40, 0)
