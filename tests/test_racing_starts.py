"""Racing and "measure longer" with runs grouped by server start: once the between-start
variance dominates, more runs on one start stop being bought and a close leader is worth
another start instead."""

from __future__ import annotations

import random
from pathlib import Path

import optuna

import sweeper.results.verdict as R
from sweeper.results import attrs as A
from sweeper.run.common import SweepOptions
from sweeper.run.longer import more_runs, more_runs_from
from sweeper.run.workers import HostPool
from sweeper.search.model.racing import Arm, arm_tau2, race, worth_more_runs
from sweeper.search.nodetime import Costs, runs_per_start
from sweeper.study import BenchSpec, parse_study

from .conftest import demo_study_data


def _runs(mean: float, n: int, cv: float = 0.05, seed: int = 0) -> tuple[float, ...]:
    rng = random.Random(seed)
    return tuple(mean * (1 + rng.gauss(0, cv)) for _ in range(n))


def _alt(mean: float, n: int, cv: float = 0.05) -> tuple[float, ...]:
    return tuple(mean * (1 + cv * (-1) ** i) for i in range(n))


def test_runs_on_one_start_stop_being_bought_once_the_start_dominates() -> None:
    lead_runs = _alt(100.0, 100)
    lead = Arm("lead", lead_runs, (lead_runs,))
    mine = _alt(99.5, 60)
    costs = Costs(restart_s=480, run_s=6)  # an 8-minute restart, 6-second runs
    # independent runs: a 0.5% gap with 60 runs is worth another batch on this start
    assert runs_per_start(costs, 0.05**2, 0.0) is None
    assert worth_more_runs(mine, [lead], 0.05, 10)
    # starts 2% apart: past ~22 runs a start's mean is known far better than the
    # configuration's; a batch here is worth less per node-second than a new start
    cap = runs_per_start(costs, 0.05**2, 0.02**2)
    assert cap == 22
    assert not worth_more_runs(Arm("me", mine, (mine,)), [lead], 0.05, 10, 0.02**2, cap)
    few = mine[:10]  # a first batch on the start: one more still pays
    assert worth_more_runs(Arm("me", few, (few,)), [lead], 0.05, 10, 0.02**2, cap)
    # the cheaper the restart, the sooner another start is the better buy
    assert runs_per_start(Costs(60, 6), 0.05**2, 0.02**2) < cap


def test_a_close_leader_gets_another_start_when_starts_differ() -> None:
    a = _runs(100.0, 200, seed=3)
    b = _runs(99.6, 200, seed=4)
    arms = [Arm("a", a, (a,)), Arm("b", b, (b,))]
    flat = race(arms, 0.05, tau2=0.0)
    two = race(arms, 0.05, tau2=0.015**2)
    assert two is not None and flat is not None
    # 200 runs each look settled when runs are independent; one start each is not
    assert two.value > 10 * flat.value


def test_the_between_start_variance_comes_from_configurations_on_two_starts() -> None:
    rng = random.Random(5)
    arms = []
    for i in range(30):
        starts = []
        for _ in range(2):
            speed = 1 + rng.gauss(0, 0.03)
            starts.append(_runs(100.0 * speed, 20, seed=rng.randrange(10**6)))
        arms.append(Arm(str(i), sum(starts, ()), tuple(starts)))
    assert 0.02 < arm_tau2(arms) ** 0.5 < 0.04


def _trial(study: optuna.Study, cid: str, runs: tuple[float, ...], startup: float = 30.0,
           role: str = A.SAMPLER) -> None:
    t = study.ask()
    for key, v in {A.CONFIG_ID: cid, A.ROLE: role, A.RUNS: list(runs), A.EFFECTIVE: {},
                   A.STARTUP: startup}.items():
        t.set_user_attr(key, v)
    study.tell(t, sum(runs) / len(runs))


def test_measure_longer_reads_the_starts_of_the_study() -> None:
    """The study's trials are starts: a leader whose two starts disagree by 6% makes the
    between-start variance large, and more runs on this start are not bought."""
    bench = BenchSpec(runs=10, max_runs=300)
    study = optuna.create_study(direction="maximize")
    _trial(study, "base", _runs(60.0, 10, seed=6), role=A.BASELINE)
    _trial(study, "lead", _runs(103.0, 100, seed=7))
    _trial(study, "lead", _runs(97.0, 100, seed=8))
    _trial(study, "other", _runs(80.0, 50, seed=9))
    _trial(study, "other", _runs(80.0 * 1.05, 50, seed=10))
    more = more_runs(study.get_trials(), "x", bench)
    assert more is not None and more(list(_runs(100.0, 60, seed=11))) == 0
    # the same runs taken as independent (no starts): another batch looks worth it
    pooled = {"lead": _runs(103.0, 100, seed=7) + _runs(97.0, 100, seed=8),
              "base": _runs(60.0, 10, seed=6)}
    flat = more_runs_from(pooled, "x", bench)
    assert flat is not None and flat(list(_runs(100.0, 60, seed=11))) == 10
    # a trial that reused the running server (start-up 0 s) is the same start
    _trial(study, "x", _runs(100.0, 10, seed=12))
    _trial(study, "x", _runs(100.0, 10, seed=13), startup=0.0)
    from sweeper.search.model.data import read_history
    hist = read_history(study.get_trials())
    x = next(o for o in hist.observations if o.config_id == "x")
    assert [len(s) for s in x.starts] == [20]


class _Replicating(optuna.samplers.RandomSampler):
    """Proposes the configuration measured last, on purpose (as racing does when the
    leader to race is the one just measured)."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.replicates: dict[int, list[int]] = {}

    def sample_independent(self, study, trial, param_name, param_distribution):  # noqa: ANN001, ANN201
        done = [t for t in study.get_trials(deepcopy=False)
                if t.state == optuna.trial.TrialState.COMPLETE
                and t.user_attrs.get(A.ROLE) != A.BASELINE and param_name in t.params]
        if not done:
            return super().sample_independent(study, trial, param_name, param_distribution)
        self.replicates[trial.number] = [done[-1].number]
        return done[-1].params[param_name]

    def deliberate(self, number: int) -> dict[str, object] | None:
        of = self.replicates.get(number)
        return {"of": of, "reason": "racing (test)"} if of else None


def test_a_racing_replicate_is_a_new_server_start(tmp_path: Path) -> None:
    """A replicate is bought for another start: of the configuration still serving, it
    restarts the server rather than adding runs to the start it is meant to check."""
    spec = parse_study(demo_study_data(tmp_path, sweep={"seed": 3, "sampler": "random",
                                                        "confirm_top": 0}),
                       tmp_path / "t.yaml")
    pool = HostPool(spec, SweepOptions(trials=3))
    pool.open()
    try:
        pool.study.sampler = _Replicating()
        pool.primary.session.study.sampler = pool.study.sampler
        pool.run()
    finally:
        pool.done()
    trials = sorted(pool.study.get_trials(deepcopy=False), key=lambda t: t.number)
    first, again = trials[1], trials[2]
    assert again.user_attrs.get(A.REPLICATE), again.user_attrs
    assert again.user_attrs[A.CONFIG_ID] == first.user_attrs[A.CONFIG_ID]
    assert again.user_attrs[A.STARTUP] > 0  # its own start, not the first's server
    result = next(r for r in R.config_results(trials)
                  if r.config_id == first.user_attrs[A.CONFIG_ID])
    assert len(result.starts) == 2
