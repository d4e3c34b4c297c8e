"""sweeper.sim: a simulated SGLang server, the embedded default and the test double.

It is a test double, never a measurement of real hardware: its first log line,
/get_model_info, /get_server_info and its nvidia-smi stand-in say ``simulated``.

``python -m sweeper.sim`` takes SGLang 0.5.23's launch flags (sweeper.sim.cli; checked
against tests/fixtures/sglang-0.5.23-flags.json), among them ``--speculative-adaptive`` /
``--speculative-adaptive-config PATH`` (SGLang's per-batch-size step switching,
sweeper.sim.adaptive), ``--attn-dp-size N`` (attention DP: the draft runs in each group of
tp/N GPUs) and ``--api-key KEY``; ``--speculative-draft-tp-size`` only when the profile
declares a build that has it (``build: {draft_tp_flag: true}``); and the simulator's own:
``--sim-profile demo|kimi-k2.5-8xh200|PATH`` (bench/landscapes/ has more), ``--sim-seed N``,
``--sim-noise SCALE`` (0 = ground truth), ``--sim-startup-seconds S``,
``--sim-echo-env NAME`` (log NAME=<its value> at start-up, secrets included) and
``--sim-fault KIND[:N]``. ``python -m sweeper.sim.nvidia_smi --sim-profile P -L`` prints the
profile's GPUs like nvidia-smi.

Speed comes from a performance model (sweeper.sim.model): a roofline target forward
(memory-bound small batches, compute-bound large ones), per-depth acceptance, draft and NCCL
costs, all coefficients in the profile YAML. The server paces tokens with the same functions,
so a client measuring it with ``--sim-noise 0`` at concurrency C sees ``expected_throughput``:

    >>> from sweeper.sim import expected_throughput, load_profile
    >>> e = expected_throughput(load_profile("kimi-k2.5-8xh200"), {
    ...     "speculative-algorithm": "EAGLE3", "speculative-num-steps": 5,
    ...     "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 6}, {})
    >>> round(e.tok_s), round(e.accept_length, 1)
    (71, 2.1)

(``tok_s`` per request; ``total_tok_s`` what the server delivers at ``concurrency=C``.)

Failure modes (both built-in profiles):
- NCCL_ALGO=CollNetDirect or CollNetChain (no CollNet on the hardware), or an unknown
  NCCL_ALGO / NCCL_PROTO value: "NCCL error" after weight loading, exit 1;
- NCCL_ALGO=NVLSTree together with a draft on one GPU (--attn-dp-size = --tp-size, or
  --speculative-draft-tp-size 1 on a build that has it): hangs after weight loading, never
  healthy, until killed (the one documented hang);
- CUDA-graph memory (cuda-graph-max-bs x (draft tokens + steps x topk)) beyond what
  --mem-fraction-static leaves free: "Capture cuda graph failed" / torch.OutOfMemoryError,
  exit 1; too little left for the KV cache: "Not enough memory", exit 1;
- SGLang's flag rules: unknown flag -> exit 2 (--cuda-graph-max-bs: "ambiguous option");
  topk or draft tokens without steps -> AssertionError, exit 1; topk == 1 sets draft tokens =
  steps + 1 with SGLang's warning; DFLASH, DSPARK, UNO -> "Unknown speculative algorithm
  name" (not simulated); --config FILE by SGLang's merger rules (sweeper.sim.config);
  a bad --speculative-adaptive-config (not a JSON object, no integer batch-size key, bad
  candidate_steps, launch steps not a candidate) -> SGLang's ValueError, exit 1;
  --speculative-adaptive with topk > 1 or a non-EAGLE algorithm -> SGLang's warning, static
  steps;
- --api-key set: every endpoint but /health* and /metrics answers 401 without
  ``Authorization: Bearer KEY``.

Fault modes, from a profile's ``faults:`` rules (matched on resolved flags / environment;
none in the built-in profiles) or ``--sim-fault`` (sweeper.sim.faults):
- lossy: greedy output differs from the no-speculation output (tokens replaced);
- http_500: healthy, but every generation request answers 500 with SGLang's error body;
- crash_serving: healthy, serves N generation requests (default 2), then "Scheduler hit an
  exception" and exit 1.
"""

from sweeper.sim.profiles import Profile, load_profile
from sweeper.sim.truth import Expectation, expected_throughput

__all__ = ["Expectation", "Profile", "expected_throughput", "load_profile"]
