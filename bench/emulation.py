"""The product's trial loop on the simulator's ground truth, in process: an emulated
measurer for bench/search_efficiency.py, bench/failure_rate.py, bench/levels_sharing.py
and the tests.

ALL FIGURES COME FROM THE SIMULATED SGLang SERVER's performance model (sweeper.sim, a test
double): ground truth from ``sweeper.sim.expected_throughput``, measurement noise drawn the
way sweeper/sim/engine.py draws it. They say how well the search works on the simulator's
landscapes, never how fast any real GPU is. bench/ may import sweeper.sim; the sweeper may not.

There is no loop here: ``emulate`` runs sweeper/run/workers.py's ``HostPool`` (what
``sweeper optimize`` runs) over an in-memory study, and the confirm phase of
sweeper/run/confirm.py after it, measuring through ``EmulatedMeasurer`` instead of a
server. So the baseline and start_from entries come first, known failures are skipped and
accidental repeats answered without a restart, replicates and longer measurements happen,
exactly as the CLI does them. The measurer:

* a configuration that truly fails raises the ConfigurationFailure its server would (the
  ground truth's class: oom, nccl, hang, invalid_args);
* one that serves returns ``benchmark.runs`` runs at every concurrency level of the study
  on the one start (more when the loop's ``more`` asks), each run ``level`` requests with
  the simulator's noise (sweeper/sim/engine.NoiseSource) drawn per request: a log-normal
  time factor (sd ``noise.cycle_sd``) on prefill + every verify cycle and a log-normal
  factor (sd ``noise.accept_sd``) on the per-depth acceptance; a real node's: one speed
  factor per server start (sd ``noise.start_sd``, or the bench's ``start_sd``), and each
  request's prompt's acceptance factor (sweeper/sim/prompts.accept_factor: its category's
  and its own), a run at level c sending the c prompts of its round of the study's one
  order (measure/prompts.py), every level from where the loop says (``first_round``), each
  run recording its position and categories as the real client's do; noise off
  (``noise=False``) gives the expectation itself, with no start or prompt effect (the
  simulator at --sim-noise 0);
* a simulated clock advances by the start-up seconds on every restart and by each run's
  seconds (its tokens at its tok/s).

Every record carries the ground truth, so skips are checked (``would_serve``) rather than
counted as known failures. With prompt-dependent acceptance the ground truth is the mean
over the study's prompt set (``expected_throughput(prompts=...)`` at each level, combined
by the study's objective), what a study measured on that set converges to.
"""

from __future__ import annotations

import math
import random
import statistics
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.errors import ConfigurationFailure, SweepAborted
from sweeper.launch import LaunchConfig
from sweeper.measure.logs import DecodeSummary
from sweeper.measure.prompts import PromptSet, load_prompts
from sweeper.measure.runs import BenchResult, RequestResult, make_run
from sweeper.measure.stats import summarize
from sweeper.remote import LocalHost
from sweeper.remote.server import ServerHandle
from sweeper.results import attrs as A
from sweeper.results.kind import TrialKind, kind_of
from sweeper.results.verdict import verdict
from sweeper.run.common import SweepOptions
from sweeper.run.confirm import after_sweep, run_confirm
from sweeper.run.decide import Decision, Proposal
from sweeper.run.session import HostSession, create_study
from sweeper.run.trial import Measurement
from sweeper.run.workers import HostPool
from sweeper.search.sampler import SAMPLERS, make_sampler
from sweeper.search.space import SearchSpace
from sweeper.sim import Expectation, expected_throughput, load_profile
from sweeper.sim import model as M
from sweeper.sim import prompts as sim_prompts
from sweeper.sim.engine import random_lognormal
from sweeper.study import BenchSpec, StudySpec

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


class OrderSampler(optuna.samplers.BaseSampler):
    """A hand or grid sweep: every configuration of the space in a given order (the
    loop's queue, baseline and start_from, comes first as for any sampler)."""

    def __init__(self, order: list[dict[str, Any]]) -> None:
        self.order = order
        self.given: dict[int, dict[str, Any]] = {}

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: Any, search_space: Any
                        ) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: Any, name: str,
                           dist: optuna.distributions.BaseDistribution) -> Any:
        if trial.number not in self.given:
            self.given[trial.number] = self.order[len(self.given) % len(self.order)]
        return self.given[trial.number][name]


