"""Calibration of the simulated SGLang server (sweeper.sim) against the campaign table.

Prints, for the kimi-k2.5-8xh200 profile: the ground truth (expected_throughput) next to the
DESIGN.md table, then the same configurations measured over HTTP against a real
``python -m sweeper.sim`` process (short start-up, noise off, one 500-token chat stream each),
optionally the seeded run-to-run spread (noise on), the demo profile's landscape, and for both
profiles the optimum of their study's space at concurrency 1, 4, 16 and 32 (the roofline's
consequence: fewer steps win as the batch grows).

Every figure here comes from a TEST DOUBLE: it shows that the simulator reproduces the
campaign it was calibrated to, never how real hardware performs.

    python bench/sim_calibration.py               # ground truth + HTTP (~40 s)
    python bench/sim_calibration.py --quick       # ground truth only
    python bench/sim_calibration.py --with-noise  # + 5 noisy runs of 5 steps / 6 tokens
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from dataclasses import dataclass
from typing import Any

from sweeper.sim import expected_throughput
from sweeper.sim.harness import SimProcess, http_get, stream_chat

KIMI = "kimi-k2.5-8xh200"
PROMPT = "Explain how speculative decoding speeds up a large language model."


def eagle(steps: int, topk: int = 1, draft: int | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": steps,
        "speculative-eagle-topk": topk,
        "speculative-num-draft-tokens": draft if draft is not None else steps + 1,
        **extra,
    }


@dataclass(frozen=True)
class Row:
    label: str
    args: dict[str, Any]
    design_tok_s: float
    design_note: str


ROWS = [
    Row("no speculation (baseline)", {}, 90.0, "90 tok/s"),
    Row("EAGLE-3 5 steps / 6 tokens, draft TP8",
        eagle(5, **{"speculative-draft-tp-size": 8}), 71.3, "71.3 (66.0-75.3), accept 2.0-2.3"),
    Row("EAGLE-3 2 steps / 3 tokens", eagle(2), 94.0, "94 tok/s"),
    Row("EAGLE-3 1 step / 2 tokens", eagle(1), 93.6, "~93.6 (DESIGN sketch)"),
    Row("EAGLE-3 3 steps / 4 tokens", eagle(3), 87.0, "~87 (DESIGN sketch)"),
]


def flags(args: dict[str, Any]) -> list[str]:
    return [tok for key, value in args.items() for tok in (f"--{key}", str(value))]


def ground_truth_table() -> None:
    print("\n## Ground truth (expected_throughput) vs the campaign table, kimi-k2.5-8xh200")
    print(f"{'configuration':40} {'truth tok/s':>11} {'accept':>7} {'DESIGN':>7} {'diff':>7}"
          "  campaign")
    for row in ROWS:
        e = expected_throughput(KIMI, row.args, {})
        assert e.tok_s is not None
        accept = f"{e.accept_length:.2f}" if e.accept_length else "-"
        diff = (e.tok_s / row.design_tok_s - 1) * 100
        print(f"{row.label:40} {e.tok_s:11.2f} {accept:>7} {row.design_tok_s:7.1f} "
              f"{diff:+6.1f}%  {row.design_note}")


def measure(args: dict[str, Any], extra: list[str], runs: int = 1) -> tuple[list[float], float]:
    """tok/s of `runs` 500-token streams and the server's avg accept length."""
    with SimProcess(["--sim-profile", KIMI, "--sim-startup-seconds", "1", *extra, *flags(args)],
                    model_path="moonshotai/Kimi-K2.5") as sim:
        sim.wait_healthy(timeout=30)
        stream_chat(sim.url, PROMPT, 20)  # warm-up, as the campaign did
        results = [stream_chat(sim.url, PROMPT, 500) for _ in range(runs)]
        for r in results:
            if r.completion_tokens != 500:
                raise RuntimeError(f"asked 500 tokens, got {r.completion_tokens}")
        info = json.loads(http_get(sim.url + "/get_server_info")[1])
        accept = info["internal_states"][0].get("avg_spec_accept_length", 1.0)
        return [r.tok_s for r in results], accept


def http_table() -> None:
    print("\n## Measured over HTTP: python -m sweeper.sim --sim-profile kimi-k2.5-8xh200 "
          "--sim-startup-seconds 1 --sim-noise 0; one 500-token chat stream per configuration")
    print(f"{'configuration':40} {'HTTP tok/s':>10} {'truth':>7} {'vs truth':>8} "
          f"{'DESIGN':>7} {'vs DESIGN':>9} {'accept':>7}")
    for row in ROWS:
        truth = expected_throughput(KIMI, row.args, {}).tok_s or 0.0
        (tok_s,), accept = measure(row.args, ["--sim-noise", "0"])
        print(f"{row.label:40} {tok_s:10.2f} {truth:7.2f} {(tok_s / truth - 1) * 100:+7.2f}% "
              f"{row.design_tok_s:7.1f} {(tok_s / row.design_tok_s - 1) * 100:+8.1f}% "
              f"{accept:7.2f}")


