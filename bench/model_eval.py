"""The model sampler (``sweep.sampler: model``) against TPE, on the simulator's landscapes,
with the whole budget counted: every trial of the sweep (racing replicates included) and
the confirm phase's visits are restarts.

ALL FIGURES COME FROM THE SIMULATED SGLang SERVER's performance model (sweeper.sim, a test
double): ground truth and noise from bench/search_efficiency.py's GroundTruth. They say how
well the search works on simulated landscapes, not how fast any real GPU is.

The emulated sweep is sweeper/run/sweep.py's loop in-process: baseline and start_from
enqueued, the real sampler (make_sampler with the real SearchSpace), the real failure
memory (a predicted failure is skipped: no restart, no trial), an accidental repeat told
the earlier mean without a restart (as the sweep does), each trial told with the
user attributes the Recorder writes (config_id, effective, runs, accept length, failure,
skipped), racing replicates marked as the sweep marks them. Each trial counts as one
restart, even a replicate of the configuration still serving (conservative).

End of a sweep, per ``--confirm``:
* ``check`` (default): the lossless check of run/confirm.py at its smallest, the leader
  and the baseline once each (2 restarts; the simulator is lossless, so it never changes
  the pick): the pick is the best pooled configuration (results/verdict.py);
* ``full``: run/confirm.py's phase as the study sets it (top K + baseline, 2 rounds):
  the winner on the fresh runs alone.

    .venv/bin/python bench/model_eval.py --seeds 20 --only kimi demo
    .venv/bin/python bench/model_eval.py --seeds 10 --only bench/landscapes/wide-tree-h200.yaml
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from search_efficiency import GroundTruth, confirm_pick, demo_study, kimi_study  # noqa: E402

from sweeper.measure.stats import p_within  # noqa: E402
from sweeper.results import attrs as A  # noqa: E402
from sweeper.search.failures import FailureMemory  # noqa: E402
from sweeper.search.sampler import make_sampler  # noqa: E402
from sweeper.sim import model as M  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)

BUDGET = 40


def measure(truth: GroundTruth, cid: str, rng: random.Random) -> tuple[list[float], float | None]:
    """benchmark.runs tok/s (as GroundTruth.measure draws them) and the mean accept length
    the server's counters would report over those runs."""
    cfg = truth.configs[cid].truth.config
    assert cfg is not None
    p, bench = truth.profile, truth.spec.benchmark
    batch = max(1, min(bench.concurrency, cfg.max_running))
    cycle, prefill = M.cycle_ms(p, cfg, batch), M.prefill_ms(p, cfg, batch)
    runs, accepts = [], []
    for _ in range(bench.runs):
        tf = math.exp(rng.gauss(0.0, p.noise.cycle_sd))
        af = math.exp(rng.gauss(0.0, p.noise.accept_sd))
        if cfg.speculative:
            q = M.depth_acceptance(p, cfg, af)
            steps = M.verify_steps_for(M.accept_distribution(q), bench.max_tokens)
            accepts.append((bench.max_tokens - 1) / steps)
        else:
            steps = bench.max_tokens - 1
        runs.append(bench.max_tokens / ((prefill + steps * cycle) * tf) * 1000.0)
    return runs, (statistics.fmean(accepts) if accepts else None)


def sweep(truth: GroundTruth, strategy: str, seed: int, trials: int) -> dict[str, Any]:
    spec, space = truth.spec, truth.space
    rng = random.Random(f"{strategy}/{seed}")
    sampler = make_sampler(strategy, seed, spec.sweep.n_startup_trials, space=space)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.set_user_attr(A.BUDGET, {"start": 0, "target": trials, "trials": trials})
    if spec.baseline:
        study.enqueue_trial({}, user_attrs={A.ROLE: A.BASELINE})
    for point in spec.start_from:
        study.enqueue_trial(space.internal_params(point), user_attrs={A.ROLE: A.START_FROM},
                            skip_if_exists=True)
    memory = FailureMemory()
    done = skips = fails = late_fails = replicates = repeats = repeats_in_a_row = 0
    pool: dict[str, list[float]] = {}
    while done < trials and skips < 20 * trials:
        trial = study.ask()
        role = str(trial.user_attrs.get(A.ROLE, A.SAMPLER))
        if role == A.BASELINE:
            eff: dict[str, Any] = {}
            launch = space.baseline_config()
        else:
            eff = space.suggest(trial)
            launch = space.launch_config(eff)
        cid = launch.config_id()
        truth.config(cid, launch)
        trial.set_user_attr(A.CONFIG_ID, cid)
        trial.set_user_attr(A.EFFECTIVE, eff)
        deliberate = getattr(sampler, "deliberate", None)
        note = deliberate(trial.number) if deliberate and role == A.SAMPLER else None
        if note:
            trial.set_user_attr(A.REPLICATE, note)
            replicates += 1
        if role == A.SAMPLER and not note and cid in pool and repeats_in_a_row < 5:
            # run/sweep.py: an accidental repeat is told the earlier mean, no restart
            repeats += 1
            repeats_in_a_row += 1
            trial.set_user_attr(A.REPEAT_OF, [0])
            trial.set_constraint("failed", 0.0)
            study.tell(trial, statistics.fmean(pool[cid]))
            continue
        repeats_in_a_row = 0
        predicted = memory.predict(cid, eff)
        if predicted is not None:
            skips += 1
            trial.set_user_attr(A.SKIPPED, True)
            trial.set_user_attr(A.FAILURE, predicted.kind)
            trial.set_constraint("failed", 1.0)
            study.tell(trial, state=TrialState.PRUNED)
            continue
        done += 1
        failure = truth.configs[cid].truth.failure
        memory.add(trial.number, cid, eff, failure)
        if failure is not None:
            fails += 1
            late_fails += done > 10
            trial.set_user_attr(A.FAILURE, failure)
            trial.set_constraint("failed", 1.0)
            study.tell(trial, state=TrialState.PRUNED)
            continue
        runs, accept = measure(truth, cid, rng)
        pool.setdefault(cid, []).extend(runs)
        trial.set_user_attr(A.RUNS, runs)
        if accept is not None:
            trial.set_user_attr(A.ACCEPT, accept)
        trial.set_constraint("failed", 0.0)
        study.tell(trial, statistics.fmean(runs))
    return {"study": study, "pool": pool, "fails": fails, "late_fails": late_fails,
            "skips": skips, "replicates": replicates, "trials": done, "repeats": repeats}