def sampler_for(strategy: str, truth: GroundTruth, seed: int) -> optuna.samplers.BaseSampler:
    spec = truth.spec
    if strategy == GP:
        import torch

        torch.set_num_threads(1)  # one sweep per worker process; --jobs sets the cores
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=spec.sweep.n_startup_trials,
                                         warn_independent_sampling=False)
    if strategy == GRID:
        # every configuration in a random order (the queue's first points are measured
        # first anyway; proposed again, they are accidental repeats)
        order = [params for params, _ in truth.space.configurations()]
        random.Random(f"grid/{seed}").shuffle(order)
        return OrderSampler(order)
    name = spec.sweep.sampler if strategy == DEFAULT else strategy
    return make_sampler(name, seed, spec.sweep.n_startup_trials, space=SearchSpace(spec))


# --------------------------------------------------------------------------- ground truth
@dataclass
class Config:
    """One configuration's ground truth at every level of the study (``truth``: at the
    objective's primary level; ``failure``: the first level's failure, when any)."""

    cid: str
    effective: dict[str, Any]
    launch: LaunchConfig
    levels: dict[int, Expectation]
    value: float | None  # the study's objective, noise-free (None: it fails)
    primary: int

    @property
    def truth(self) -> Expectation:
        return self.levels[self.primary]

    @property
    def failure(self) -> str | None:
        return next((e.failure for e in self.levels.values() if e.failure), None)

    @property
    def tok_s(self) -> float | None:
        return self.value


