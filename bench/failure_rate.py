"""How often a demo sweep lands on configurations that fail (issue 6, item 1).

Target: "in a demo sweep, after the first 10 trials, at most 15% of trials land on
configurations that fail".

ALL FIGURES COME FROM THE SIMULATED SGLang SERVER (sweeper.sim, a test double driven by
the "demo" performance profile), never from real hardware.

Default mode: real sweeps with the real CLI, one per seed::

    sweeper optimize --study <copy of studies/demo.yaml> --trials 40 --seed S \\
        --storage sqlite:////tmp/.../demo-S.db

Each copy of the study keeps ``name: demo`` and gets its own free port and host workdir,
so two sweeps can run side by side (``--parallel 2``, the default; one sweep is ~2.5 min).
Then the trials are read back from the storage (optuna.load_study) and, per seed, for
trials 11-40 (the 11th to the 40th finished trial, baseline = 1st, start_from = 2nd):

* configuration failures: PRUNED trials with user attr "failure", split into restarts
  actually spent on failing configurations and skipped known failures (user attr
  "skipped_known_failure": the sweeper did not restart for them);
* the rate (failures / 30 trials) and the failure classes;
* the best configuration found (sweeper's own pick: the confirm phase's winner when the
  study sets sweep.confirm_top, as demo.yaml does, else pooled replicates) against the true
  optimum of the space: ground truth from ``sweeper.sim.expected_throughput`` of the
  trial's recorded launch args/env (env is redacted, but holds only NCCL_* here).

``--emulate`` does the same count on the in-process emulation of bench/search_efficiency.py
(real SearchSpace, real TPE sampler, simulator's ground truth x the simulator's noise
model, no servers), for many seeds in seconds.

    .venv/bin/python bench/failure_rate.py                     # 3 seeds, ~5-8 min on 2 cores
    .venv/bin/python bench/failure_rate.py --seeds 1 2 3 4     # choose the seeds
    .venv/bin/python bench/failure_rate.py --dir /tmp/fr       # keep the storages; re-running
                                                               # re-uses finished ones
    .venv/bin/python bench/failure_rate.py --emulate --n-seeds 50
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import sweeper.results.verdict as R  # noqa: E402
from sweeper.remote import free_port  # noqa: E402
from sweeper.results import attrs as A  # noqa: E402
from sweeper.sim import expected_throughput  # noqa: E402
from sweeper.study import load_study  # noqa: E402

TRIALS = 40
SKIP_FIRST = 10
TARGET = 0.15
DEFAULT_STUDY = ROOT / "studies" / "demo.yaml"

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass
class Row:
    """One finished trial, as both the real storage and the emulation describe it."""

    index: int  # 1-based position among finished trials
    failed: bool  # a configuration failure (PRUNED with a failure class)
    skipped: bool  # a known failure skipped without a restart
    kind: str | None
    algo: str | None  # env.NCCL_ALGO of the trial (None for the baseline)


@dataclass
class SeedSummary:
    seed: int
    window: int
    failures: int
    spent: int
    skipped: int
    restarts: int
    classes: Counter[str]
    collnet: int
    best_true: float | None
    best_measured: float | None
    optimum: float


def summarize(seed: int, rows: list[Row], optimum: float, best_true: float | None,
              best_measured: float | None) -> SeedSummary:
    # The window is by restarts, as --trials counts them: a proposal skipped as a known
    # failure (no restart) belongs to the window of the restart it came after.
    window, restart = [], 0
    for r in sorted(rows, key=lambda r: r.index):
        restart += not r.skipped
        if SKIP_FIRST < restart <= TRIALS:
            window.append(r)
    fails = [r for r in window if r.failed]
    skipped = sum(r.skipped for r in fails)
    return SeedSummary(
        seed=seed, window=len(window), failures=len(fails), spent=len(fails) - skipped,
        skipped=skipped, restarts=sum(not r.skipped for r in window),
        classes=Counter(str(r.kind) for r in fails),
        collnet=sum(r.algo == "CollNetDirect" for r in window),
        best_true=best_true, best_measured=best_measured, optimum=optimum)


# --------------------------------------------------------------------------- real sweeps
def sim_profile(launcher: str) -> str:
    argv = shlex.split(launcher)
    return argv[argv.index("--sim-profile") + 1] if "--sim-profile" in argv else "demo"


def finished_trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    try:
        study = optuna.load_study(study_name=name, storage=url)
    except KeyError:
        return []
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    # the confirm phase's re-measurements are not sweep trials
    return sorted((t for t in trials if not t.user_attrs.get("confirm")),
                  key=lambda t: t.number)


def run_sweeps(study_path: Path, seeds: list[int], workdir: Path, parallel: int) -> dict[int, str]:
    """One real `sweeper optimize` per seed; storages that already hold TRIALS finished
    trials are reused. Returns seed -> storage URL."""
    raw = yaml.safe_load(study_path.read_text())
    name = raw["name"]
    urls = {s: f"sqlite:///{workdir / f'{name}-{s}.db'}" for s in seeds}
    todo = [s for s in seeds
            if sum(not t.user_attrs.get(A.SKIPPED) for t in finished_trials(urls[s], name))
            < TRIALS]
    for s in seeds:
        if s not in todo:
            print(f"seed {s}: reusing {urls[s]}")
    for i in range(0, len(todo), parallel):
        batch = todo[i:i + parallel]
        procs = []
        t0 = time.monotonic()
        for s in batch:
            data = yaml.safe_load(study_path.read_text())
            data["server"]["port"] = free_port()
            data["hosts"][0]["workdir"] = str(workdir / f"host-{s}")
            copy = workdir / f"seed-{s}" / study_path.name
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(yaml.safe_dump(data, sort_keys=False))
            log = (workdir / f"sweep-{s}.log").open("w")
            cmd = [sys.executable, "-m", "sweeper", "optimize", "--study", str(copy),
                   "--trials", str(TRIALS), "--seed", str(s), "--storage", urls[s]]
            print(f"seed {s}: {shlex.join(cmd)}  (port {data['server']['port']})", flush=True)
            procs.append((s, subprocess.Popen(cmd, cwd=ROOT, stdout=log,
                                              stderr=subprocess.STDOUT), log))
        for s, proc, log in procs:
            rc = proc.wait()
            log.close()
            print(f"seed {s}: exit {rc} after {time.monotonic() - t0:.0f}s "
                  f"(log {workdir / f'sweep-{s}.log'})", flush=True)
    return urls


def analyze_real(study_path: Path, urls: dict[int, str]) -> list[SeedSummary]:
    from search_efficiency import GroundTruth

    spec = load_study(str(study_path))
    profile = sim_profile(spec.server.launcher)
    truth = GroundTruth(spec, profile)
    out = []
    for seed, url in urls.items():
        trials = finished_trials(url, spec.name)
        rows = []
        for i, t in enumerate(trials, 1):
            eff = t.user_attrs.get(A.EFFECTIVE) or {}
            rows.append(Row(i, t.state == TrialState.PRUNED and bool(t.user_attrs.get(A.FAILURE)),
                            bool(t.user_attrs.get(A.SKIPPED)), t.user_attrs.get(A.FAILURE),
                            eff.get("env.NCCL_ALGO")))
        study = optuna.load_study(study_name=spec.name, storage=url)
        best = R.best_result(study, spec.benchmark.objective, trials)
        best_true = best_meas = None
        if best is not None:
            launch = best.launch
            e = expected_throughput(profile, launch.get("args", {}), launch.get("env", {}))
            best_true, best_meas = e.tok_s, best.stats.mean
        if len(trials) < TRIALS:
            print(f"[warning] seed {seed}: only {len(trials)} finished trials in {url}")
        out.append(summarize(seed, rows, truth.optimum, best_true, best_meas))
    return out


# --------------------------------------------------------------------------- emulation
def analyze_emulated(study_path: Path, profile: str | None, seeds: list[int],
                     strategy: str = "sweeper (TPE)") -> list[SeedSummary]:
    from search_efficiency import GroundTruth, confirm_pick, emulate

    spec = load_study(str(study_path))
    truth = GroundTruth(spec, profile or sim_profile(spec.server.launcher))
    out = []
    for seed in seeds:
        recs = emulate(spec, truth, strategy, seed, max_trials=TRIALS)
        rows = [Row(r.index, r.failure is not None, r.skipped, r.failure,
                    r.effective.get("env.NCCL_ALGO") if r.effective else None) for r in recs]
        # the real CLI ends with the confirm phase when the study sets sweep.confirm_top
        pick, _ = confirm_pick(recs, truth, seed)
        out.append(summarize(seed, rows, truth.optimum,
                             truth.true_tok_s(pick) if pick else None,
                             recs[-1].pick_measured if recs else None))
    return out


# --------------------------------------------------------------------------- report
def report(summaries: list[SeedSummary], detail: bool) -> None:
    if detail:
        print(f"\n{'seed':>5} {'fail/trials':>11} {'rate':>6} {'spent':>5} {'skipped':>7} "
              f"{'fail/restarts':>13} {'CollNet':>7}  {'best found (true)':>17} "
              f"{'optimum':>7}  classes")
        for s in summaries:
            best = (f"{s.best_true:.1f} ({s.best_true / s.optimum - 1:+.1%})"
                    if s.best_true else "-")
            rate = s.failures / max(s.window, 1)
            print(f"{s.seed:>5} {s.failures:>5}/{s.window:<5} {rate:>6.1%} "
                  f"{s.spent:>5} {s.skipped:>7} {s.spent:>6}/{s.restarts:<6} {s.collnet:>7}  "
                  f"{best:>17} {s.optimum:>7.1f}  "
                  f"{', '.join(f'{k} {v}' for k, v in sorted(s.classes.items())) or '-'}")
    n_fail = sum(s.failures for s in summaries)
    n_win = sum(s.window for s in summaries)
    n_spent = sum(s.spent for s in summaries)
    n_restarts = sum(s.restarts for s in summaries)
    classes = sum((s.classes for s in summaries), Counter())
    rate = n_spent / max(n_restarts, 1)
    print(f"\naggregate over {len(summaries)} seed(s), restarts {SKIP_FIRST + 1}-{TRIALS}:")
    print(f"  restarts spent on configurations that fail: {n_spent}/{n_restarts} = {rate:.1%} "
          f"({'WITHIN' if rate <= TARGET else 'ABOVE'} the {TARGET:.0%} target)")
    print(f"  proposals that were known failures, skipped without a restart: "
          f"{n_fail - n_spent} (all proposals landing on failing configurations: "
          f"{n_fail}/{n_win} = {n_fail / max(n_win, 1):.1%})")
    rates = [s.spent / max(s.restarts, 1) for s in summaries]
    print(f"  per-seed rate: median {statistics.median(rates):.1%}, max {max(rates):.1%}; "
          f"seeds above target: {sum(r > TARGET for r in rates)}/{len(rates)}")
    print(f"  failure classes: {dict(sorted(classes.items())) or '-'}")
    print(f"  trials with NCCL_ALGO=CollNetDirect: {sum(s.collnet for s in summaries)}")
    gaps = [s.best_true / s.optimum - 1 for s in summaries if s.best_true]
    if gaps:
        print(f"  best found vs true optimum ({summaries[0].optimum:.1f} tok/s): median "
              f"{statistics.median(gaps):+.1%}, worst {min(gaps):+.1%}; within 1%: "
              f"{sum(g >= -0.01 for g in gaps)}/{len(gaps)}, within 3%: "
              f"{sum(g >= -0.03 for g in gaps)}/{len(gaps)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--study", type=Path, default=DEFAULT_STUDY)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--parallel", type=int, default=2, help="real sweeps at a time")
    ap.add_argument("--dir", type=Path, default=None, help="keep storages/logs here")
    ap.add_argument("--emulate", action="store_true", help="in-process emulation, no servers")
    ap.add_argument("--n-seeds", type=int, default=30, help="with --emulate: seeds 0..N-1")
    ap.add_argument("--profile", default=None, help="with --emulate: simulator profile")
    ap.add_argument("--random", action="store_true",
                    help="with --emulate: RandomSampler instead of the study's TPE (reference)")
    args = ap.parse_args()
    t0 = time.monotonic()
    print("ALL FIGURES: SIMULATED SGLang server (sweeper.sim, a test double), not real hardware.")
    if args.emulate:
        seeds = list(range(args.n_seeds))
        strategy = "random" if args.random else "sweeper (TPE)"
        print(f"in-process emulation of {args.study}: {strategy}, {TRIALS} trials, "
              f"{len(seeds)} seeds (no servers)")
        summaries = analyze_emulated(args.study, args.profile, seeds, strategy)
        report(summaries, detail=len(seeds) <= 12)
    else:
        workdir = args.dir or Path(tempfile.mkdtemp(prefix="failure-rate-"))
        workdir.mkdir(parents=True, exist_ok=True)
        urls = run_sweeps(args.study, args.seeds, workdir, args.parallel)
        summaries = analyze_real(args.study, urls)
        report(summaries, detail=True)
    print(f"\nruntime {time.monotonic() - t0:.0f}s")


if __name__ == "__main__":
    main()
