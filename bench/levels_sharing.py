"""Sharing the restart across concurrency levels: restarts until the pick is near the
optimum of a 3-level traffic mix, one study measuring every level per restart (what
sweeper does) against three separate studies, one level each (what a user does with
a tool that measures one concurrency per study).

ALL FIGURES COME FROM THE SIMULATED SGLang SERVER's performance model (sweeper.sim, a test
double): ground truth from ``sweeper.sim.expected_throughput`` at each concurrency, so they
say how the search behaves on the simulator's landscapes, not how fast any GPU is.

In-process, no servers: every study is the trial loop ``sweeper optimize`` runs
(sweeper/run/workers.py; baseline and start_from first, known failures skipped, repeats
answered without a restart, replicates; the sampler ``--sampler``, default TPE),
measuring through bench/emulation.py's emulated measurer: every level of the study on one
start, each request one draw of the simulator's noise, on a simulated clock. No confirm
phase: the pick below is the bench's own.

* Objective: ``{mix: {1: 0.2, 8: 0.5, 32: 0.3}}`` (the issue's example): the weighted
  geometric mean of tok/s per request over the levels (study/objective.py).
* shared: one study with ``benchmark.concurrency: [1, 8, 32]`` and that objective; a trial
  = one restart measuring the three levels.
* same proposals: the shared study's sweep, each configuration measured on a restart per
  level (three studies that agree on what to try: the best case of measuring separately):
  the same measurements, three restarts for each of the shared study's.
* separate: three studies of one level each (objective: tok/s per request at it), their
  own samplers (seeds), one trial each in turn (each measures on its own start; results
  combined by configuration).

The pick (all three): the configuration with the best pooled mix among those measured at
every level so far. Metric: restarts (all studies together) until the pick's TRUE mix is
within 1% / 3% of the true optimum of the mix over the whole space (enumerated); median and
p90 over seeds, and how many seeds did not get there within the budget.

    .venv/bin/python bench/levels_sharing.py                 # demo + kimi, 10 seeds
    .venv/bin/python bench/levels_sharing.py --seeds 5 --only demo
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path
from typing import Any

import yaml
from emulation import GroundTruth, Measured, sweep_only  # bench/, the script's own folder

from sweeper.search.sampler import SAMPLERS, make_sampler
from sweeper.search.space import SearchSpace
from sweeper.study import StudySpec, parse_study

ROOT = Path(__file__).resolve().parent.parent

# study file, simulator profile (kimi: the real study's space on the simulated server)
STUDIES = {"demo": ("demo.yaml", "demo"), "kimi": ("eagle3-kimi.yaml", "kimi-k2.5-8xh200")}
LEVELS = (1, 8, 32)
WEIGHTS = {1: 0.2, 8: 0.5, 32: 0.3}
TOLERANCES = (0.01, 0.03)


def study(key: str, levels: tuple[int, ...], objective: Any = None) -> StudySpec:
    """The study file of ``key`` on the simulated server, measuring ``levels``."""
    name, profile = STUDIES[key]
    path = ROOT / "studies" / name
    raw = yaml.safe_load(path.read_text())
    if key != "demo":
        raw["hosts"] = [{"ssh": "local"}]
        raw["server"]["launcher"] = f"{{python}} -m sweeper.sim --sim-profile {profile}"
    raw["benchmark"]["concurrency"] = list(levels) if len(levels) > 1 else levels[0]
    raw.pop("objective", None)
    if objective is not None:
        raw["objective"] = objective
    return parse_study(raw, path)


def sweep(truth: GroundTruth, spec: StudySpec, seed: int, trials: int, sampler: str
          ) -> list[Measured]:
    """What one study's loop measured, in order."""
    made = make_sampler(sampler, seed, spec.sweep.n_startup_trials, space=SearchSpace(spec))
    return sweep_only(truth, spec, made, seed, trials).log


def interleave(logs: list[list[Measured]]) -> list[tuple[int, Measured]]:
    """The studies' measurements one each in turn, with the restarts of all together
    after each."""
    out, total, seen = [], 0, [0] * len(logs)
    for i in range(max(map(len, logs), default=0)):
        for k, log in enumerate(logs):
            if i < len(log):
                total += log[i].restarts - seen[k]
                seen[k] = log[i].restarts
                out.append((total, log[i]))
    return out


