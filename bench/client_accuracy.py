"""How accurate is the benchmark client? Measured tok/s against the simulator's ground truth.

For 20 configurations of the simulated SGLang server with its noise switched off, start the
simulator, benchmark it with ``sweeper.measure.run_benchmark`` exactly as a sweep trial would,
and compare the measured mean tok/s with ``sweeper.sim.expected_throughput`` (the profile's
noise-free value for the same 500-token stream). Prints per configuration and in summary:
the error in percent (worst and median; the target is within 1%), the accept length measured
against the expected one, and the client's own CPU time per request (the client must stay
cheap, or at high concurrency it would measure itself).

The simulator is a test double, never a measurement of real hardware: these figures say how
faithfully the *client* measures a server whose true speed is known.

    .venv/bin/python bench/client_accuracy.py            # demo profile, chat API
    .venv/bin/python bench/client_accuracy.py --api generate --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

from sweeper.launch import LaunchConfig
from sweeper.measure import BenchSpec, run_benchmark
from sweeper.sim import expected_throughput, load_profile
from sweeper.sim.harness import SimProcess

EAGLE = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "sim/draft"}


def _spec(steps: int, topk: int, draft: int, **extra: Any) -> dict[str, Any]:
    return {
        **EAGLE,
        "speculative-num-steps": steps,
        "speculative-eagle-topk": topk,
        "speculative-num-draft-tokens": draft,
        **extra,
    }


# (label, SGLang flags, environment): chains, trees, draft TP, NCCL settings, eager mode.
CANDIDATES: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("baseline", {}, {}),
    *[(f"chain {s}", _spec(s, 1, s + 1), {}) for s in range(1, 7)],
    ("tree 2x2/4", _spec(2, 2, 4), {}),
    ("tree 3x2/6", _spec(3, 2, 6), {}),
    ("tree 4x2/8", _spec(4, 2, 8), {}),
    ("tree 2x4/6", _spec(2, 4, 6), {}),
    ("tree 3x4/8", _spec(3, 4, 8), {}),
    ("chain 3, attention DP 4", _spec(3, 1, 4, **{"attn-dp-size": 4}), {}),
    ("chain 2, attention DP 2", _spec(2, 1, 3, **{"attn-dp-size": 2}), {}),
    ("chain 3, NCCL LL", _spec(3, 1, 4), {"NCCL_PROTO": "LL"}),
    ("chain 3, Ring/Simple", _spec(3, 1, 4), {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}),
    ("chain 3, 8 channels", _spec(3, 1, 4), {"NCCL_MIN_NCHANNELS": "8"}),
    ("chain 4, no custom AR", _spec(4, 1, 5, **{"disable-custom-all-reduce": True}), {}),
    ("chain 2, triton", _spec(2, 1, 3, **{"attention-backend": "triton"}), {}),
    ("chain 3, eager", _spec(3, 1, 4, **{"cuda-graph-backend-decode": "disabled"}), {}),
    ("baseline, eager", {"cuda-graph-backend-decode": "disabled"}, {}),
    ("chain 5, no overlap", _spec(5, 1, 6, **{"disable-overlap-schedule": True}), {}),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="demo")
    ap.add_argument("--api", choices=["chat", "generate"], default="chat")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--configs", type=int, default=20)
    ap.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="streams per run; above 1 the per-request tok/s is compared (the ground truth's unit)",
    )
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=500,
        help="the profile's expected tok/s "
        "is for 500-token streams; other values measure a different quantity",
    )
    opts = ap.parse_args()

    profile = load_profile(opts.profile)
    chosen = []
    for label, args, env in CANDIDATES:
        exp = expected_throughput(profile, args, env, concurrency=opts.concurrency)
        if exp.failure is None and exp.tok_s:
            chosen.append((label, args, env, exp))
    chosen = chosen[: opts.configs]
    spec = BenchSpec(
        api=opts.api,
        max_tokens=opts.max_tokens,
        runs=opts.runs,
        warmup=1,
        concurrency=opts.concurrency,
        model="default",
    )
    print(
        f"profile {opts.profile} (simulated), api {opts.api}, {opts.max_tokens} tokens, "
        f"1 warm-up + {opts.runs} runs, concurrency {opts.concurrency}, "
        f"{len(chosen)} configurations, noise 0"
    )
    head = f"{'configuration':24} {'expected':>9} {'measured':>9} {'error %':>8} "
    print(head + f"{'acc exp':>7} {'acc meas':>8} {'cpu ms/req':>10}")
    errors: list[float] = []
    cpu_ms: list[float] = []
    proc_cpu_ms: list[float] = []
    with tempfile.TemporaryDirectory(prefix="client-accuracy-") as tmp:
        for label, args, env, exp in chosen:
            flags = ["--sim-profile", opts.profile, "--sim-seed", "1", "--sim-noise", "0",
                     "--sim-startup-seconds", "0.5", *LaunchConfig(args=args).flag_argv()]
            with SimProcess(flags, env=env, log_dir=tmp, model_path="sim/model") as server:
                server.wait_healthy(60)

                def check(server: SimProcess = server) -> None:
                    if server.proc is not None and server.proc.poll() is not None:
                        raise RuntimeError(f"simulator died (exit {server.proc.returncode})")

                t_cpu = time.process_time()
                res = run_benchmark(server.url, spec, check_server=check)
                n_req = sum(len(r.requests) for r in res.runs + res.warmup_runs)
                proc_cpu_ms.append((time.process_time() - t_cpu) / n_req * 1000)
            # at concurrency 1 a run's tok/s is its request's; above, compare per request
            measured = statistics.fmean(r.per_request_tok_s for r in res.runs if r.counted)
            err = (measured - exp.tok_s) / exp.tok_s * 100
            errors.append(err)
            req_cpu = [r.client_cpu_s for run in res.runs for r in run.requests]
            cpu_ms.append(statistics.fmean(req_cpu) * 1000)
            acc_e = "-" if exp.accept_length is None else f"{exp.accept_length:.2f}"
            acc_m = "-" if res.accept_length is None else f"{res.accept_length:.2f}"
            print(
                f"{label:24} {exp.tok_s:9.2f} {measured:9.2f} {err:+8.2f} "
                f"{acc_e:>7} {acc_m:>8} {cpu_ms[-1]:10.2f}",
                flush=True,
            )
    abs_err = [abs(e) for e in errors]
    worst = max(abs_err)
    print()
    print(
        f"tok/s error vs expected: worst {worst:.2f}%, median {statistics.median(abs_err):.2f}%,"
        f" mean signed {statistics.fmean(errors):+.2f}% (target: within 1%)"
    )
    print(
        f"client CPU per request: {statistics.fmean(cpu_ms):.2f} ms in the request thread, "
        f"{statistics.fmean(proc_cpu_ms):.2f} ms for the whole process "
        f"({opts.max_tokens} tokens/request)"
    )
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
