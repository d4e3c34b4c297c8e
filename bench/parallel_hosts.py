"""Several hosts, one study: trials per minute with 1, 2 and 4 hosts, and the search quality
at an equal number of trials (issue 11).

Targets: 2 hosts >= 1.8x the trials per minute of 1 host; 4 hosts >= 3.4x; a parallel
search must not pick worse configurations than a serial one on the same budget.

ALL FIGURES COME FROM THE SIMULATED SGLang SERVER (sweeper.sim, a test double), never from
real hardware. Each "host" is this machine on its own server port (``hosts[i].port``) and
workdir: the simulator sleeps through its start-up (``--sim-startup-seconds``, default 8 s,
so a restart costs several seconds as on a GPU node) and serves at its modelled speed, so
the hosts do not compete for the CPU the way real servers would not compete for GPUs.

Per host count and seed, one real sweep with the real CLI::

    sweeper optimize --study <copy of studies/demo.yaml with N local hosts> \\
        --trials 24 --seed S --no-confirm

then, read back from the storage:

* wall time of the command, and of the sweep itself (first trial start to last trial end);
* trials per minute (restarts that ended: measured or failed by the configuration) over
  the sweep's span, and the speedup over 1 host;
* quality: the sweeper's pick (pooled replicates) scored by the simulator's noise-free
  expectation (``sweeper.sim.expected_throughput``), beside the best configuration the run
  measured scored the same way; a parallel run's pick against the 1-host run's.

    .venv/bin/python bench/parallel_hosts.py                    # 1, 2, 4 hosts, seed 1
    .venv/bin/python bench/parallel_hosts.py --seeds 1 2 --hosts 1 4
    .venv/bin/python bench/parallel_hosts.py --profile bench/landscapes/rugged-h100.yaml
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
import yaml

import sweeper.results.verdict as R
from sweeper.remote import free_port
from sweeper.results import attrs as A
from sweeper.run.reconcile import counts_as_finished
from sweeper.sim import expected_throughput
from sweeper.study import load_study

ROOT = Path(__file__).resolve().parent.parent

optuna.logging.set_verbosity(optuna.logging.WARNING)
DEMO = ROOT / "studies" / "demo.yaml"


@dataclass
class Run:
    hosts: int
    seed: int
    trials: int
    command_s: float
    sweep_s: float
    best_true: float | None  # the sweeper's pick, scored without noise
    reach: float  # the best configuration it measured, scored the same way
    per_host: dict[str, int]

    @property
    def per_min(self) -> float:
        return self.trials / self.sweep_s * 60


def study_file(directory: Path, hosts: int, profile: str, startup: float, seed: int) -> Path:
    data = yaml.safe_load(DEMO.read_text())
    data["name"] = "parallel"
    data["storage"] = f"sqlite:///{directory / 'parallel.db'}"
    data["hosts"] = [{"ssh": "local", "port": free_port(), "workdir": str(directory / f"h{i}")}
                     for i in range(hosts)]
    data["server"]["port"] = free_port()
    data["server"]["launcher"] = (f"{{python}} -m sweeper.sim --sim-profile {profile} "
                                  f"--sim-seed {seed} --sim-startup-seconds {startup:g}")
    # restarts dominate, as on a GPU node: a short benchmark after a long start-up
    data["benchmark"] = {"api": "chat", "max_tokens": 120, "runs": 2, "warmup": 0,
                         "concurrency": 1, "prompts": "builtin"}
    data["sweep"] = {**data.get("sweep", {}), "confirm_top": 0}
    path = directory / "parallel.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def one_run(hosts: int, seed: int, trials: int, profile: str, startup: float,
            workdir: Path) -> Run:
    directory = workdir / f"hosts{hosts}-seed{seed}"
    done_file = directory / "command_s"
    if done_file.exists():  # a finished run in --dir: read it again, do not sweep again
        path, command_s = directory / "parallel.yaml", float(done_file.read_text())
    else:
        directory.mkdir(parents=True, exist_ok=True)
        path = study_file(directory, hosts, profile, startup, seed)
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "sweeper", "optimize", "--study",
                               str(path), "--trials", str(trials), "--seed", str(seed),
                               "--no-confirm"], cwd=directory, capture_output=True, text=True,
                              timeout=3600)
        command_s = time.monotonic() - started
        (directory / "optimize.out").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise SystemExit(f"{hosts} hosts, seed {seed}: optimize exited {proc.returncode}:"
                             f"\n{proc.stderr[-2000:]}")
        done_file.write_text(f"{command_s:.2f}")
    spec = load_study(str(path))
    study = optuna.load_study(study_name=spec.name, storage=spec.storage)
    all_trials = study.get_trials(deepcopy=False)
    counted = [t for t in all_trials if counts_as_finished(t)]
    span = (max(t.datetime_complete for t in counted if t.datetime_complete)
            - min(t.datetime_start for t in counted if t.datetime_start)).total_seconds()
    per_host: dict[str, int] = {}
    for t in counted:
        per_host[str(t.user_attrs.get(A.HOST))] = per_host.get(str(t.user_attrs.get(A.HOST)),
                                                                0) + 1
    best = R.best_result(study, spec.benchmark.aggregate, all_trials)
    best_true = None
    if best is not None:
        best_true = true_tok_s(profile, best.launch)
    # the best configuration this run measured, by the same noise-free yardstick
    measured = [true_tok_s(profile, t.user_attrs.get(A.LAUNCH) or {}) for t in counted
                if t.state.name == "COMPLETE"]
    reach = max((v for v in measured if v is not None), default=0.0)
    return Run(hosts, seed, len(counted), command_s, span, best_true, reach, per_host)


def true_tok_s(profile: str, launch: dict[str, object]) -> float | None:
    """The simulator's noise-free tok/s of a recorded launch (None: it fails there)."""
    args = launch.get("args") or {}
    env = launch.get("env") or {}
    return expected_throughput(profile, args, env).tok_s  # type: ignore[arg-type]