class GroundTruth:
    """Every valid configuration of a study's space with the simulator's expectation at
    each of the study's concurrency levels, the true optimum of the study's objective (one
    level's tok/s per request, or a mix of levels), and noisy measurements drawn like the
    simulated server's.

    ``prompt_effects``: acceptance depends on the prompt (the profile's categories and
    prompt_sd); the truth is then the mean over the study's prompt set. It is computed for
    the configurations within ``CANDIDATE_MARGIN`` of the prompt-free optimum (where the
    optimum can be: a prompt moves a configuration's tok/s by a few percent) and for every
    other configuration when asked (a sweep measures a few hundred of thousands)."""

    CANDIDATE_MARGIN = 0.15

    def __init__(self, spec: StudySpec, profile: str, *, prompt_effects: bool = True) -> None:
        self.spec = spec
        self.space = SearchSpace(spec)
        self.profile = load_profile(profile)
        self.levels = spec.benchmark.levels
        self.prompts: PromptSet = load_prompts(spec.benchmark.prompts,
                                               spec.benchmark.input_tokens)
        self.texts = ["\n".join(m["content"] for m in p) for p in self.prompts.prompts]
        noise = self.profile.noise
        self.prompt_effects = prompt_effects and bool(noise.categories or noise.prompt_sd)
        self.configs: dict[str, Config] = {}
        self._over_prompts: dict[str, float] = {}
        for _, eff in self.space.configurations():
            launch = self.space.launch_config(eff)
            cid = launch.config_id()
            if cid not in self.configs:
                self.configs[cid] = self._config(cid, eff, launch)
        self.space_cids = list(self.configs)
        base = self.space.baseline_config()
        self.baseline_cid = base.config_id()
        self.configs[self.baseline_cid] = self._config(self.baseline_cid, {}, base)
        ok = [c for c in self.configs.values() if c.tok_s is not None]
        plain_best = max(float(c.tok_s or 0.0) for c in ok)
        near = [c for c in ok if float(c.tok_s or 0.0) >= plain_best * (1 - self.CANDIDATE_MARGIN)]
        self.best = max(near, key=lambda c: self.true_tok_s(c.cid))
        self.optimum = self.true_tok_s(self.best.cid)

    def _at_levels(self, launch: LaunchConfig, prompts: list[str] | None = None
                   ) -> dict[int, Expectation]:
        return {c: expected_throughput(self.profile, launch.args, launch.env, concurrency=c,
                                       prompts=prompts)
                for c in self.levels}

    def _config(self, cid: str, eff: dict[str, Any], launch: LaunchConfig) -> Config:
        at = self._at_levels(launch)
        value = None if any(e.failure for e in at.values()) else \
            self.spec.objective.combine({c: float(e.tok_s or 0.0) for c, e in at.items()})
        return Config(cid, eff, launch, at, value, self.spec.objective.primary)

    def config(self, cid: str, launch: LaunchConfig) -> Config:
        if cid not in self.configs:  # not reachable from the space: compute it anyway
            self.configs[cid] = self._config(cid, {}, launch)
        return self.configs[cid]

    def fails(self, cid: str) -> bool:
        return self.configs[cid].failure is not None

    def plain_tok_s(self, cid: str) -> float:
        """The study's objective, noise-free (tok/s per request at its level, or the mix),
        on prompts of no category (the simulator at --sim-noise 0)."""
        return float(self.configs[cid].tok_s or 0.0)

    def true_tok_s(self, cid: str) -> float:
        """The ground truth: the study's objective over the levels' means over the study's
        prompt set with prompt effects (without them: ``plain_tok_s``)."""
        if not self.prompt_effects or self.fails(cid):
            return self.plain_tok_s(cid)
        if cid not in self._over_prompts:
            at = self._at_levels(self.configs[cid].launch, self.texts)
            self._over_prompts[cid] = float(self.spec.objective.combine(
                {c: float(e.tok_s or 0.0) for c, e in at.items()}))
        return self._over_prompts[cid]

    def gap(self, cid: str) -> float:
        """True objective of ``cid`` relative to the optimum, minus 1 (0 = the optimum)."""
        return self.true_tok_s(cid) / self.optimum - 1

    def prompt_factor(self, index: int, scale: float) -> float:
        """Prompt ``index``'s acceptance factor, the simulated server's (1 without
        prompt effects)."""
        if not self.prompt_effects:
            return 1.0
        return sim_prompts.accept_factor(self.profile, self.texts[index], scale)

    def measure(self, cid: str, rng: random.Random, runs: int | None = None) -> list[float]:
        """benchmark.runs per-request tok/s at the primary level, the simulator's schedule
        x its noise (engine.NoiseSource.draw per measured request; warm-up not counted),
        no start or prompt effect."""
        level = self.configs[cid].primary
        n = self.spec.benchmark.runs if runs is None else runs
        return [_mean(r) for r in self.measure_accept(cid, rng, [[1.0] * level] * n)[0]]

    def measure_accept(self, cid: str, rng: random.Random, rounds: list[list[float]],
                       speed: float = 1.0, level: int | None = None
                       ) -> tuple[list[list[float]], float | None]:
        """One run per entry of ``rounds`` (the acceptance factors of its prompts, one per
        concurrent request) on a start running at ``speed``: per run, each request's tok/s
        (one draw of the simulator's noise per request, as engine.NoiseSource draws them),
        and the mean accept length the server's counters would report. ``level``: default
        the primary one (it sets the batch; each round holds ``level`` factors)."""
        conf = self.configs[cid]
        level = conf.primary if level is None else level
        cfg = conf.levels[level].config
        assert cfg is not None
        p, bench = self.profile, self.spec.benchmark
        batch = max(1, min(level, cfg.max_running))
        cycle = M.cycle_ms(p, cfg, batch)
        prefill = M.prefill_ms(p, cfg, batch)
        out, accepts = [], []
        for factors in rounds:
            run = []
            for pf in factors:
                tf = math.exp(rng.gauss(0.0, p.noise.cycle_sd)) / speed
                af = math.exp(rng.gauss(0.0, p.noise.accept_sd))
                if cfg.speculative:
                    dist = M.accept_distribution(M.depth_acceptance(p, cfg, af * pf))
                    steps = M.verify_steps_for(dist, bench.max_tokens)
                    accepts.append((bench.max_tokens - 1) / steps)
                else:
                    steps = bench.max_tokens - 1
                run.append(bench.max_tokens / ((prefill + steps * cycle) * tf) * 1000.0)
            out.append(run)
        return out, (statistics.fmean(accepts) if accepts else None)