def reached(truth: GroundTruth, steps: list[tuple[int, Measured]], budget: int
            ) -> dict[float, float]:
    """Restarts until the pick is within each tolerance (inf: not within the budget)."""
    runs: dict[str, dict[int, list[float]]] = {}
    out = {tol: math.inf for tol in TOLERANCES}
    for restarts, m in steps:
        if restarts > budget:
            break
        got = runs.setdefault(m.cid, {})
        for c, values in m.runs.items():
            got.setdefault(c, []).extend(values)
        full = {cid: truth.spec.objective.combine({c: statistics.fmean(v[c]) for c in LEVELS})
                for cid, v in runs.items() if all(v.get(c) for c in LEVELS)}
        if not full:
            continue
        gap = truth.gap(max(full, key=full.__getitem__))
        for tol in TOLERANCES:
            if math.isinf(out[tol]) and gap >= -tol:
                out[tol] = restarts
    return out


SHARED, SAME, SEPARATE = "shared", "same", "separate"
NAMES = {SHARED: "shared (1 restart: 3 levels)",
         SAME: "3 studies, same proposals",
         SEPARATE: "3 studies, own samplers"}


def campaigns(key: str, truth: GroundTruth, seed: int, budget: int, sampler: str
              ) -> dict[str, dict[float, float]]:
    shared = interleave([sweep(truth, truth.spec, seed, budget, sampler)])
    same = [(restarts * len(LEVELS), m) for restarts, m in shared]
    per_level = budget // len(LEVELS) + 1  # trials each: the budget's restarts together
    separate = interleave([sweep(truth, study(key, (c,)), seed * 10 + i, per_level, sampler)
                           for i, c in enumerate(LEVELS)])
    return {SHARED: reached(truth, shared, budget), SAME: reached(truth, same, budget),
            SEPARATE: reached(truth, separate, budget)}


def _fmt(values: list[float], budget: int) -> str:
    ok = sorted(v for v in values if not math.isinf(v))
    miss = len(values) - len(ok)
    if not ok:
        return f"never (budget {budget})"
    med = statistics.median(values) if miss <= len(values) // 2 else math.inf
    p90 = sorted(values)[min(len(values) - 1, math.ceil(0.9 * len(values)) - 1)]

    def f(x: float) -> str:
        return f">{budget}" if math.isinf(x) else f"{x:.0f}"
    return f"median {f(med)}, p90 {f(p90)}" + (f", {miss} missed" if miss else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--only", choices=sorted(STUDIES))
    ap.add_argument("--budget", type=int, default=90, help="restarts per campaign")
    ap.add_argument("--sampler", default="tpe", choices=sorted(SAMPLERS),
                    help="every study's sampler (default tpe, the same for all three ways)")
    args = ap.parse_args()
    print("SIMULATED: figures from sweeper.sim's performance model (a test double), "
          "not real hardware.")
    print(f"levels {list(LEVELS)}, objective mix {WEIGHTS} (weighted geometric mean of "
          f"tok/s per request); {args.seeds} seeds, budget {args.budget} restarts, "
          f"sampler {args.sampler}")
    for key, (_, profile) in STUDIES.items():
        if args.only and key != args.only:
            continue
        t0 = time.monotonic()
        truth = GroundTruth(study(key, LEVELS, {"mix": WEIGHTS}), profile)
        best = truth.best.levels
        print(f"\n{key}: {len(truth.configs)} configurations; mix optimum {truth.optimum:.1f} "
              f"({', '.join(f'@{c} {e.tok_s or 0.0:.1f}' for c, e in best.items())})")
        per_seed = [campaigns(key, truth, seed, args.budget, args.sampler)
                    for seed in range(args.seeds)]
        results = {how: [r[how] for r in per_seed] for how in (SHARED, SAME, SEPARATE)}
        for how, rows in results.items():
            print(f"  {NAMES[how]:30s} " + "; ".join(
                f"within {tol:.0%}: {_fmt([r[tol] for r in rows], args.budget)}"
                for tol in TOLERANCES))
        for how in (SAME, SEPARATE):
            for tol in TOLERANCES:
                sa = statistics.median(r[tol] for r in results[SHARED])
                sb = statistics.median(r[tol] for r in results[how])
                saved = "n/a" if math.isinf(sa) else \
                    f">{args.budget - sa:.0f}" if math.isinf(sb) else f"{sb - sa:.0f}"
                ratio = "" if math.isinf(sa) or math.isinf(sb) or sa == 0 else \
                    f" ({sb / sa:.1f}x)"
                print(f"  restarts saved by sharing, vs {NAMES[how]}, within {tol:.0%} "
                      f"(median): {saved}{ratio}")
        print(f"  ({time.monotonic() - t0:.1f} s)")


if __name__ == "__main__":
    main()