def noise_table(seed: int) -> None:
    row = ROWS[1]
    print(f"\n## Run-to-run noise (--sim-seed {seed}, --sim-noise 1): {row.label}, "
          "1 warm-up + 5 runs of 500 tokens")
    runs, accept = measure(row.args, ["--sim-seed", str(seed)], runs=5)
    mean = statistics.fmean(runs)
    print("runs: " + ", ".join(f"{r:.1f}" for r in runs))
    print(f"mean {mean:.1f} tok/s, min {min(runs):.1f}, max {max(runs):.1f}, spread "
          f"{(max(runs) - min(runs)) / mean * 100:.1f}% (campaign: 71.3 mean, 66.0-75.3, ~14%), "
          f"avg accept length {accept:.2f}")


def study_space(profile: str) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """The shipped study's space for this profile (studies/demo.yaml, eagle3-kimi.yaml)."""
    kimi = profile == KIMI
    channels = ("", "4", "8", "16") if kimi else ("",)
    algos = ("", "Ring", "Tree") if kimi else ("", "Ring", "Tree", "CollNetDirect")
    out = []
    for steps, topk, draft, dtp in itertools.product(range(1, 7), (1, 2, 4), range(2, 17),
                                                     (1, 8) if kimi else (1, 4)):
        if (topk == 1 and draft != steps + 1) or draft > steps * topk + 1:
            continue
        for algo, proto, ch in itertools.product(algos, ("", "LL", "LL128", "Simple"), channels):
            env = {k: v for k, v in (("NCCL_ALGO", algo), ("NCCL_PROTO", proto),
                                     ("NCCL_MIN_NCHANNELS", ch)) if v}
            out.append((eagle(steps, topk, draft, **{"speculative-draft-tp-size": dtp}), env))
    return out


def concurrency_optima(levels: tuple[int, ...] = (1, 4, 16, 32)) -> None:
    print("\n## Optimum per concurrency (ground truth over each study's space; ranked by the "
          "server's total tok/s, the benchmark's figure above concurrency 1)")
    for profile in ("demo", KIMI):
        space = study_space(profile)
        print(f"{profile} ({len(space)} configurations):")
        for c in levels:
            base = expected_throughput(profile, {}, {}, concurrency=c)
            scored = [(expected_throughput(profile, a, e, concurrency=c), a, e) for a, e in space]
            e, args, env = max((r for r in scored if r[0].total_tok_s),
                               key=lambda r: r[0].total_tok_s or 0.0)
            total, per_req = e.total_tok_s or 0.0, e.tok_s or 0.0
            print(f"  c={c:<3} {total:8.1f} tok/s total ({per_req:6.1f}/request)  "
                  f"steps {args['speculative-num-steps']} topk {args['speculative-eagle-topk']} "
                  f"draft {args['speculative-num-draft-tokens']} "
                  f"draft-tp {args['speculative-draft-tp-size']} {env or 'NCCL defaults'}; "
                  f"no speculation {base.total_tok_s or 0.0:.1f} "
                  f"(x{total / (base.total_tok_s or 1.0):.2f})")


def demo_landscape() -> None:
    print("\n## Demo profile landscape (ground truth over the demo study's space)")
    base = expected_throughput("demo", {}, {}).tok_s or 0.0
    results = []
    for steps, topk, draft, dtp in itertools.product(range(1, 7), (1, 2, 4), range(2, 17),
                                                     (1, 4)):
        if (topk == 1 and draft != steps + 1) or draft > steps * topk + 1:
            continue
        for algo, proto, channels in itertools.product(
            ("", "Ring", "Tree", "CollNetDirect"), ("", "LL", "LL128", "Simple"), ("", "8")
        ):
            env = {k: v for k, v in (("NCCL_ALGO", algo), ("NCCL_PROTO", proto),
                                     ("NCCL_MIN_NCHANNELS", channels)) if v}
            args = eagle(steps, topk, draft, **{"speculative-draft-tp-size": dtp})
            results.append((expected_throughput("demo", args, env), args, env))
    ok = [r for r in results if r[0].tok_s]
    ok.sort(key=lambda r: -(r[0].tok_s or 0))
    print(f"baseline (no speculation): {base:.1f} tok/s")
    for e, args, env in ok[:3]:
        print(f"  {e.tok_s:6.1f} tok/s  accept {e.accept_length:.2f}  "
              f"steps {args['speculative-num-steps']} topk {args['speculative-eagle-topk']} "
              f"draft {args['speculative-num-draft-tokens']} "
              f"draft-tp {args['speculative-draft-tp-size']}  {env or 'NCCL defaults'}")
    counts: dict[str, int] = {}
    for e, _, _ in results:
        counts[e.failure or "ok"] = counts.get(e.failure or "ok", 0) + 1
    print(f"points: {len(results)}; outcomes: {counts} "
          "(nccl = NCCL_ALGO=CollNetDirect; oom = big trees at cuda-graph-max-bs 64)")
    print("hang (not in this grid): NCCL_ALGO=NVLSTree with --speculative-draft-tp-size 1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ground truth only, no HTTP")
    parser.add_argument("--with-noise", action="store_true", help="add 5 noisy runs (~35 s)")
    parser.add_argument("--seed", type=int, default=7)
    ns = parser.parse_args()
    print("SIMULATED figures (sweeper.sim test double): they show the simulator's calibration, "
          "not real hardware.")
    ground_truth_table()
    if not ns.quick:
        http_table()
    if ns.with_noise:
        noise_table(ns.seed)
    demo_landscape()
    concurrency_optima()


if __name__ == "__main__":
    main()
