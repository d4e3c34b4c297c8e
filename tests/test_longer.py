"""Measured longer on the same server start: the rule (search/model/racing.worth_more_runs),
the study's pooled runs (run/longer.py), the client's loop against the simulated server
(a real HTTP process) and the study setting."""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Iterator

import optuna
import pytest

from sweeper.errors import InputError
from sweeper.launch import LaunchConfig
from sweeper.measure import BenchSpec, run_benchmark
from sweeper.results import attrs as A
from sweeper.run.longer import more_runs, more_runs_from
from sweeper.search.model.racing import Arm, worth_more_runs
from sweeper.sim.harness import SimProcess


def _runs(mean: float, n: int, cv: float = 0.06, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [mean * (1 + rng.gauss(0, cv)) for _ in range(n)]


def test_a_close_challenger_is_worth_more_runs_a_far_one_is_not() -> None:
    lead = Arm("lead", tuple(_runs(100.0, 30, seed=1)))
    assert worth_more_runs(_runs(lead.mean * 0.995, 3, seed=2), [lead], 0.06, 3)
    assert not worth_more_runs(_runs(lead.mean * 0.80, 3, seed=3), [lead], 0.06, 3)
    # a new best is checked too: it may be lucky
    assert worth_more_runs(_runs(lead.mean * 1.01, 3, seed=4), [lead], 0.06, 3)


def test_more_runs_stop_once_the_interval_is_tight() -> None:
    lead = Arm("lead", tuple(_runs(100.0, 60, seed=5)))
    mine = _runs(lead.mean * 0.99, 3, seed=6)
    extra = 0
    while worth_more_runs(mine, [lead], 0.06, 3):
        mine += _runs(lead.mean * 0.99, 3, seed=7 + extra)
        extra += 3
        assert extra < 2000, "never stops"
    assert extra > 0 and len(mine) < 2000


def test_a_leader_measured_too_little_is_not_worth_chasing() -> None:
    """Against one lucky run of the leader, more runs of this configuration change little:
    what the comparison lacks is the leader's runs (racing's job, not this start's)."""
    lead = Arm("lead", (100.0,))
    mine = _runs(99.0, 300, seed=8)
    assert not worth_more_runs(mine, [lead], 0.06, 3)


def test_the_study_setting_is_checked() -> None:
    assert BenchSpec(runs=3, max_runs=30).extends
    assert not BenchSpec(runs=3).extends
    assert not BenchSpec(runs=3, max_runs=30, objective="min").extends
    assert not BenchSpec(runs=3, max_runs=30, concurrency=[1, 8]).extends
    with pytest.raises(InputError, match=r"max_runs \(2\) must be >= runs \(3\)"):
        BenchSpec(runs=3, max_runs=2)


def _trial(study: optuna.Study, cid: str, runs: list[float], role: str = A.SAMPLER) -> None:
    t = study.ask()
    for key, v in {A.CONFIG_ID: cid, A.ROLE: role, A.RUNS: runs, A.EFFECTIVE: {}}.items():
        t.set_user_attr(key, v)
    study.tell(t, sum(runs) / len(runs))


def test_more_runs_reads_the_pooled_runs_of_the_study() -> None:
    study = optuna.create_study(direction="maximize")
    bench = BenchSpec(runs=3, max_runs=30)
    assert more_runs(study.get_trials(), "x", bench) is None  # nothing to compare with
    _trial(study, "base", _runs(60.0, 3, seed=9), A.BASELINE)
    _trial(study, "lead", _runs(100.0, 15, seed=10))
    _trial(study, "lead", _runs(100.0, 15, seed=11))
    more = more_runs(study.get_trials(), "x", bench)
    assert more is not None
    assert more(_runs(99.5, 3, seed=12)) == 3  # close to the best pooled: 3 more
    assert more(_runs(70.0, 3, seed=13)) == 0
    # the same configuration's earlier trials count: runs of "lead" are already tight
    again = more_runs(study.get_trials(), "lead", bench)
    assert again is not None and again(_runs(100.0, 3, seed=14)) == 0
    assert more_runs(study.get_trials(), "x", BenchSpec(runs=3)) is None
    assert more_runs_from({"a": [1.0]}, "a", bench) is None  # no other configuration


ARGS = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "sim/draft",
        "speculative-num-steps": 2, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 3}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if importlib.util.find_spec("sweeper.sim.__main__") is None:
        pytest.skip("the simulator CLI (python -m sweeper.sim) is not available")
    flags = ["--sim-profile", "demo", "--sim-seed", "3", "--sim-startup-seconds", "0.5",
             *LaunchConfig(args=ARGS).flag_argv()]
    with SimProcess(flags, log_dir=tmp_path_factory.mktemp("sim"), model_path="m") as proc:
        proc.wait_healthy(20)
        yield proc.url


def test_the_client_measures_longer_as_asked_and_never_past_max_runs(sim: str) -> None:
    asked: list[int] = []

    def more(now: list[float]) -> int:
        asked.append(len(now))
        return 2 if len(asked) < 3 else 0

    spec = BenchSpec(max_tokens=20, runs=2, max_runs=9, warmup=0)
    res = run_benchmark(sim, spec, more=more)
    assert asked == [2, 4, 6] and len(res.runs) == 6 and res.stats.n == 6
    # asked for more than max_runs allows: cut at max_runs
    res = run_benchmark(sim, spec, more=lambda now: 5)
    assert len(res.runs) == 9
    # a study that does not measure longer ignores the callback
    res = run_benchmark(sim, BenchSpec(max_tokens=20, runs=2, warmup=0), more=lambda now: 5)
    assert len(res.runs) == 2
