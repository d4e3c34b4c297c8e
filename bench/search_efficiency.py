"""Search efficiency: how close each strategy's pick comes to the true optimum within a
restart budget, on the simulator's landscapes, side by side.

ALL FIGURES COME FROM THE SIMULATED SGLang SERVER's performance model (sweeper.sim, a test
double). They say how well the search works on the simulator's landscapes, never how fast
any real GPU is.

In-process, no servers: the trial loop ``sweeper optimize`` runs (sweeper/run/workers.py)
and its confirm phase, measuring through bench/emulation.py's emulated measurer (ground
truth from ``expected_throughput``; the simulator's noise; a simulated clock), so the same
failure handling (skips of predicted failures, repeats without a restart) for every
strategy. The budget counts every restart: the sweep's and the confirm phase's (the
studies' confirm_top 3 + baseline, 2 rounds = 8 of the 40).

Strategies: default (the study's ``sweep.sampler``), every sampler registered in
sweeper/search/sampler.py (tpe, random, and any added later: ``--strategy model``), gp
(Optuna's GPSampler; needs torch: ``pip install -e '.[bench]'``, left out with a note when
missing), grid (baseline + start_from, then every configuration in a random order).

Per strategy, over the seeds: how many picks are truly within 1% / 2% of the optimum, how
many sweeps measured a configuration within 1% at all, the median and worst true gap,
the share of restarts after the first 10 spent on configurations that fail, the share of
proposals after the first 10 restarts landing on failing configurations (skipped ones
counted), and every skip checked against the ground truth: how many skipped configurations
would have served, and how many of them were in the true top 1%.

Real-node conditions (issue 23): ``--start-sd`` the per-start speed sd in percent (0, 1,
2, or ``profile``: the profile's noise.start_sd), ``--prompts on|off`` prompt-dependent
acceptance (the truth is then the mean over the study's prompt set), ``--restart-min`` the
modelled minutes of a restart; each combination is a row. Per strategy, a second line:
median node-hours to the final pick (the simulated clock when it was first measured) and
for the whole sweep (the confirm phase's included; the stop rule may end it early), how
many sweeps the stop rule ended, and calibration: the mean "How sure" of the picks against
the share of picks truly within 1% of the truly best configuration the sweep measured (the
event it states; within 1% of the optimum beside it). ``--per-seed``: one line per seed;
``--first-seed``: where the seeds start; ``--trace``: each sweep's proposals in order, with
their true gaps (where a sweep went wrong: the region it never reached, a lucky start).

    .venv/bin/python bench/search_efficiency.py                   # demo + kimi, 20 seeds
    .venv/bin/python bench/search_efficiency.py --profile bench/landscapes/wide-tree-h200.yaml
    .venv/bin/python bench/search_efficiency.py --strategy tpe model --seeds 5 --budget 60
    .venv/bin/python bench/search_efficiency.py --profile kimi --strategy default \
        --start-sd 0 1 2 profile --prompts on off --restart-min 3 8 15
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulation import (  # bench/, the script's own folder
    GP,
    SKIP_FIRST,
    GroundTruth,
    Honesty,
    Sweep,
    emulate,
    gp_missing,
    honesty,
    strategies_available,
)

from sweeper.results.labels import short_params
from sweeper.run.confirm import confirm_plan
from sweeper.search.space import SearchSpace
from sweeper.study import StudySpec, load_study, parse_study

ROOT = Path(__file__).resolve().parent.parent

BUILTIN = ("demo", "kimi")
LANDSCAPES = ROOT / "bench" / "landscapes"
DEFAULT_STRATEGIES = ("default", "tpe", "gp", "random", "grid")


# --------------------------------------------------------------------------- studies
def _with_profile(path: Path, profile: str, local: bool) -> StudySpec:
    import yaml

    raw = yaml.safe_load(path.read_text())
    if local:
        raw["hosts"] = [{"ssh": "local"}]
    raw["server"]["launcher"] = f"{{python}} -m sweeper.sim --sim-profile {profile}"
    return parse_study(raw, path)


def study_for(profile: str) -> tuple[str, StudySpec, str]:
    """(label, study, simulator profile): demo, kimi (studies/eagle3-kimi.yaml with the
    simulated server) or a landscape (a file, or a name in bench/landscapes/) on the demo
    study's space (the landscapes are 4-GPU machines made for it)."""
    if profile == "demo":
        return "demo", load_study(str(ROOT / "studies" / "demo.yaml")), "demo"
    if profile == "kimi":
        return "kimi", _with_profile(ROOT / "studies" / "eagle3-kimi.yaml",
                                     "kimi-k2.5-8xh200", True), "kimi-k2.5-8xh200"
    path = Path(profile)
    if not path.exists():
        path = LANDSCAPES / f"{profile}.yaml"
    if not path.exists():
        sys.exit(f"--profile {profile}: neither demo, kimi, a file nor a name in {LANDSCAPES}")
    return path.stem, _with_profile(ROOT / "studies" / "demo.yaml", str(path), False), str(path)