def report(runs: list[Run]) -> None:
    print("\nSIMULATED server (sweeper.sim): figures are not measurements of real hardware.")
    print(f"{'hosts':>5} {'seed':>4} {'trials':>6} {'command s':>9} {'sweep s':>8} "
          f"{'trials/min':>10} {'speedup':>7}  {'pick':>7} {'best seen':>9}  trials per host")
    base = {r.seed: r for r in runs if r.hosts == 1}
    for r in runs:
        one = base.get(r.seed)
        speed = f"{r.per_min / one.per_min:.2f}x" if one else "-"
        pick = f"{r.best_true:.1f}" if r.best_true else "-"
        print(f"{r.hosts:>5} {r.seed:>4} {r.trials:>6} {r.command_s:>9.1f} {r.sweep_s:>8.1f} "
              f"{r.per_min:>10.2f} {speed:>7}  {pick:>7} {r.reach:>9.1f}  "
              + " ".join(f"{v}" for v in sorted(r.per_host.values(), reverse=True)))
    print("(pick / best seen: the noise-free tok/s of the sweeper's pick and of the best "
          "configuration the run measured)")
    for k in sorted({r.hosts for r in runs}):
        mine = [r for r in runs if r.hosts == k]
        ratios = [r.per_min / base[r.seed].per_min for r in mine if r.seed in base]
        target = {2: 1.8, 4: 3.4}.get(k)
        met = "" if target is None or not ratios else \
            f" (target >= {target}x: {'met' if min(ratios) >= target else 'NOT met'})"
        vs = [r.best_true / base[r.seed].best_true - 1 for r in mine
              if r.best_true and r.seed in base and base[r.seed].best_true]
        quality = f"; pick vs 1 host's pick {statistics.fmean(vs):+.1%}" if vs and k > 1 else ""
        speed = f"speedup {statistics.fmean(ratios):.2f}x{met}" if ratios else "no 1-host run"
        print(f"{k} host{'s' if k > 1 else ''}: "
              f"{statistics.fmean(r.per_min for r in mine):.2f} trials/min, {speed}{quality}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--startup", type=float, default=8.0,
                    help="simulated server start-up, seconds (a restart's cost)")
    ap.add_argument("--profile", default="demo", help="simulator profile name or YAML path")
    ap.add_argument("--dir", type=Path, default=None, help="keep the storages here")
    ns = ap.parse_args()
    workdir = ns.dir or Path(tempfile.mkdtemp(prefix="parallel-hosts-"))
    runs = []
    for seed in ns.seeds:
        for k in ns.hosts:
            print(f"[{time.strftime('%H:%M:%S')}] {k} host(s), seed {seed}, {ns.trials} trials, "
                  f"start-up {ns.startup:g}s ...", flush=True)
            runs.append(one_run(k, seed, ns.trials, ns.profile, ns.startup, workdir))
    report(runs)
    print(f"\nstorages and outputs under {workdir}")


if __name__ == "__main__":
    main()
