"""Search efficiency: restarts until sweeper's pick is near the true optimum, against a
random search and a hand/grid sweep ("fewer restarts than a hand sweep or a grid").

ALL FIGURES COME FROM THE SIMULATED SGLang SERVER's performance model (sweeper.sim, a test
double): ground truth from ``sweeper.sim.expected_throughput``, measurement noise drawn the
way sweeper/sim/engine.py draws it. They say how well the search works on the simulator's
landscapes ("demo", "kimi-k2.5-8xh200"), not how fast any real GPU is.

In-process, no servers. For a study, the sweep loop of sweeper/sweep.py is emulated with
the real SearchSpace and the real sampler from ``make_sampler``:

* trial 0 is the baseline (enqueued ``{}``), then the study's start_from entries, then the
  sampler, as ``Sweep._enqueue_initial`` does;
* one trial = one server restart (none when the same configuration is still serving);
* a configuration that fails (``Expectation.failure``: oom, nccl, hang, invalid_args) is
  told PRUNED with ``set_constraint("failed", 1.0)``; a configuration whose config_id
  already failed is skipped without a restart (not counted) and also told PRUNED;
* a configuration that serves is benchmarked: ``benchmark.runs`` runs after the warm-up,
  each one request of ``benchmark.max_tokens`` tokens; per run the simulator's noise
  (engine.NoiseSource: a log-normal time factor, sd ``noise.cycle_sd``, on prefill + every
  verify cycle, and a log-normal acceptance factor, sd ``noise.accept_sd``, on the
  per-depth acceptance) applied to the model's schedule; the value told is the mean;
* the configuration the tool would pick = the best mean of all its runs, replicates
  pooled by config_id (sweeper.results.config_results / best_result).

Strategies: "sweeper (TPE)" (the study's sampler: TPE multivariate+group, constant liar,
n_startup_trials from the study), "random" (RandomSampler over the same space), "grid"
(baseline + start_from, then every valid configuration of the space in a random order:
a hand/grid sweep; it never repeats a configuration, so it never skips one).

Metric per strategy and seed: restarts until the picked configuration's TRUE tok/s is
within 1% / 3% of the true optimum (every valid configuration of the space enumerated with
expected_throughput, the baseline included); median and p90 over seeds, and how many seeds
did not get there within the restart budget (60 for demo, 40 for kimi).

    .venv/bin/python bench/search_efficiency.py                  # demo + kimi, 20 seeds
    .venv/bin/python bench/search_efficiency.py --seeds 5 --only demo

When the study sets ``sweep.confirm_top`` (demo.yaml does), the confirm phase of
sweeper/confirm.py is emulated at the budget too (top K + baseline re-measured with fresh
runs, one restart per visit) and its winner's true gap printed under the strategy's row.

Runtime: ~1.5-2 minutes on 2 cores with 20 seeds (TPE itself is fast here, ~0.2-0.4 s per
60-trial sweep; the unbudgeted grid on the 11k-configuration kimi space dominates; see
the "time" column). No seed reduction was needed.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweeper.launch import LaunchConfig  # noqa: E402
from sweeper.search.failures import FailureMemory  # noqa: E402
from sweeper.search.sampler import make_sampler  # noqa: E402
from sweeper.search.space import SearchSpace  # noqa: E402
from sweeper.sim import Expectation, expected_throughput, load_profile  # noqa: E402
from sweeper.sim import model as M  # noqa: E402
from sweeper.study import StudySpec, load_study, parse_study  # noqa: E402

TPE, RANDOM, GRID = "sweeper (TPE)", "random", "grid"
STRATEGIES = (TPE, RANDOM, GRID)
TOLERANCES = (0.01, 0.03)

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


# --------------------------------------------------------------------------- studies
def demo_study() -> StudySpec:
    return load_study(str(ROOT / "studies" / "demo.yaml"))


def kimi_study() -> StudySpec:
    """studies/eagle3-kimi.yaml on this machine, with the simulated server
    (profile kimi-k2.5-8xh200) as the launcher instead of SGLang."""
    import yaml

    path = ROOT / "studies" / "eagle3-kimi.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["hosts"] = [{"ssh": "local"}]
    raw["server"]["launcher"] = "{python} -m sweeper.sim --sim-profile kimi-k2.5-8xh200"
    return parse_study(raw, path)


STUDIES = {"demo": (demo_study, "demo", 60), "kimi": (kimi_study, "kimi-k2.5-8xh200", 40)}


# --------------------------------------------------------------------------- ground truth
class _Need(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


class _Probe(Mapping[str, Any]):
    """Internal params for SearchSpace.effective that raise _Need for an unassigned
    name: walking the space branch by branch enumerates exactly its valid configurations."""

    def __init__(self, fixed: dict[str, Any]) -> None:
        self.fixed = fixed

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> Any:
        if key in self.fixed:
            return self.fixed[key]
        raise _Need(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.fixed)

    def __len__(self) -> int:
        return len(self.fixed)


def _domain(dist: optuna.distributions.BaseDistribution) -> list[Any]:
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, optuna.distributions.IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    raise TypeError(f"cannot enumerate {dist!r} (a float range)")


def enumerate_space(space: SearchSpace) -> Iterator[dict[str, Any]]:
    """Every effective configuration the space can produce (one per internal branch)."""
    dists = space.distributions()
    stack: list[dict[str, Any]] = [{}]
    while stack:
        fixed = stack.pop()
        try:
            yield space.effective(_Probe(fixed))
        except _Need as need:
            for v in reversed(_domain(dists[need.name])):
                stack.append({**fixed, need.name: v})


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

    BASELINE = "baseline"

    def __init__(self, spec: StudySpec, profile: str) -> None:
        self.spec = spec
        self.space = SearchSpace(spec)
        self.profile = load_profile(profile)
        self.configs: dict[str, Config] = {}
        for eff in enumerate_space(self.space):
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
        self._steps: dict[tuple[str, float], int] = {}

    def _expect(self, launch: LaunchConfig) -> Expectation:
        return expected_throughput(self.profile, launch.args, launch.env,
                                   concurrency=self.spec.benchmark.concurrency)

    def config(self, cid: str, launch: LaunchConfig | None = None) -> Config:
        if cid not in self.configs:  # not reachable from the space: compute it anyway
            assert launch is not None
            self.configs[cid] = Config(cid, {}, launch, self._expect(launch))
        return self.configs[cid]

    def true_tok_s(self, cid: str) -> float:
        return float(self.configs[cid].tok_s or 0.0)

    def measure(self, cid: str, rng: random.Random, runs: int | None = None) -> list[float]:
        """benchmark.runs per-request tok/s, the simulator's schedule x its noise
        (engine.NoiseSource.draw per measured request; the warm-up is noise-free and
        not counted). Concurrency 1, as both shipped studies use."""
        cfg = self.configs[cid].truth.config
        assert cfg is not None
        p, bench = self.profile, self.spec.benchmark
        batch = max(1, min(bench.concurrency, cfg.max_running))
        cycle = M.cycle_ms(p, cfg, batch)
        prefill = M.prefill_ms(p, cfg, batch)
        out = []
        for _ in range(bench.runs if runs is None else runs):
            tf = math.exp(rng.gauss(0.0, p.noise.cycle_sd))
            af = math.exp(rng.gauss(0.0, p.noise.accept_sd))
            if cfg.speculative:
                dist = M.accept_distribution(M.depth_acceptance(p, cfg, af))
                steps = M.verify_steps_for(dist, bench.max_tokens)
            else:
                steps = bench.max_tokens - 1
            out.append(bench.max_tokens / ((prefill + steps * cycle) * tf) * 1000.0)
        return out


# --------------------------------------------------------------------------- emulation
@dataclass
class Record:
    """One finished trial of an emulated sweep."""

    index: int  # 1-based among finished trials
    role: str
    cid: str
    effective: dict[str, Any]
    restart: bool
    skipped: bool
    failure: str | None
    value: float | None
    restarts: int  # cumulative restarts after this trial
    pick: str | None  # the configuration the tool would pick now
    pick_measured: float | None = None


@dataclass
class _Pool:
    runs: dict[str, list[float]] = field(default_factory=dict)
    best: str | None = None

    def add(self, cid: str, runs: list[float]) -> None:
        self.runs.setdefault(cid, []).extend(runs)
        if self.best is None or self.best == cid:
            self.best = max(self.runs, key=self.mean)
        elif self.mean(cid) > self.mean(self.best):
            self.best = cid

    def mean(self, cid: str) -> float:
        return statistics.fmean(self.runs[cid])


def emulate(spec: StudySpec, truth: GroundTruth, strategy: str, seed: int,
            max_trials: int | None = None, max_restarts: int | None = None,
            stop_within: float | None = None) -> list[Record]:
    """One emulated sweep; stops after max_trials finished trials, max_restarts restarts,
    the end of a grid, or (stop_within) once the pick is within that fraction of the
    optimum. Proposals skipped as predicted failures count neither as trials nor as
    restarts (as in the sweeper)."""
    rng = random.Random(f"{strategy}/{seed}")
    space = truth.space
    records: list[Record] = []
    pool = _Pool()
    # the sweeper's own failure memory (exact repeats, failing NCCL values, larger-than-
    # OOM); a grid never repeats a configuration, and the peers it stands for predict nothing
    memory = FailureMemory()
    current: str | None = None
    restarts = 0
    cap = max_trials or 4 * (max_restarts or 10**6)

    def done() -> bool:
        # like the sweeper's --trials: proposals skipped as known failures do not count
        counted = sum(1 for r in records if not r.skipped)
        if counted >= cap or len(records) >= 20 * cap or \
                (max_restarts is not None and restarts >= max_restarts):
            return True
        if stop_within is not None and pool.best is not None:
            return truth.true_tok_s(pool.best) >= (1 - stop_within) * truth.optimum
        return False

    def run_config(cid: str, role: str, eff: dict[str, Any]) -> tuple[str | None, float | None]:
        nonlocal current, restarts
        predicted = memory.predict(cid, eff) if strategy != GRID else None
        if predicted is not None:
            records.append(Record(len(records) + 1, role, cid, eff, False, True,
                                  predicted.kind, None, restarts, pool.best))
            return predicted.kind, None
        restart = current != cid
        restarts += restart
        conf = truth.configs[cid]
        memory.add(len(records) + 1, cid, eff, conf.truth.failure)
        if conf.truth.failure is not None:
            current = None
            records.append(Record(len(records) + 1, role, cid, eff, restart, False,
                                  conf.truth.failure, None, restarts, pool.best))
            return conf.truth.failure, None
        current = cid
        runs = truth.measure(cid, rng)
        pool.add(cid, runs)
        value = statistics.fmean(runs)
        records.append(Record(len(records) + 1, role, cid, eff, restart, False, None, value,
                              restarts, pool.best, pool.mean(pool.best or cid)))
        return None, value

    if strategy == GRID:
        first = [truth.baseline_cid] if spec.baseline else []
        for point in spec.start_from:
            eff = space.effective(space.internal_params(point))
            first.append(space.launch_config(eff).config_id())
        rest = [c for c in truth.space_cids if c not in first]
        rng.shuffle(rest)
        for cid in first + rest:
            if done():
                break
            run_config(cid, "grid", truth.configs[cid].effective)
        return records

    # The real loop: make_sampler, enqueue baseline + start_from, ask / tell.
    sampler = make_sampler("tpe" if strategy == TPE else "random", seed,
                           spec.sweep.n_startup_trials)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    if spec.baseline:
        study.enqueue_trial({}, user_attrs={"role": "baseline"})
    for point in spec.start_from:
        study.enqueue_trial(space.internal_params(point), user_attrs={"role": "start_from"},
                            skip_if_exists=True)
    while not done():
        trial = study.ask()
        role = str(trial.user_attrs.get("role", "sampler"))
        if role == "baseline":
            eff: dict[str, Any] = {}
            launch = space.baseline_config()
        else:
            eff = space.suggest(trial)
            launch = space.launch_config(eff)
        cid = launch.config_id()
        truth.config(cid, launch)
        failure, value = run_config(cid, role, eff)
        if failure is not None:
            trial.set_constraint("failed", 1.0)
            study.tell(trial, state=TrialState.PRUNED)
        else:
            trial.set_constraint("failed", 0.0)
            study.tell(trial, value)
    return records


def restarts_to(records: list[Record], truth: GroundTruth, tol: float,
                measured: bool = False) -> float:
    """Restarts spent when the pick first came within ``tol`` of the optimum (inf: never).
    ``measured``: when any configuration within ``tol`` was first measured instead (the
    search found it, whether or not the noisy means let the pick recognise it)."""
    for r in records:
        cid = r.cid if measured and r.value is not None else r.pick
        if cid is not None and truth.true_tok_s(cid) >= (1 - tol) * truth.optimum:
            return r.restarts
    return math.inf


def confirm_pick(records: list[Record], truth: GroundTruth, seed: int,
                 rounds: int = 2) -> tuple[str | None, int]:
    """sweeper/confirm.py's phase after ``records``: the top ``sweep.confirm_top``
    configurations (pooled means, baseline excluded) and the baseline re-measured,
    ``ceil(confirm_runs / rounds)`` runs per visit, one restart per visit; the fresh runs
    alone decide, and the baseline wins if nothing beats it. -> (winner, restarts)."""
    spec = truth.spec
    top = spec.sweep.confirm_top
    pool: dict[str, list[float]] = {}
    for r in records:
        if r.value is not None:
            pool.setdefault(r.cid, []).append(r.value)
    ranked = sorted((c for c in pool if c != truth.baseline_cid),
                    key=lambda c: statistics.fmean(pool[c]), reverse=True)[:top]
    if not top or not ranked:
        return (records[-1].pick if records else None), 0
    cands = ranked + ([truth.baseline_cid] if truth.baseline_cid in pool else [])
    rng = random.Random(f"confirm/{seed}")
    per_visit = max(1, math.ceil(spec.sweep.confirm_runs / rounds))
    fresh = {c: [] for c in cands}
    for _ in range(rounds):
        for c in cands:
            fresh[c].extend(truth.measure(c, rng, per_visit))
    winner = max(ranked, key=lambda c: statistics.fmean(fresh[c]))
    if truth.baseline_cid in fresh and \
            statistics.fmean(fresh[truth.baseline_cid]) > statistics.fmean(fresh[winner]):
        winner = truth.baseline_cid
    return winner, rounds * len(cands)


# --------------------------------------------------------------------------- report
def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _fmt(x: float, budget: int) -> str:
    if math.isinf(x) and budget >= 10**9:
        return "never"
    return f">{budget}" if x > budget else f"{x:.0f}"


def bench_study(key: str, n_seeds: int, strategies: tuple[str, ...]) -> None:
    make, profile, budget = STUDIES[key]
    t0 = time.monotonic()
    spec = make()
    truth = GroundTruth(spec, profile)
    valid = len(truth.space_cids)
    failing = sum(truth.configs[c].truth.failure is not None for c in truth.space_cids)
    base = truth.true_tok_s(truth.baseline_cid)
    near = {tol: sum(truth.true_tok_s(c) >= (1 - tol) * truth.optimum
                     for c in truth.space_cids) for tol in TOLERANCES}
    print(f"\n== {key}: study {spec.name}, simulated profile {profile} "
          f"({time.monotonic() - t0:.1f}s to enumerate)")
    print(f"   space: {valid} distinct valid configurations, {failing} of them fail "
          f"({failing / valid:.0%}); configurations within 1%/3% of the optimum: "
          f"{near[0.01]}/{near[0.03]}")
    print(f"   true optimum {truth.optimum:.1f} tok/s: {truth.best.effective or 'baseline'}")
    print(f"   baseline (no speculation) {base:.1f} tok/s; full grid = {valid + 1} restarts "
          f"(baseline + every configuration); benchmark {spec.benchmark.runs} runs x "
          f"{spec.benchmark.max_tokens} tokens; noise cycle_sd {truth.profile.noise.cycle_sd}, "
          f"accept_sd {truth.profile.noise.accept_sd}")
    print(f"   {n_seeds} seeds, restart budget {budget}")
    head = (f"   {'strategy':<14} {'1%: median':>10} {'p90':>5} {'miss':>5}   "
            f"{'3%: median':>10} {'p90':>5} {'miss':>5}   {'found 1%':>8} {'miss':>4}   "
            f"{'final gap':>9} "
            f"{'fail restarts':>13} {'skips':>5} {'time':>6}")
    print(head)
    for strategy in strategies:
        ts = time.monotonic()
        hit: dict[float, list[float]] = {tol: [] for tol in TOLERANCES}
        gaps, fails, skips, found, cgaps = [], [], [], [], []
        c_restarts = 0
        for seed in range(n_seeds):
            if strategy == GRID:  # runs to the 1% point (a full grid would be slow here)
                recs = emulate(spec, truth, strategy, seed, stop_within=min(TOLERANCES))
                within = [r for r in recs if r.restarts <= budget]
            else:
                recs = emulate(spec, truth, strategy, seed, max_restarts=budget)
                within = recs
            for tol in TOLERANCES:
                hit[tol].append(restarts_to(recs, truth, tol))
            found.append(restarts_to(recs, truth, min(TOLERANCES), measured=True))
            last = within[-1] if within else None
            if last is not None and last.pick is not None:
                gaps.append(truth.true_tok_s(last.pick) / truth.optimum - 1)
            winner, c_restarts = confirm_pick(within, truth, seed)
            if winner is not None:
                cgaps.append(truth.true_tok_s(winner) / truth.optimum - 1)
            fails.append(sum(r.failure is not None and not r.skipped for r in within))
            skips.append(sum(r.skipped for r in within))
        cells = []
        for tol in TOLERANCES:
            v = hit[tol]
            cells.append(f"{_fmt(statistics.median(v), budget):>10} "
                         f"{_fmt(_pct(v, 0.9), budget):>5} {sum(x > budget for x in v):>5}")
        print(f"   {strategy:<14} {cells[0]}   {cells[1]}   "
              f"{_fmt(statistics.median(found), budget):>8} {sum(x > budget for x in found):>4}   "
              f"{statistics.median(gaps):>+9.1%} {statistics.fmean(fails):>13.1f} "
              f"{statistics.fmean(skips):>5.1f} {time.monotonic() - ts:>5.0f}s")
        if spec.sweep.confirm_top:
            print(f"   {'':<14} + confirm phase (top {spec.sweep.confirm_top} + baseline, "
                  f"{spec.sweep.confirm_runs} fresh runs each, +{c_restarts} restarts): "
                  f"median gap {statistics.median(cgaps):+.1%}, within 1%: "
                  f"{sum(g >= -0.01 for g in cgaps)}/{len(cgaps)}, within 3%: "
                  f"{sum(g >= -0.03 for g in cgaps)}/{len(cgaps)} (without it: "
                  f"{sum(g >= -0.01 for g in gaps)}/{len(gaps)}, "
                  f"{sum(g >= -0.03 for g in gaps)}/{len(gaps)})")
        if strategy == GRID:
            nb = [f"to {tol:.0%}: median {_fmt(statistics.median(hit[tol]), 10**9)}, "
                  f"never {sum(math.isinf(x) for x in hit[tol])}/{n_seeds}" for tol in TOLERANCES]
            print(f"   {'':<14} grid without a budget (of {valid + 1} restarts): {'; '.join(nb)}")
    print("   1%/3%: restarts until the pick (best pooled mean) is truly within 1%/3% of the "
          "optimum;\n   miss: seeds not there within the budget; found 1%: restarts until a "
          "configuration truly within 1%\n   was measured at all (the pick may not recognise it "
          "through the noise); final gap: median true gap\n   of the pick at the budget; "
          "fail restarts: mean restarts spent on failing "
          "configurations within the budget; skips: known failures skipped;\n   confirm phase "
          "(when the study sets sweep.confirm_top): sweeper/confirm.py emulated at the budget")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20, help="seeds per strategy (0..N-1)")
    ap.add_argument("--only", choices=sorted(STUDIES), nargs="+", default=list(STUDIES))
    ap.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    args = ap.parse_args()
    t0 = time.monotonic()
    print("ALL FIGURES: SIMULATED SGLang server (sweeper.sim performance model, a test "
          "double), not real hardware.")
    for key in args.only:
        bench_study(key, args.seeds, tuple(args.strategies))
    print(f"\nruntime {time.monotonic() - t0:.0f}s")


if __name__ == "__main__":
    main()