def records_for_confirm(pool: dict[str, list[float]]) -> list[Any]:
    """confirm_pick's input: one record per configuration with its pooled mean."""
    class R:
        def __init__(self, cid: str, value: float) -> None:
            self.cid, self.value, self.pick = cid, value, None
    return [R(c, statistics.fmean(r)) for c, r in pool.items()]


def bench(name: str, truth: GroundTruth, strategies: list[str], seeds: int,
          confirm: str) -> None:
    opt = truth.optimum
    print(f"\n== {name}: optimum {opt:.1f} tok/s at {truth.best.effective}")
    for strategy in strategies:
        t0 = time.monotonic()
        cost = 2 if confirm == "check" else 2 * (truth.spec.sweep.confirm_top + 1)
        gaps, lates, sure, reps, skips, found = [], [], [], [], [], []
        for seed in range(seeds):
            out = sweep(truth, strategy, seed, BUDGET - cost)
            pool = out["pool"]
            if confirm == "check":
                pick = max(pool, key=lambda c: statistics.fmean(pool[c]))
            else:
                pick, _ = confirm_pick(records_for_confirm(pool), truth, seed)
                pick = pick or max(pool, key=lambda c: statistics.fmean(pool[c]))
            gaps.append(truth.true_tok_s(pick) / opt - 1)
            sure.append(p_within(pool[pick], [r for c, r in pool.items() if c != pick]))
            lates.append(out["late_fails"] / max(out["trials"] - 10, 1))
            reps.append(out["replicates"])
            skips.append(out["skips"])
            found.append(max(truth.true_tok_s(c) for c in pool) / opt - 1)
        n = len(gaps)
        print(f"   {strategy:<6} confirm={confirm} ({cost} restarts): within 1% "
              f"{sum(g >= -0.01 for g in gaps)}/{n}, 2% {sum(g >= -0.02 for g in gaps)}/{n}, "
              f"3% {sum(g >= -0.03 for g in gaps)}/{n}; median gap "
              f"{statistics.median(gaps):+.1%}, worst {min(gaps):+.1%}; best measured within"
              f" 1% {sum(f >= -0.01 for f in found)}/{n}; failing restarts after 10: "
              f"{statistics.fmean(lates):.1%} (max {max(lates):.0%}); replicates "
              f"{statistics.fmean(reps):.1f}, skips {statistics.fmean(skips):.1f}; "
              f"mean P(within 1%) said {statistics.fmean(sure):.2f} "
              f"[{time.monotonic() - t0:.0f}s]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--only", nargs="+", default=["kimi", "demo"],
                    help="kimi, demo, or a landscape profile (run with the demo study)")
    ap.add_argument("--strategies", nargs="+", default=["model", "tpe"])
    ap.add_argument("--confirm", choices=("check", "full"), default="check")
    args = ap.parse_args()
    print("ALL FIGURES: SIMULATED SGLang server (sweeper.sim performance model, a test "
          f"double), not real hardware. Budget {BUDGET} restarts, confirm included.")
    t0 = time.monotonic()
    for key in args.only:
        if key == "kimi":
            truth = GroundTruth(kimi_study(), "kimi-k2.5-8xh200")
        elif key == "demo":
            truth = GroundTruth(demo_study(), "demo")
        else:
            truth = GroundTruth(demo_study(), str(Path(key).resolve()))
        bench(key, truth, args.strategies, args.seeds, args.confirm)
    print(f"\nruntime {time.monotonic() - t0:.0f}s")


if __name__ == "__main__":
    main()