def demo_study() -> StudySpec:
    return study_for("demo")[1]


def kimi_study() -> StudySpec:
    return study_for("kimi")[1]


def enumerate_space(space: SearchSpace) -> Iterator[dict[str, Any]]:
    """Every effective configuration of ``space`` (SearchSpace.configurations)."""
    for _, eff in space.configurations():
        yield eff


# --------------------------------------------------------------------------- one seed
@dataclass
class SeedResult:
    gap: float  # the final pick's true gap (0 = the optimum, -0.02 = 2% slower)
    found: bool  # a configuration truly within 1% was measured at all
    honesty: Honesty
    restarts: int
    bench_runs: int  # benchmark runs in the sweep (measured longer ones' included)
    pick_h: float = 0.0  # simulated node-hours when the final pick was first measured
    sweep_h: float = 0.0  # simulated node-hours of the whole sweep, the confirm included
    sure: float | None = None  # the verdict's "How sure" of the pick
    stopped: bool = False  # the stop rule ended the sweep before its budget
    # the pick truly within 1% of the truly best configuration the sweep measured: the
    # event "How sure" states a probability of (calibration), exploration aside
    near_measured: bool = False
    trace: tuple[str, ...] = ()  # --trace: each proposal of the sweep, in order


@dataclass(frozen=True)
class Row:
    """The real-node conditions of one row of figures."""

    start_sd: float | None  # per-start speed sd (None: the profile's noise.start_sd)
    prompts: bool  # prompt-dependent acceptance
    restart_min: float  # modelled minutes of a restart

    def describe(self, truth: GroundTruth) -> str:
        sd = truth.profile.noise.start_sd if self.start_sd is None else self.start_sd
        return (f"per-start sd {sd:.1%}{' (profile)' if self.start_sd is None else ''}, "
                f"prompt-dependent acceptance {'on' if truth.prompt_effects else 'off'}, "
                f"restart {self.restart_min:g} min")


_TRUTH: GroundTruth | None = None  # set before the worker processes fork
FIRST_SEED = 0  # --first-seed: seeds FIRST_SEED .. FIRST_SEED + --seeds - 1
PER_SEED = False  # --per-seed: one line per seed (its gap, "How sure", node-hours)
TRACE = False  # --trace: and each proposal of the sweep with its true gap


def _one(task: tuple[str, int, int, Row]) -> SeedResult:
    strategy, seed, budget, row = task
    truth = _TRUTH
    assert truth is not None
    sweep = emulate(truth, strategy, seed, budget, start_sd=row.start_sd,
                    restart_s=row.restart_min * 60.0)
    gap = truth.gap(sweep.final) if sweep.final is not None else -1.0
    found = any(r.outcome == "measured" and truth.gap(r.cid) >= -0.01 for r in sweep.records)
    best_measured = max((truth.gap(r.cid) for r in sweep.records if r.outcome == "measured"),
                        default=gap)
    near = sweep.final is not None and (1 + gap) >= (1 + best_measured) * (1 - 0.01)
    return SeedResult(gap, found, honesty(sweep, truth), sweep.restarts + sweep.confirm_restarts,
                      sweep.bench_runs, sweep.final_clock / 3600, sweep.clock / 3600, sweep.sure,
                      sweep.stopped is not None, near, _trace(sweep, truth) if TRACE else ())


