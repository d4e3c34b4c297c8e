"""SGLang's fatal messages, as the sweeper's log classifier will meet them on real servers.

Texts follow SGLang 0.5.x / PyTorch / NCCL output: the markers the sweeper matches
(docs/SGLANG.md, "Log lines") appear verbatim.
"""

from __future__ import annotations

import os
import socket

from sweeper.sim.hardware import Failure, MemoryPlan
from sweeper.sim.log import SimLog
from sweeper.sim.rules import InvalidArgs, SimConfig

_SGL = "/sgl-workspace/sglang/python/sglang/srt"


def invalid_args(log: SimLog, exc: InvalidArgs) -> None:
    frames = (
        f'  File "{_SGL}/server_args.py", line 611, in __post_init__\n'
        "    self._handle_speculative_decoding()\n"
    )
    if exc.where == "adaptive":
        # the adaptive hook reads the config file while the server args are resolved
        frames += (
            f'  File "{_SGL}/arg_groups/speculative_hook.py", line 131, in '
            "_init_adaptive_speculative_params\n"
            "    candidate_steps = resolve_candidate_steps_from_config(\n"
            f'  File "{_SGL}/speculative/adaptive_spec_params.py", line 141, in '
            "_load_adaptive_config\n"
        )
    last = f"{exc.kind}: {exc}" if str(exc) else exc.kind  # a bare assert has no message
    log.raw(f"Traceback (most recent call last):\n{frames}{last}\n")


def scheduler_crash(log: SimLog) -> None:
    """A scheduler that dies while serving (crash_serving), as SGLang 0.5.x logs it."""
    log.info(
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        f'  File "{_SGL}/managers/scheduler.py", line 2870, in run_scheduler_process\n'
        "    scheduler.event_loop_overlap()\n"
        f'  File "{_SGL}/managers/scheduler_output_processor_mixin.py", line 371, in '
        "process_batch_result_decode\n"
        "    next_token_ids = next_token_ids.tolist()\n"
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered "
        "(simulated fault: crash_serving)\n"
    )


def sigquit(log: SimLog) -> None:
    log.info("Received sigquit from a child process. It usually means the child failed.")


def nccl_error(log: SimLog, failure: Failure) -> None:
    host, pid = socket.gethostname(), os.getpid()
    log.raw(
        f"{host}:{pid}:{pid} [0] NCCL WARN {failure.reason}\n"
        f"{host}:{pid}:{pid} [0] NCCL WARN Error : no algorithm/protocol available for "
        "function AllReduce with datatype ncclBfloat16\n"
    )
    log.info("Scheduler init failed while creating the draft worker's communicator.")
    log.raw(
        "Traceback (most recent call last):\n"
        f'  File "{_SGL}/speculative/eagle_worker.py", line 113, in __init__\n'
        "    super().__init__(\n"
        f'  File "{_SGL}/distributed/parallel_state.py", line 1296, in '
        "initialize_model_parallel\n"
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:3356, invalid usage (run with NCCL_DEBUG=WARN for details), "
        "NCCL version 2.27.3\n"
        "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
        f"Last error:\n{failure.reason}\n"
    )


def hang_notice(log: SimLog, cfg: SimConfig) -> None:
    # The last line a real deadlocked init prints; then nothing, forever.
    host, pid = socket.gethostname(), os.getpid()
    algo = cfg.env.get("NCCL_ALGO", "")
    log.raw(f"{host}:{pid}:{pid} [0] NCCL INFO Connected NVLS tree for draft ({algo})\n")


def not_enough_memory(log: SimLog) -> None:
    log.raw(
        "Traceback (most recent call last):\n"
        f'  File "{_SGL}/model_executor/model_runner.py", line 1436, in init_memory_pool\n'
        "    raise RuntimeError(\n"
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"
    )


NON_PYTORCH_GB = 0.8  # the CUDA context and NCCL's buffers: in use, not PyTorch's


def capture_oom(log: SimLog, plan: MemoryPlan) -> None:
    # PyTorch's wording, with figures that add up: the capture has used what was free but
    # a remainder when the next graph does not fit; the process's memory in use is the rest
    # of the GPU, of which the CUDA context and NCCL's buffers are not PyTorch's
    need = max(plan.graph_gb - plan.free_gb, 0.25)
    free = min(max(plan.free_gb, 0.0), 0.30)
    in_use = plan.total_gb - free
    reserved = 0.20
    allocated = max(in_use - NON_PYTORCH_GB - reserved, 0.0)
    oom = (
        f"CUDA out of memory. Tried to allocate {need:.2f} GiB. GPU 0 has a total capacity of "
        f"{plan.total_gb:.2f} GiB of which {free:.2f} GiB is free. Including non-PyTorch "
        f"memory, this process has {in_use:.2f} GiB memory in use. Of the allocated memory "
        f"{allocated:.2f} GiB is allocated by PyTorch, and {reserved:.2f} GiB is reserved by "
        "PyTorch but unallocated."
    )
    log.raw(
        "Traceback (most recent call last):\n"
        f'  File "{_SGL}/model_executor/cuda_graph_runner.py", line 389, in __init__\n'
        "    self.capture()\n"
        f"torch.OutOfMemoryError: {oom}\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        f'  File "{_SGL}/managers/scheduler.py", line 2870, in run_scheduler_process\n'
        f"Exception: Capture cuda graph failed: {oom}\n"
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
        "3. disable torch compile by not using --enable-torch-compile\n"
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance "
        "loss)\n"
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose\n"
    )