# --------------------------------------------------------------------------- the measurer
class EmulatedMeasurer:
    """run/measurer.Measurer on the ground truth, on a simulated clock.

    ``start_sd``: the log-sd of a start's speed factor (default: the profile's
    ``noise.start_sd``); ``noise=False`` turns every departure from the expectation off.
    Starts and runs draw from separate seeded streams, so a strategy's runs at a seed are
    the same whatever the start noise (common random numbers)."""

    def __init__(self, truth: GroundTruth, seed: int, *, noise: bool = True,
                 restart_s: float | None = None, start_sd: float | None = None) -> None:
        self.truth = truth
        # the same noise stream for every strategy at a seed (common random numbers)
        self.rng = random.Random(f"noise/{seed}")
        self.start_rng = random.Random(f"start/{seed}")
        self.noise = noise
        self.scale = 1.0 if noise else 0.0
        self.start_sd = (truth.profile.noise.start_sd if start_sd is None else start_sd) \
            * self.scale
        self.restart_s = truth.profile.startup.load_seconds if restart_s is None else restart_s
        self.clock = 0.0  # simulated seconds
        self.restarts = 0
        self.bench_runs = 0
        self.run_s = 0.0  # simulated seconds spent in benchmark runs
        self.speed = 1.0  # the running start's speed factor
        self.first_seen: dict[str, float] = {}  # config id -> clock after its first runs
        self.current: ServerHandle | None = None
        self.log: list[Measured] = []  # every configuration measured, in order

    def now(self) -> float:
        return self.clock

    def measure(self, config: LaunchConfig, tag: str, bench: BenchSpec, *, label: str = "",
                on_start: Callable[[ServerHandle], None] | None = None,
                phase: str = "", primary: int | None = None,
                more: Callable[[list[float]], int] | None = None,
                first_round: int = 0) -> Measurement:
        cid = config.config_id()
        expect = self.truth.config(cid, config)
        reused = self.current is not None and self.current.config_id == cid
        if not reused:
            self.restarts += 1
            self.clock += self.restart_s
            # one speed for the whole start (engine.NoiseSource.start_factor)
            self.speed = random_lognormal(self.start_rng, self.start_sd)
            self.current = ServerHandle("emulated", 0, config.port, config.bind_host,
                                        f"emulated/{tag}.log", f"emulated/{tag}.exit", cid,
                                        self.clock)
        assert self.current is not None
        if on_start is not None:
            on_start(self.current)
        failure = next((expect.levels[c].failure for c in bench.levels
                        if expect.levels[c].failure), None)
        if failure is not None:
            self.log.append(Measured(cid, self.restarts, {}))
            raise ConfigurationFailure(failure, f"emulated {failure} (the simulator's ground "
                                                "truth for this configuration)")
        # every level of the study on this one start, in the study's order, each from
        # round ``first_round`` of the prompt order (run/trial.py, measure/levels.py)
        levels: dict[int, BenchResult] = {}
        measured: dict[int, list[float]] = {}
        for level in bench.levels:
            runs, accept = self._runs(cid, level, first_round, bench.runs)
            cap = bench.max_runs or 0
            # measure/client.run_benchmark's loop (one level only: BenchSpec.extends)
            while more is not None and bench.extends and len(runs) < cap:
                extra = min(more([_tok_s(r, bench.max_tokens) for r in runs]),
                            cap - len(runs))
                if extra <= 0:
                    break
                runs.extend(self._runs(cid, level, first_round + len(runs), extra)[0])
            self.bench_runs += len(runs)
            spent = sum(_wall(r, bench.max_tokens) for r in runs)
            self.run_s += spent
            self.clock += spent
            levels[level] = _bench_result(runs, accept, bench.at_level(level),
                                          self._rounds(first_round, len(runs), level),
                                          self.truth.prompts)
            measured[level] = [_mean(r) for r in runs]
        self.first_seen.setdefault(cid, self.clock)
        self.log.append(Measured(cid, self.restarts, measured))
        level = primary if primary in levels else min(levels)
        return Measurement(config, self.current, levels[level],
                           0.0 if reused else self.restart_s,
                           DecodeSummary(0, None, None, None, 0), reused, levels)

    def _rounds(self, first: int, n: int, level: int) -> list[tuple[int, list[int]]]:
        """(position, prompt indices) of ``n`` runs at ``level`` from round ``first`` of the
        study's one order, as measure/runner.Runner.run_round sends them."""
        prompts, c = self.truth.prompts, max(1, level)
        return [(((first + i) * c) % len(prompts), prompts.round_prompts(first + i, c))
                for i in range(n)]

    def _runs(self, cid: str, level: int, first: int, n: int
              ) -> tuple[list[list[float]], float | None]:
        if not self.noise:
            tok_s = float(self.truth.configs[cid].levels[level].tok_s or 0.0)
            return [[tok_s] * level for _ in range(n)], None
        rounds = [[self.truth.prompt_factor(i, self.scale) for i in idxs]
                  for _, idxs in self._rounds(first, n, level)]
        return self.truth.measure_accept(cid, self.rng, rounds, self.speed, level)

    def stop(self, best_effort: bool = False, label: str = "") -> None:
        self.current = None

    def log_text(self, handle: ServerHandle) -> str | None:
        return None