def _trace(sweep: Sweep, truth: GroundTruth) -> tuple[str, ...]:
    """Each proposal as the study stored it, with its true gap: where a sweep went (the
    region it found, the knob it never tried, a lucky start it believed)."""
    out = []
    for r in sweep.records:
        value = "-" if r.value is None else f"{r.value:.1f}"
        gap = "fails" if r.truly_fails else f"{truth.gap(r.cid):+.2%}"
        out.append(f"{r.restarts:>3} {r.outcome:<8} {r.role:<9} true {gap:>7} measured "
                   f"{value:>7}  {short_params(r.effective) or 'baseline'}")
    pick = "-" if sweep.final is None else short_params(truth.configs[sweep.final].effective)
    out.append(f"    pick (after the confirm phase): {pick or 'baseline'}")
    return tuple(out)


# --------------------------------------------------------------------------- report
def _share(a: int, b: int) -> str:
    return f"{a}/{b} {a / b:.0%}" if b else "-"


def bench_profile(profile: str, strategies: list[str], seeds: int, budget: int,
                  jobs: int, gp_seeds: int, rows: list[Row] | None = None
                  ) -> dict[str, list[SeedResult]]:
    global _TRUTH
    rows = rows or [Row(None, True, 8.0)]
    label, spec, sim_profile = study_for(profile)
    out: dict[str, list[SeedResult]] = {}
    for prompts in dict.fromkeys(r.prompts for r in rows):
        t0 = time.monotonic()
        truth = _TRUTH = GroundTruth(spec, sim_profile, prompt_effects=prompts)
        _header(label, spec, sim_profile, truth, seeds, budget, time.monotonic() - t0)
        for row in (r for r in rows if r.prompts == prompts):
            print(f"\n   -- {row.describe(truth)}")
            out.update(_row(truth, row, strategies, seeds, budget, jobs, gp_seeds))
    return out


def _header(label: str, spec: StudySpec, sim_profile: str, truth: GroundTruth, seeds: int,
            budget: int, took: float) -> None:
    n = len(truth.space_cids)
    failing = sum(truth.fails(c) for c in truth.space_cids)
    near = {tol: sum(truth.gap(c) >= -tol for c in truth.space_cids
                     if truth.plain_tok_s(c) >= truth.optimum * (1 - truth.CANDIDATE_MARGIN))
            for tol in (0.01, 0.02)}
    print(f"\n== {label}: study {spec.name}, simulated profile {sim_profile} "
          f"({took:.1f}s to enumerate)")
    print(f"   space: {n} configurations, {failing} fail ({failing / n:.0%}); within 1%/2% of "
          f"the optimum: {near[0.01]}/{near[0.02]}")
    print(f"   true optimum {truth.optimum:.1f} tok/s"
          f"{' (mean over the study prompt set)' if truth.prompt_effects else ''}: "
          f"{truth.best.effective or 'baseline'}; "
          f"baseline {truth.true_tok_s(truth.baseline_cid):.1f}")
    full, check = confirm_plan(spec, "tpe"), confirm_plan(spec, "model")
    confirm = (f"inside the budget, the confirm phase the CLI runs: top {full.top} + baseline "
               f"({full.restarts} restarts), or with the model sampler top {check.top} + "
               f"baseline ({check.restarts})" if full.top else "no confirm phase")
    print(f"   {seeds} seeds, {budget} restarts per sweep at most ({confirm}); benchmark "
          f"{spec.benchmark.runs} runs x {spec.benchmark.max_tokens} tokens; noise cycle_sd "
          f"{truth.profile.noise.cycle_sd}, accept_sd {truth.profile.noise.accept_sd}; "
          f"stop_when_sure {spec.sweep.stop_when_sure:g}")


