"""sweeper.sim: a simulated SGLang server, the embedded default and the test double.

It is a test double, never a measurement of real hardware: its first log line,
/get_model_info and /get_server_info say ``simulated``. ``python -m sweeper.sim`` takes
``python -m sglang.launch_server``'s flags (plus ``--speculative-draft-tp-size``) and the
simulator's own ``--sim-profile demo|kimi-k2.5-8xh200|PATH``, ``--sim-seed N``,
``--sim-noise SCALE`` (0 = ground truth) and ``--sim-startup-seconds S``.

Ground truth for benchmarks and tests::

    >>> from sweeper.sim import expected_throughput, load_profile
    >>> e = expected_throughput(load_profile("kimi-k2.5-8xh200"), {
    ...     "speculative-algorithm": "EAGLE3", "speculative-num-steps": 5,
    ...     "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 6}, {})
    >>> round(e.tok_s), round(e.accept_length, 1)
    (71, 2.1)

Failure modes (both built-in profiles):
- NCCL_ALGO=CollNetDirect or CollNetChain (no CollNet on the hardware), or an unknown
  NCCL_ALGO / NCCL_PROTO value: "NCCL error" after weight loading, exit 1;
- NCCL_ALGO=NVLSTree together with --speculative-draft-tp-size 1: hangs after weight
  loading, never healthy, until killed (the one documented hang);
- CUDA-graph memory (cuda-graph-max-bs x (draft tokens + steps x topk)) beyond what
  --mem-fraction-static leaves free: "Capture cuda graph failed" / torch.OutOfMemoryError,
  exit 1; too little left for the KV cache: "Not enough memory", exit 1;
- SGLang's flag rules: unknown flag -> exit 2; steps/topk/draft tokens not all-or-none ->
  AssertionError, exit 1; topk == 1 sets draft tokens = steps + 1 with SGLang's warning.
"""

from sweeper.sim.model import Expectation, expected_throughput
from sweeper.sim.profiles import Profile, load_profile

__all__ = ["Expectation", "Profile", "expected_throughput", "load_profile"]