@dataclass
class Measured:
    """One configuration served and benchmarked at every level: its per-request tok/s per
    run at each level (empty: it failed), and the measurer's restarts so far (this one's
    included)."""

    cid: str
    restarts: int
    runs: dict[int, list[float]]


def _mean(requests: list[float]) -> float:
    return sum(requests) / len(requests)


def _tok_s(requests: list[float], max_tokens: int) -> float:
    """A run's tok/s as the client reports it: the request's at concurrency 1, else all
    tokens of the round over its wall time (measure/runs.make_run)."""
    if len(requests) == 1:
        return requests[0]
    return len(requests) * max_tokens / _wall(requests, max_tokens)


def _wall(requests: list[float], max_tokens: int) -> float:
    """A run's seconds: its slowest request's."""
    return max(max_tokens / v if v > 0 else 0.0 for v in requests)


def _bench_result(runs: list[list[float]], accept: float | None, bench: BenchSpec,
                  where: list[tuple[int, list[int]]] | None = None,
                  prompts: PromptSet | None = None) -> BenchResult:
    made = []
    for i, run in enumerate(runs):
        pos, idxs = where[i] if where else (None, [i * len(run) + j for j in range(len(run))])
        reqs = [RequestResult(ok=True, error=None, prompt_index=idxs[j],
                              prompt_tokens=None, completion_tokens=bench.max_tokens,
                              ttft_s=None, e2e_s=bench.max_tokens / v if v > 0 else 0.0,
                              tok_s=v, decode_tok_s=None, n_chunks=0, gap_mean_s=None,
                              gap_max_s=None, short=False, text="")
                for j, v in enumerate(run)]
        cats = [prompts.category(j) for j in idxs] if prompts is not None else None
        made.append(make_run(i, reqs, _wall(run, bench.max_tokens), False,
                             position=pos, categories=cats))
    return BenchResult(runs=made, warmup_runs=[], stats=summarize([r.tok_s for r in made]),
                       spec=bench,
                       prompt_hash="emulated", base_url="emulated", model=None,
                       started_at="", duration_s=0.0, accept_length=accept)


# --------------------------------------------------------------------------- the sweep
@dataclass
class Record:
    """One proposal of a sweep, as the study stored it, with its ground truth."""

    role: str
    cid: str
    effective: dict[str, Any]
    outcome: str  # "measured", "failed" (on a restart), "skipped", "repeat"
    truly_fails: bool  # the simulator's ground truth for this configuration
    value: float | None
    restarts: int  # cumulative restarts after this proposal

    @property
    def restart(self) -> bool:
        return self.outcome in ("measured", "failed")


@dataclass
class Sweep:
    records: list[Record] = field(default_factory=list)
    decisions: list[tuple[Proposal, Decision]] = field(default_factory=list)
    restarts: int = 0
    confirm_restarts: int = 0
    bench_runs: int = 0  # measured benchmark runs of the sweep (the longer ones' included)
    final: str | None = None  # the pick at the end (after the confirm phase, if any)
    clock: float = 0.0  # simulated seconds, the confirm phase's included
    final_clock: float = 0.0  # simulated seconds when the pick was first measured
    sure: float | None = None  # the verdict's "How sure" of the pick
    stopped: str | None = None  # the stop rule's reason, when it ended the sweep early
    node_s: float | None = None  # node-seconds the loop counted for its trials (summary)
    trials: list[optuna.trial.FrozenTrial] = field(default_factory=list)  # the sweep's own


_OUTCOME = {TrialKind.SKIPPED: "skipped", TrialKind.REPEAT: "repeat"}


def records_of(trials: list[optuna.trial.FrozenTrial], truth: GroundTruth) -> list[Record]:
    """A stored sweep's proposals (not the confirm phase's, nothing handed back or failed
    outside the configuration) as records checked against the ground truth."""
    out: list[Record] = []
    restarts = 0
    for t in sorted(trials, key=lambda t: t.number):
        kind = kind_of(t)
        if kind in (TrialKind.CONFIRM, TrialKind.BACKED_OFF) or \
                t.state not in (TrialState.COMPLETE, TrialState.PRUNED):
            continue
        ua = t.user_attrs
        outcome = _OUTCOME.get(kind) or ("measured" if t.state == TrialState.COMPLETE
                                         else "failed")
        restarts += outcome in ("measured", "failed")
        cid = str(ua[A.CONFIG_ID])
        out.append(Record(str(ua.get(A.ROLE, A.SAMPLER)), cid, dict(ua.get(A.EFFECTIVE) or {}),
                          outcome, truth.fails(cid), t.value if outcome != "failed" else None,
                          restarts))
    return out