def _row(truth: GroundTruth, row: Row, strategies: list[str], seeds: int, budget: int,
         jobs: int, gp_seeds: int) -> dict[str, list[SeedResult]]:
    print(f"   {'strategy':<10} {'<=1%':>5} {'<=2%':>5} {'found1%':>7} {'median gap':>10} "
          f"{'worst':>7}  {'fail restarts>10':>16} {'fail proposals>10':>17}  "
          f"{'skips':>5} {'would serve':>11} {'top1%':>5} {'runs':>6} {'time':>5}", flush=True)
    out: dict[str, list[SeedResult]] = {}
    ctx = multiprocessing.get_context("fork")
    for strategy in strategies:
        ts = time.monotonic()
        n_seeds = min(seeds, gp_seeds) if strategy == GP else seeds
        tasks = [(strategy, s, budget, row) for s in range(FIRST_SEED, FIRST_SEED + n_seeds)]
        if jobs > 1:
            with ctx.Pool(jobs) as pool:
                results = pool.map(_one, tasks, chunksize=1)
        else:
            results = [_one(t) for t in tasks]
        out[strategy] = results
        if PER_SEED:
            for (_, s, _, _), r in zip(tasks, results, strict=True):
                sure = "-" if r.sure is None else f"{r.sure:.2f}"
                print(f"   {'':<10} seed {s}: gap {r.gap:+.1%}, within 1% of the best measured "
                      f"{'yes' if r.near_measured else 'no'}, found1% "
                      f"{'yes' if r.found else 'no'}, How sure {sure}, node-hours to the pick "
                      f"{r.pick_h:.2f}, whole {r.sweep_h:.2f}{', stopped' if r.stopped else ''}",
                      flush=True)
                for line in r.trace:
                    print(f"   {'':<10}   {line}", flush=True)
        gaps = [r.gap for r in results]
        h = Honesty()
        for r in results:
            h = h.add(r.honesty)
        print(f"   {strategy:<10} {sum(g >= -0.01 for g in gaps):>5} "
              f"{sum(g >= -0.02 for g in gaps):>5} {sum(r.found for r in results):>7} "
              f"{statistics.median(gaps):>+10.1%} {min(gaps):>+7.1%}  "
              f"{_share(h.failing_restarts_after, h.restarts_after):>16} "
              f"{_share(h.failing_proposals_after, h.proposals_after):>17}  "
              f"{h.skips:>5} {_share(h.skips_serving, h.skips):>11} {h.skips_top1:>5} "
              f"{statistics.fmean(r.bench_runs for r in results):>6.0f} "
              f"{time.monotonic() - ts:>4.0f}s"
              + (f"  ({n_seeds} seeds)" if n_seeds != seeds else ""), flush=True)
        sures = [r.sure for r in results if r.sure is not None]
        within = sum(g >= -0.01 for g in gaps) / len(gaps)
        near = sum(r.near_measured for r in results) / len(results)
        mean_sure = statistics.fmean(sures) if sures else float("nan")
        print(f"   {'':<10} node-hours (simulated) median to the pick "
              f"{statistics.median(r.pick_h for r in results):.2f}, whole sweep "
              f"{statistics.median(r.sweep_h for r in results):.2f} (max "
              f"{max(r.sweep_h for r in results):.2f}); stopped early "
              f"{sum(r.stopped for r in results)}/{len(results)}; calibration: mean How sure "
              f"{mean_sure:.0%} vs picks truly within 1% of the best measured {near:.0%} "
              f"({(mean_sure - near) * 100:+.0f} points; of the optimum {within:.0%})",
              flush=True)
    return out


