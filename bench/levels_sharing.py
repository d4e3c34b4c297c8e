"""Sharing the restart across concurrency levels: restarts until the pick is near the
optimum of a 3-level traffic mix, one study measuring every level per restart (what
sweeper does) against three separate studies, one level each (what a user does with
a tool that measures one concurrency per study).

ALL FIGURES COME FROM THE SIMULATED SGLang SERVER's performance model (sweeper.sim, a test
double): ground truth from ``sweeper.sim.expected_throughput`` at each concurrency, so they
say how the search behaves on the simulator's landscapes, not how fast any GPU is.

In-process, no servers (like bench/search_efficiency.py): the real SearchSpace, the real
sampler (``make_sampler``: TPE), baseline and start_from enqueued first, failures told
PRUNED with the constraint, known failures skipped without a restart (FailureMemory).

* Objective: ``{mix: {1: 0.2, 8: 0.5, 32: 0.3}}`` (the issue's example): the weighted
  geometric mean of tok/s per request over the levels (study/objective.py).
* Noise: per run and level, the noise-free tok/s per request times a log-normal factor of
  sd ``noise.cycle_sd`` / sqrt(concurrency) (the mean of that many requests' speeds; the
  profile's run-to-run spread at concurrency 1). An approximation of the simulated
  server's per-request draws, applied alike to both strategies.
* shared: one study; a trial = one restart measuring the three levels; the pick = the best
  pooled mix of the measured configurations.
* same proposals: the shared study's search, each level measured on a restart of its own
  (three studies that agree on what to try: the best case of measuring separately).
* separate: three studies (objective: tok/s per request at their level), one trial each in
  turn; a trial = one restart measuring one level. A configuration's mix is known once all
  three studies have measured it (results combined by configuration); the pick = the best
  pooled mix of those. Each study enqueues the baseline and the start_from entries itself.

Metric: restarts (all studies together) until the pick's TRUE mix is within 1% / 3% of the
true optimum of the mix over the whole space (enumerated); median and p90 over seeds, and
how many seeds did not get there within the budget.

    .venv/bin/python bench/levels_sharing.py                 # demo + kimi, 10 seeds
    .venv/bin/python bench/levels_sharing.py --seeds 5 --only demo
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState
from search_efficiency import demo_study, kimi_study

from sweeper.search.failures import FailureMemory
from sweeper.search.sampler import make_sampler
from sweeper.search.space import SearchSpace
from sweeper.sim import expected_throughput, load_profile
from sweeper.study import StudySpec

ROOT = Path(__file__).resolve().parent.parent

STUDIES = {"demo": (demo_study, "demo"), "kimi": (kimi_study, "kimi-k2.5-8xh200")}
LEVELS = (1, 8, 32)
WEIGHTS = {1: 0.2, 8: 0.5, 32: 0.3}
TOLERANCES = (0.01, 0.03)

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def mix(per_request: dict[int, float]) -> float:
    return math.exp(sum(w * math.log(max(per_request[c], 1e-9)) for c, w in WEIGHTS.items()))


@dataclass
class Truth:
    """Every configuration's noise-free tok/s per request at each level (None: it fails)."""

    spec: StudySpec
    profile: str
    space: SearchSpace = field(init=False)
    per: dict[str, dict[int, float] | None] = field(default_factory=dict)
    failure: dict[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.space = SearchSpace(self.spec)
        self.prof = load_profile(self.profile)
        for _, eff in self.space.configurations():
            self.add(self.space.launch_config(eff))
        self.add(self.space.baseline_config())
        ok = {cid: mix(p) for cid, p in self.per.items() if p is not None}
        self.optimum = max(ok.values())
        self.best = max(ok, key=ok.__getitem__)

    def add(self, launch: Any) -> str:
        cid = launch.config_id()
        if cid not in self.per:
            out: dict[int, float] = {}
            fail = None
            for c in LEVELS:
                e = expected_throughput(self.prof, launch.args, launch.env, concurrency=c)
                if e.failure:
                    fail = e.failure
                    break
                out[c] = float(e.tok_s or 0.0)
            self.per[cid] = None if fail else out
            self.failure[cid] = fail
        return cid

    def true_mix(self, cid: str) -> float:
        p = self.per[cid]
        return mix(p) if p is not None else 0.0

    def measure(self, cid: str, level: int, runs: int, rng: random.Random) -> list[float]:
        p = self.per[cid]
        assert p is not None
        sd = self.prof.noise.cycle_sd / math.sqrt(level)
        return [p[level] * math.exp(rng.gauss(0.0, sd)) for _ in range(runs)]


@dataclass
class Study:
    """One emulated study: a sampler, the queue, what it measured, a failure memory."""

    truth: Truth
    objective: int | None  # a level, or None for the mix
    seed: int
    study: optuna.Study = field(init=False)
    memory: FailureMemory = field(default_factory=FailureMemory)
    current: str | None = None
    n: int = 0

    def __post_init__(self) -> None:
        spec = self.truth.spec
        self.study = optuna.create_study(direction="maximize", sampler=make_sampler(
            "tpe", self.seed, spec.sweep.n_startup_trials))
        if spec.baseline:
            self.study.enqueue_trial({}, user_attrs={"role": "baseline"})
        for point in spec.start_from:
            self.study.enqueue_trial(self.truth.space.internal_params(point),
                                     user_attrs={"role": "start_from"}, skip_if_exists=True)

    def step(self, runs: dict[str, dict[int, list[float]]], rng: random.Random) -> int:
        """One proposal to its end; the restarts it cost (0 when skipped or reused)."""
        space, truth = self.truth.space, self.truth
        while True:
            trial = self.study.ask()
            if trial.user_attrs.get("role") == "baseline":
                eff: dict[str, Any] = {}
                launch = space.baseline_config()
            else:
                eff = space.suggest(trial)
                launch = space.launch_config(eff)
            cid = truth.add(launch)
            self.n += 1
            predicted = self.memory.predict(cid, eff)
            if predicted is None:
                break
            trial.set_constraint("failed", 1.0)
            self.study.tell(trial, state=TrialState.PRUNED)  # known failure: no restart
        restart = int(self.current != cid)
        self.memory.add(self.n, cid, eff, truth.failure[cid])
        if truth.failure[cid] is not None:
            self.current = None
            trial.set_constraint("failed", 1.0)
            self.study.tell(trial, state=TrialState.PRUNED)
            return restart
        self.current = cid
        levels = LEVELS if self.objective is None else (self.objective,)
        got = runs.setdefault(cid, {})
        this: dict[int, list[float]] = {}
        for c in levels:
            this[c] = truth.measure(cid, c, truth.spec.benchmark.runs, rng)
            got.setdefault(c, []).extend(this[c])
        value = mix({c: statistics.fmean(v) for c, v in this.items()}) \
            if self.objective is None else statistics.fmean(this[self.objective])
        trial.set_constraint("failed", 0.0)
        self.study.tell(trial, value)
        return restart


def pick(runs: dict[str, dict[int, list[float]]]) -> str | None:
    """The configuration with the best pooled mix among those measured at every level."""
    full = {cid: mix({c: statistics.fmean(v[c]) for c in LEVELS})
            for cid, v in runs.items() if all(v.get(c) for c in LEVELS)}
    return max(full, key=full.__getitem__) if full else None


SHARED, SAME, SEPARATE = "shared", "same", "separate"
NAMES = {SHARED: "shared (1 restart: 3 levels)",
         SAME: "3 studies, same proposals",
         SEPARATE: "3 studies, own samplers"}


def campaign(truth: Truth, how: str, seed: int, budget: int) -> dict[float, float]:
    """Restarts until the pick is within each tolerance (inf: not within the budget).
    ``same``: the shared study's proposals, each level measured on its own restart (the
    most a separate-studies user can hope for: they agree on what to try)."""
    rng = random.Random(f"{how}/{seed}")
    studies = [Study(truth, None, seed)] if how != SEPARATE else \
        [Study(truth, c, seed * 10 + i) for i, c in enumerate(LEVELS)]
    cost = len(LEVELS) if how == SAME else 1
    runs: dict[str, dict[int, list[float]]] = {}
    reached: dict[float, float] = {tol: math.inf for tol in TOLERANCES}
    restarts = 0
    while restarts < budget and any(math.isinf(v) for v in reached.values()):
        for s in studies:
            restarts += cost * s.step(runs, rng)
            cid = pick(runs)
            for tol in TOLERANCES:
                if cid is not None and math.isinf(reached[tol]) and \
                        truth.true_mix(cid) >= (1 - tol) * truth.optimum:
                    reached[tol] = restarts
    return reached


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
    args = ap.parse_args()
    print("SIMULATED: figures from sweeper.sim's performance model (a test double), "
          "not real hardware.")
    print(f"levels {list(LEVELS)}, objective mix {WEIGHTS} (weighted geometric mean of "
          f"tok/s per request); {args.seeds} seeds, budget {args.budget} restarts")
    for key, (make, profile) in STUDIES.items():
        if args.only and key != args.only:
            continue
        t0 = time.monotonic()
        truth = Truth(make(), profile)
        best = truth.per[truth.best] or {}
        print(f"\n{key}: {len(truth.per)} configurations; mix optimum {truth.optimum:.1f} "
              f"({', '.join(f'@{c} {v:.1f}' for c, v in best.items())})")
        results = {}
        for how in (SHARED, SAME, SEPARATE):
            rows = [campaign(truth, how, seed, args.budget) for seed in range(args.seeds)]
            results[how] = rows
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