def emulate(truth: GroundTruth, strategy: str, seed: int, budget: int, *,
            noise: bool = True, start_sd: float | None = None,
            restart_s: float | None = None) -> Sweep:
    """One sweep of ``budget`` restarts in all, the product's loop through the emulated
    measurer: the confirm phase's restarts (when the study has one) come out of it.
    ``start_sd``/``restart_s``: the per-start speed sd and the restart's seconds
    (default: the profile's)."""
    spec = truth.spec
    # the confirm phase the CLI would run after this strategy's sweep (run/confirm.py)
    sampler_name = spec.sweep.sampler if strategy == DEFAULT else strategy
    start = after_sweep_plan(spec, sampler_name)
    trials = max(1, budget - start)
    measurer = EmulatedMeasurer(truth, seed, noise=noise, start_sd=start_sd,
                                restart_s=restart_s)
    out = Sweep()
    with tempfile.TemporaryDirectory(prefix="sweeper-bench-") as tmp:
        options = SweepOptions(trials=trials, storage=f"sqlite:///{tmp}/bench.db", seed=seed,
                               notes=False)
        storage = optuna.storages.InMemoryStorage()
        study = create_study(storage, spec, truth.space, sampler_for(strategy, truth, seed),
                             simulated=True)
        session = HostSession(spec, options)
        session.attach(study, storage, measurer, LocalHost())
        pool = run_loop(spec, options, session, out, measurer)
        out.trials = study.get_trials(deepcopy=False)
        out.records = records_of(out.trials, truth)
        out.restarts = measurer.restarts
        out.bench_runs = measurer.bench_runs
        confirm = after_sweep(study, spec, sampler_name, None, False, False)
        if confirm.run:
            outcome = run_confirm(session, confirm.plan.top, confirm.plan.runs,
                                  confirm.plan.rounds)
            out.final = outcome.winner.result.config_id
        else:
            best = session.summary.best
            out.final = best.config_id if best is not None else None
        out.confirm_restarts = measurer.restarts - out.restarts
        out.clock = measurer.clock
        out.final_clock = measurer.first_seen.get(out.final or "", measurer.clock)
        out.sure = verdict(study).sure
        out.stopped = pool.summary.stop_reason
        out.node_s = pool.summary.node_seconds
        pool.done()
    return out


def run_loop(spec: StudySpec, options: SweepOptions, session: HostSession, out: Sweep,
             measurer: EmulatedMeasurer) -> HostPool:
    """The loop until its budget is spent. A sweep stopped by failures in a row is resumed
    the way its message tells the user (the same command: the same budget); one stopped
    because the sampler only proposes known failures is not."""
    for _ in range(RESUMES):
        pool = HostPool(spec, options, sessions=[session], clock=measurer.now,
                        observe=lambda p, d: out.decisions.append((p, d)))
        try:
            pool.run()
            return pool
        except SweepAborted as exc:
            if exc.reason != "failures":
                return pool
    return pool


RESUMES = 20


def sweep_only(truth: GroundTruth, spec: StudySpec, sampler: optuna.samplers.BaseSampler,
               seed: int, trials: int, *, noise: bool = True) -> EmulatedMeasurer:
    """The product's loop alone (no confirm phase) for ``trials`` trials of ``spec``, a
    study on the truth's space whose levels are among the truth's (its objective may
    differ); the measurer's ``log`` says what it measured, in order."""
    measurer = EmulatedMeasurer(truth, seed, noise=noise)
    with tempfile.TemporaryDirectory(prefix="sweeper-bench-") as tmp:
        options = SweepOptions(trials=trials, storage=f"sqlite:///{tmp}/bench.db", seed=seed,
                               notes=False)
        storage = optuna.storages.InMemoryStorage()
        study = create_study(storage, spec, SearchSpace(spec), sampler, simulated=True)
        session = HostSession(spec, options)
        session.attach(study, storage, measurer, LocalHost())
        run_loop(spec, options, session, Sweep(), measurer).done()
    return measurer


def after_sweep_plan(spec: StudySpec, sampler: str) -> int:
    """Restarts the confirm phase after a sweep of ``sampler`` takes (its plan)."""
    from sweeper.run.confirm import confirm_plan

    return confirm_plan(spec, sampler).restarts


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