LEGEND = f"""
   <=1% / <=2%: seeds whose final pick (after the confirm phase) is truly within 1% / 2% of
   the optimum; found1%: seeds that measured a configuration truly within 1% at all (the
   pick may miss it through the noise); median/worst gap: the pick's true gap;
   fail restarts>{SKIP_FIRST}: restarts after the first {SKIP_FIRST} spent on configurations
   that fail; fail proposals>{SKIP_FIRST}: proposals after the first {SKIP_FIRST} restarts
   landing on failing configurations, skipped ones counted; skips: proposals skipped as
   predicted failures; would serve: skipped although the ground truth says the
   configuration serves (target 0 of the top 1%, under 5% overall); top1%: of those, within
   1% of the optimum; runs: benchmark runs per sweep (mean over seeds; a configuration
   close to the best is measured longer on the same start, benchmark.max_runs).
   node-hours (simulated): the emulation's clock, modelled restart minutes and run seconds
   (max_tokens / tok/s), to the moment the final pick was first measured and for the whole
   sweep with its confirm phase; stopped early: sweeps the stop rule ended before the
   budget (sweep.stop_when_sure); calibration: the mean of the picks' "How sure" (the
   verdict's probability of being within 1% of the best measured) against the share of
   picks truly within 1% of the truly best configuration the sweep measured, the event it
   states (target: within 10 points); the share within 1% of the optimum beside it (what
   exploration missed too)."""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", nargs="+", default=list(BUILTIN),
                    help="demo, kimi, a bench/landscapes/ name or a profile YAML file")
    ap.add_argument("--strategy", nargs="+", default=list(DEFAULT_STRATEGIES),
                    help=f"any of {', '.join(strategies_available())}")
    ap.add_argument("--seeds", type=int, default=20, help="N seeds per strategy")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="the first seed (seeds FIRST .. FIRST + N - 1)")
    ap.add_argument("--per-seed", action="store_true", help="one line per seed")
    ap.add_argument("--trace", action="store_true",
                    help="with --per-seed: each proposal of each sweep with its true gap")
    ap.add_argument("--budget", type=int, default=40,
                    help="restarts per sweep, the confirm phase's included")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--start-sd", nargs="+", default=["profile"],
                    help="per-start speed sd in percent (0, 1, 2...) or profile")
    ap.add_argument("--prompts", nargs="+", default=["on"], choices=["on", "off"],
                    help="prompt-dependent acceptance (the profile's categories, prompt_sd)")
    ap.add_argument("--restart-min", nargs="+", type=float, default=[8.0],
                    help="modelled minutes of a server restart (3, 8, 15)")
    ap.add_argument("--gp-seeds", type=int, default=4,
                    help="seeds for gp (~25-50 s per sweep on one core: all 20 seeds take 10+ min)")
    args = ap.parse_args(argv)
    global FIRST_SEED, PER_SEED, TRACE
    FIRST_SEED, PER_SEED, TRACE = args.first_seed, args.per_seed or args.trace, args.trace
    strategies: list[Any] = []
    for s in args.strategy:
        if s not in strategies_available():
            ap.error(f"--strategy {s}: use one of {', '.join(strategies_available())}")
        if s == GP and gp_missing():
            print(f"[note] gp left out: {gp_missing()}")
            continue
        strategies.append(s)
    try:
        sds = [None if v == "profile" else float(v) / 100 for v in args.start_sd]
    except ValueError:
        ap.error(f"--start-sd {' '.join(args.start_sd)}: percent numbers or profile")
    rows = [Row(sd, p == "on", m)
            for p, sd, m in itertools.product(args.prompts, sds, args.restart_min)]
    t0 = time.monotonic()
    print("ALL FIGURES: SIMULATED SGLang server (sweeper.sim performance model, a test "
          "double), not real hardware.")
    for profile in args.profile:
        bench_profile(profile, strategies, args.seeds, args.budget, args.jobs, args.gp_seeds,
                      rows)
    print(LEGEND)
    print(f"\nruntime {time.monotonic() - t0:.0f}s")


if __name__ == "__main__":
    main()
