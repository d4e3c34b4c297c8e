"""An in-process sweep on the simulator's ground truth, shared by bench/search_efficiency.py
and bench/failure_rate.py.

ALL FIGURES COME FROM THE SIMULATED SGLang SERVER's performance model (sweeper.sim, a test
double): ground truth from ``sweeper.sim.expected_throughput``, measurement noise drawn the
way sweeper/sim/engine.py draws it. They say how well the search works on the simulator's
landscapes, never how fast any real GPU is. bench/ may import sweeper.sim; the sweeper may not.

The loop is sweeper/run/sweep.py's, with the real SearchSpace, the real samplers
(``make_sampler``), the real FailureMemory and the same handling for EVERY strategy:

* trial 0 is the baseline (enqueued ``{}``), then the study's start_from entries, then the
  strategy's proposals, as ``Sweep._enqueue_initial`` does;
* a proposal the failure memory predicts to fail is skipped without a restart and told
  PRUNED + infeasible; an accidental repeat of a measured configuration (not a deliberate
  replicate, ``is_deliberate_replicate``) is told the mean of its earlier values without a
  restart, at most ``REPEAT_LIMIT`` times in a row;
* otherwise one restart (one trial of ``--trials``): a configuration that truly fails is
  told PRUNED + infeasible; one that serves is benchmarked (``benchmark.runs`` runs, the
  simulator's noise: a log-normal time factor, sd ``noise.cycle_sd``, on prefill + every
  verify cycle, a log-normal factor, sd ``noise.accept_sd``, on the per-depth acceptance),
  the mean told;
* the pick = the best pooled mean; when the study sets ``sweep.confirm_top`` the confirm
  phase (run/confirm.py) is emulated after the sweep and its restarts come out of the same
  budget.

Every record carries the ground truth, so skips are checked (``would_serve``) rather than
counted as known failures.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweeper.launch import LaunchConfig  # noqa: E402
from sweeper.results import attrs as A  # noqa: E402
from sweeper.run.confirm import ConfirmPlan, confirm_plan  # noqa: E402
from sweeper.run.longer import more_runs_from  # noqa: E402
from sweeper.run.sweep import REPEAT_LIMIT  # noqa: E402
from sweeper.search.failures import FailureMemory  # noqa: E402
from sweeper.search.sampler import SAMPLERS, make_sampler  # noqa: E402
from sweeper.search.space import SearchSpace  # noqa: E402
from sweeper.sim import Expectation, expected_throughput, load_profile  # noqa: E402
from sweeper.sim import model as M  # noqa: E402
from sweeper.study import StudySpec  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", category=UserWarning, module="optuna")

GRID, GP, DEFAULT = "grid", "gp", "default"


def strategies_available() -> list[str]:
    """default (the study's sweep.sampler), every registered sampler, gp, grid."""
    return [DEFAULT, *SAMPLERS, GP, GRID]


def gp_missing() -> str | None:
    """Why GPSampler cannot run here (torch missing), or None."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed (pip install -e '.[bench]')"
    return None


def sampler_for(strategy: str, spec: StudySpec, seed: int) -> optuna.samplers.BaseSampler:
    if strategy == GP:
        import torch

        torch.set_num_threads(1)  # one sweep per worker process; --jobs sets the cores
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=spec.sweep.n_startup_trials,
                                         warn_independent_sampling=False)
    name = spec.sweep.sampler if strategy == DEFAULT else strategy
    return make_sampler(name, seed, spec.sweep.n_startup_trials, space=SearchSpace(spec))


# --------------------------------------------------------------------------- ground truth
@dataclass
class Config:
    cid: str
    effective: dict[str, Any]
    launch: LaunchConfig
    truth: Expectation

    @property
    def tok_s(self) -> float | None:
        return self.truth.tok_s


class GroundTruth:
    """Every valid configuration of a study's space with the simulator's expectation,
    the true optimum, and noisy measurements drawn like the simulated server's."""

    def __init__(self, spec: StudySpec, profile: str) -> None:
        self.spec = spec
        self.space = SearchSpace(spec)
        self.profile = load_profile(profile)
        self.configs: dict[str, Config] = {}
        for _, eff in self.space.configurations():
            launch = self.space.launch_config(eff)
            cid = launch.config_id()
            if cid not in self.configs:
                self.configs[cid] = Config(cid, eff, launch, self._expect(launch))
        self.space_cids = list(self.configs)
        base = self.space.baseline_config()
        self.baseline_cid = base.config_id()
        self.configs[self.baseline_cid] = Config(self.baseline_cid, {}, base, self._expect(base))
        ok = [c for c in self.configs.values() if c.tok_s is not None]
        self.best = max(ok, key=lambda c: c.tok_s or 0.0)
        self.optimum = float(self.best.tok_s or 0.0)

    def _expect(self, launch: LaunchConfig) -> Expectation:
        return expected_throughput(self.profile, launch.args, launch.env,
                                   concurrency=self.spec.benchmark.concurrency)

    def config(self, cid: str, launch: LaunchConfig) -> Config:
        if cid not in self.configs:  # not reachable from the space: compute it anyway
            self.configs[cid] = Config(cid, {}, launch, self._expect(launch))
        return self.configs[cid]

    def fails(self, cid: str) -> bool:
        return self.configs[cid].truth.failure is not None

    def true_tok_s(self, cid: str) -> float:
        return float(self.configs[cid].tok_s or 0.0)

    def gap(self, cid: str) -> float:
        """True tok/s of ``cid`` relative to the optimum, minus 1 (0 = the optimum)."""
        return self.true_tok_s(cid) / self.optimum - 1

    def measure(self, cid: str, rng: random.Random, runs: int | None = None) -> list[float]:
        """benchmark.runs per-request tok/s, the simulator's schedule x its noise
        (engine.NoiseSource.draw per measured request; the warm-up is not counted)."""
        return self.measure_accept(cid, rng, runs)[0]

    def measure_accept(self, cid: str, rng: random.Random, runs: int | None = None
                       ) -> tuple[list[float], float | None]:
        """``measure`` and the mean accept length the server's counters would report."""
        cfg = self.configs[cid].truth.config
        assert cfg is not None
        p, bench = self.profile, self.spec.benchmark
        batch = max(1, min(bench.concurrency, cfg.max_running))
        cycle = M.cycle_ms(p, cfg, batch)
        prefill = M.prefill_ms(p, cfg, batch)
        out, accepts = [], []
        for _ in range(bench.runs if runs is None else runs):
            tf = math.exp(rng.gauss(0.0, p.noise.cycle_sd))
            af = math.exp(rng.gauss(0.0, p.noise.accept_sd))
            if cfg.speculative:
                dist = M.accept_distribution(M.depth_acceptance(p, cfg, af))
                steps = M.verify_steps_for(dist, bench.max_tokens)
                accepts.append((bench.max_tokens - 1) / steps)
            else:
                steps = bench.max_tokens - 1
            out.append(bench.max_tokens / ((prefill + steps * cycle) * tf) * 1000.0)
        return out, (statistics.fmean(accepts) if accepts else None)


# --------------------------------------------------------------------------- the sweep
@dataclass
class Record:
    """One proposal of an emulated sweep."""

    role: str
    cid: str
    effective: dict[str, Any]
    outcome: str  # "measured", "failed" (on a restart), "skipped", "repeat"
    truly_fails: bool  # the simulator's ground truth for this configuration
    value: float | None
    restarts: int  # cumulative restarts after this proposal
    pick: str | None  # the configuration the tool would pick now

    @property
    def restart(self) -> bool:
        return self.outcome in ("measured", "failed")


@dataclass
class Sweep:
    records: list[Record] = field(default_factory=list)
    runs: dict[str, list[float]] = field(default_factory=dict)
    told: dict[str, list[float]] = field(default_factory=dict)
    restarts: int = 0
    confirm_restarts: int = 0
    bench_runs: int = 0  # measured benchmark runs of the sweep (the longer ones' included)
    final: str | None = None  # the pick at the end (after the confirm phase, if any)

    def best(self) -> str | None:
        return max(self.runs, key=lambda c: statistics.fmean(self.runs[c]), default=None)


def emulate(truth: GroundTruth, strategy: str, seed: int, budget: int,
            on_record: Callable[[Record], None] | None = None) -> Sweep:
    """One sweep of ``budget`` restarts in all: the confirm phase's (when the study has
    one) come out of it."""
    spec, space = truth.spec, truth.space
    # the same noise stream for every strategy at a seed (common random numbers)
    rng = random.Random(f"noise/{seed}")
    # the confirm phase the CLI would run after this strategy's sweep (run/confirm.py)
    plan = confirm_plan(spec, spec.sweep.sampler if strategy == DEFAULT else strategy)
    sweep_budget = max(1, budget - plan.restarts)
    out = Sweep()
    memory = FailureMemory()
    in_a_row = 0

    measured_in: dict[str, list[int]] = {}

    def handle(cid: str, eff: dict[str, Any], role: str, replicate: bool, number: int
               ) -> tuple[float | None, dict[str, Any]]:
        """-> (value told, or None for PRUNED; the user attributes the Recorder writes)."""
        nonlocal in_a_row
        fails = truth.fails(cid)
        attrs: dict[str, Any] = {A.ROLE: role, A.CONFIG_ID: cid, A.EFFECTIVE: eff}
        if role == A.SAMPLER and not replicate and cid in out.told and in_a_row < REPEAT_LIMIT:
            in_a_row += 1
            value = statistics.fmean(out.told[cid])
            out.records.append(Record(role, cid, eff, "repeat", fails, value, out.restarts,
                                      out.best()))
            return value, {**attrs, A.REPEAT_OF: list(measured_in[cid])}
        predicted = memory.predict(cid, eff)
        if predicted is not None:
            out.records.append(Record(role, cid, eff, "skipped", fails, None, out.restarts,
                                      out.best()))
            return None, {**attrs, A.SKIPPED: True, A.FAILURE: predicted.kind}
        in_a_row = 0
        out.restarts += 1
        if fails:
            failure = truth.configs[cid].truth.failure
            memory.add(number, cid, eff, failure)
            out.records.append(Record(role, cid, eff, "failed", True, None, out.restarts,
                                      out.best()))
            return None, {**attrs, A.FAILURE: failure}
        memory.add(number, cid, eff, None)
        runs, accept = truth.measure_accept(cid, rng)
        # measured longer on the same start while close to the best (run/longer.py,
        # measure/client.run_benchmark's loop): costs benchmark runs, not restarts
        more = more_runs_from(out.runs, cid, spec.benchmark)
        cap = spec.benchmark.max_runs or 0
        while more is not None and len(runs) < cap:
            extra = min(more(runs), cap - len(runs))
            if extra <= 0:
                break
            runs.extend(truth.measure(cid, rng, extra))
        value = statistics.fmean(runs)
        out.bench_runs += len(runs)
        out.runs.setdefault(cid, []).extend(runs)
        out.told.setdefault(cid, []).append(value)
        measured_in.setdefault(cid, []).append(number)
        out.records.append(Record(role, cid, eff, "measured", False, value, out.restarts,
                                  out.best()))
        return value, {**attrs, A.RUNS: runs, **({A.ACCEPT: accept} if accept else {})}

    def done() -> bool:
        # a sampler stuck on known failures stops the way the sweeper aborts (SKIP limit)
        return out.restarts >= sweep_budget or len(out.records) >= 20 * sweep_budget + 100

    first: list[tuple[str, dict[str, Any], str]] = []
    if spec.baseline:
        first.append((truth.baseline_cid, {}, A.BASELINE))
    for point in spec.start_from:
        eff = space.effective(space.internal_params(point))
        first.append((space.launch_config(eff).config_id(), eff, A.START_FROM))
    if strategy == GRID:
        # a hand/grid sweep: the same first points, then every configuration in a random order
        rest = [c for c in truth.space_cids if c not in {f[0] for f in first}]
        rng.shuffle(rest)
        order = first + [(c, truth.configs[c].effective, A.SAMPLER) for c in rest]
        for cid, eff, role in order:
            if done():
                break
            handle(cid, eff, role, False, len(out.records))
            if on_record:
                on_record(out.records[-1])
    else:
        sampler = sampler_for(strategy, spec, seed)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        # what the sweep records for a sampler that plans with the budget (search/model/)
        study.set_user_attr(A.BUDGET, {"start": 0, "target": sweep_budget,
                                       "trials": sweep_budget})
        deliberate = getattr(sampler, "deliberate", None)
        if spec.baseline and strategy == GP:
            # GPSampler models the parameters every trial has: the baseline's empty
            # trial would leave it none (all random). Measured, but not told to it.
            handle(truth.baseline_cid, {}, A.BASELINE, False, -1)
        elif spec.baseline:
            study.enqueue_trial({}, user_attrs={A.ROLE: A.BASELINE})
        for point in spec.start_from:
            study.enqueue_trial(space.internal_params(point), user_attrs={A.ROLE: A.START_FROM},
                                skip_if_exists=True)
        while not done():
            trial = study.ask()
            role = str(trial.user_attrs.get(A.ROLE, A.SAMPLER))
            if role == A.BASELINE:
                eff, launch = {}, space.baseline_config()
            else:
                eff = space.suggest(trial)
                launch = space.launch_config(eff)
            cid = launch.config_id()
            truth.config(cid, launch)
            note = deliberate(trial.number) if deliberate and role == A.SAMPLER else None
            if note:  # a racing replicate: a repeat on purpose, measured (run/sweep.py)
                trial.set_user_attr(A.REPLICATE, note)
            value, attrs = handle(cid, eff, role, bool(trial.user_attrs.get(A.REPLICATE)),
                                  trial.number)
            for key, v in attrs.items():
                trial.set_user_attr(key, v)
            if on_record:
                on_record(out.records[-1])
            if value is None and strategy == GP:
                # GPSampler reads COMPLETE trials only (a PRUNED one is invisible to it, and
                # it would propose the same failure forever): a failure is told feasible-
                # less, at the worst value measured so far, and its constraint says why
                trial.set_constraint("failed", 1.0)
                worst = min((v for vs in out.told.values() for v in vs), default=0.0)
                study.tell(trial, worst)
            elif value is None:
                trial.set_constraint("failed", 1.0)
                study.tell(trial, state=TrialState.PRUNED)
            else:
                trial.set_constraint("failed", 0.0)
                study.tell(trial, value)
    out.final, out.confirm_restarts = confirm_phase(out.runs, truth, seed, plan)
    return out


def confirm_phase(pool: dict[str, list[float]], truth: GroundTruth, seed: int,
                  plan: ConfirmPlan | None = None) -> tuple[str | None, int]:
    """run/confirm.py's phase as ``plan`` says (default: the study's full phase): the top
    configurations (pooled means, baseline excluded) and the baseline re-measured,
    ``ceil(runs / rounds)`` runs per visit, one restart per visit; the fresh runs alone
    decide, and the baseline wins if nothing beats it. -> (winner, restarts)."""
    plan = plan or confirm_plan(truth.spec, "tpe")
    top = plan.top
    ranked = sorted((c for c in pool if c != truth.baseline_cid),
                    key=lambda c: statistics.fmean(pool[c]), reverse=True)[:top]
    if not top or not ranked:
        best = max(pool, key=lambda c: statistics.fmean(pool[c]), default=None)
        return best, 0
    cands = ranked + ([truth.baseline_cid] if truth.baseline_cid in pool else [])
    rng = random.Random(f"confirm/{seed}")
    per_visit = max(1, math.ceil(plan.runs / plan.rounds))
    fresh: dict[str, list[float]] = {c: [] for c in cands}
    for _ in range(plan.rounds):
        for c in cands:
            fresh[c].extend(truth.measure(c, rng, per_visit))
    winner = max(ranked, key=lambda c: statistics.fmean(fresh[c]))
    if truth.baseline_cid in fresh and \
            statistics.fmean(fresh[truth.baseline_cid]) > statistics.fmean(fresh[winner]):
        winner = truth.baseline_cid
    return winner, plan.rounds * len(cands)


# --------------------------------------------------------------------------- figures
SKIP_FIRST = 10  # the window: restarts after the first 10


@dataclass
class Honesty:
    """Failure figures of one sweep, checked against the ground truth."""

    restarts_after: int = 0  # restarts after the first SKIP_FIRST
    failing_restarts_after: int = 0
    proposals_after: int = 0  # every proposal after the first SKIP_FIRST restarts
    failing_proposals_after: int = 0  # ... landing on a configuration that truly fails
    skips: int = 0
    skips_serving: int = 0  # skipped, yet the configuration would have served
    skips_top1: int = 0  # ... and it is within 1% of the optimum

    def add(self, other: Honesty) -> Honesty:
        return Honesty(*(getattr(self, f) + getattr(other, f)
                         for f in self.__dataclass_fields__))


def honesty(sweep: Sweep, truth: GroundTruth) -> Honesty:
    h = Honesty()
    before = 0  # restarts before this proposal
    for r in sweep.records:
        after = before >= SKIP_FIRST
        if after:
            h.proposals_after += 1
            h.failing_proposals_after += r.truly_fails
            if r.restart:
                h.restarts_after += 1
                h.failing_restarts_after += r.truly_fails
        if r.outcome == "skipped":
            h.skips += 1
            if not r.truly_fails:
                h.skips_serving += 1
                h.skips_top1 += truth.gap(r.cid) >= -0.01
        before = r.restarts
    return h
