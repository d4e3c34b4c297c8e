"""The stop rule in the one loop, and the emulated measurer's real-node noise.

Through the loop ``sweeper optimize`` runs (run/workers.HostPool), measuring through the
bench's emulated measurer (the simulator's ground truth in process, a simulated clock):
a study whose leader is clear ends before ``--trials`` and says why; one whose leader is
not clear runs its trials. The emulated measurer's per-start speed factor is what the
two-level statistics (measure/stats.start_variance) recover as between-start variance.
"""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from optuna.trial import FrozenTrial

from bench.emulation import EmulatedMeasurer, GroundTruth, Sweep, emulate
from sweeper.results import attrs as A
from sweeper.results.verdict import ConfigResult, two_levels
from sweeper.run.decide import StopState, should_stop, sure_stop
from sweeper.search.nodetime import not_worth_a_restart, spent_seconds
from sweeper.study import StudySpec, parse_study

from .conftest import demo_study_data

TRIALS = 30
# one knob, one step count: 1 to 6 steps are several percent apart on the demo profile
CLEAR = {"speculative-num-steps": {"int": [1, 6]}, "speculative-eagle-topk": {"choices": [1]}}
# the top four configurations of this space are within 1% of each other, the next ones
# 1-3% below: a leader the runs cannot tell apart from its neighbours
CLOSE = {"speculative-num-steps": {"int": [3, 5]}, "speculative-eagle-topk": {"choices": [1, 2]},
         "speculative-num-draft-tokens": {"int": [4, 8]}}


def _study(tmp: Path, space: dict[str, Any], **sweep: Any) -> StudySpec:
    data = demo_study_data(
        tmp, start_from=[],
        benchmark={"api": "chat", "max_tokens": 500, "runs": 10, "warmup": 1, "max_runs": 10},
        sweep={"seed": 5, "sampler": "random", "confirm_top": 0, "n_startup_trials": 3,
               **sweep})
    data["space"] = space
    return parse_study(data, tmp / "t.yaml")


def _trials(sweep: Sweep) -> int:
    """Trials of the sweep that counted towards --trials (measured or failed)."""
    return sum(r.restart for r in sweep.records)


def test_the_stop_rule_ends_a_sweep_whose_leader_is_clear(tmp_path: Path) -> None:
    truth = GroundTruth(_study(tmp_path, CLEAR), "demo")
    sweep = emulate(truth, "default", 1, TRIALS)  # the profile's noise: start_sd 1.5%
    assert sweep.stopped is not None and "sure to be within 1%" in sweep.stopped
    assert _trials(sweep) < TRIALS
    assert sweep.final == truth.best.cid
    assert sweep.node_s is not None and sweep.node_s > 0


def test_the_stop_rule_does_not_end_a_sweep_whose_leader_is_not_clear(tmp_path: Path) -> None:
    truth = GroundTruth(_study(tmp_path, CLOSE), "demo")
    sweep = emulate(truth, "default", 1, TRIALS)
    assert sweep.stopped is None
    assert _trials(sweep) == TRIALS


def test_with_two_groups_of_hardware_the_sweep_stops_when_each_groups_pick_is_sure(
        tmp_path: Path) -> None:
    """Each group has its own winner: a clear leader on one group does not end a sweep
    whose other group's leader is not clear, and the pooled trials of both are never
    ranked as one (a group's results compare within it)."""
    spec = _study(tmp_path, CLEAR)
    clear = emulate(GroundTruth(spec, "demo"), "default", 1, TRIALS)
    close = emulate(GroundTruth(_study(tmp_path, CLOSE), "demo"), "default", 1, TRIALS)
    assert clear.stopped is not None and close.stopped is None

    def tagged(trials: list[FrozenTrial], group: str, offset: int) -> list[FrozenTrial]:
        out = []
        for t in trials:
            t = copy.deepcopy(t)
            t.user_attrs = {**t.user_attrs, A.GROUP: group}
            t.number += offset
            out.append(t)
        return out

    a = tagged(clear.trials, "a", 0)
    b = tagged(close.trials, "b", len(a))
    one = sure_stop(spec, a, len(a), 10 * TRIALS)
    assert one is not None and "sure to be within 1%" in one.reason
    assert sure_stop(spec, a + b, len(a) + len(b), 10 * TRIALS) is None
    both = sure_stop(spec, a + tagged(clear.trials, "c", len(a)), 2 * len(a), 10 * TRIALS)
    assert both is not None and "group a: " in both.reason and "group c: " in both.reason


def test_stop_when_sure_1_never_stops_early(tmp_path: Path) -> None:
    truth = GroundTruth(_study(tmp_path, CLEAR, stop_when_sure=1), "demo")
    sweep = emulate(truth, "default", 1, TRIALS)
    assert sweep.stopped is None and _trials(sweep) == TRIALS


def _state(leader: list[list[float]], others: list[list[list[float]]], **kw: Any) -> StopState:
    base: dict[str, Any] = {"tau2": 0.015**2, "restarts": 12, "held": 8, "patience": 8,
                            "stop_when_sure": 0.95}
    base.update(kw)
    return StopState(leader, tuple(others), **base)


def _runs(mean: float, n: int = 10, cv: float = 0.05) -> list[float]:
    # a fixed, symmetric spread around the mean (no randomness in a unit test)
    return [mean * math.exp(cv * (i - (n - 1) / 2) / ((n - 1) / 2) * 1.7) for i in range(n)]


def test_should_stop_needs_exploration_a_held_level_and_two_starts_of_the_leader() -> None:
    clear = [_runs(110.0), _runs(109.0)]
    others = [[_runs(90.0)], [_runs(95.0), _runs(94.0)]]
    stop = should_stop(_state(clear, others))
    assert stop is not None and "no configuration more than 1% better" in stop.reason
    assert should_stop(_state(clear, others, restarts=7)) is None  # still exploring
    assert should_stop(_state(clear, others, held=3)) is None  # a new level just found
    assert should_stop(_state(clear[:1], others)) is None  # one start: maybe a lucky one
    assert should_stop(_state(clear, others, stop_when_sure=1.0)) is None
    # a leader 1.5% ahead on these runs is not sure to be within 1% of the runner-up
    assert should_stop(_state(clear, [[_runs(108.4), _runs(107.2)]])) is None


def test_emulated_start_noise_is_recovered_as_between_start_variance(tmp_path: Path) -> None:
    """Two configurations, each served on 100 fresh starts walking the study's prompt
    order: results/verdict.two_levels (what the loop's statistics read: runs by start,
    compared prompt by prompt) recovers the per-start speed sd the measurer drew."""
    spec = _study(tmp_path, CLEAR)
    truth = GroundTruth(spec, "demo")
    two = sorted(truth.space_cids, key=truth.true_tok_s)[-2:]
    recovered = {}
    for sd in (0.0, 0.03):
        m = EmulatedMeasurer(truth, 7, start_sd=sd)
        results = [ConfigResult(cid, {}, "config") for cid in two]
        for visit in range(100):
            for res in results:
                got = m.measure(truth.configs[res.config_id].launch, f"t{visit}",
                                spec.benchmark, first_round=10 * visit)
                assert not got.reused  # the other configuration ran in between
                runs = [r.tok_s for r in got.bench.runs]
                res.runs.extend(runs)
                res.starts.append(runs)
                res.positions.extend((int(r.position or 0), r.tok_s) for r in got.bench.runs)
        recovered[sd] = two_levels(results).sd
    assert recovered[0.03] == pytest.approx(0.03, abs=0.006)
    assert recovered[0.0] < 0.01


def test_emulated_runs_walk_the_study_prompt_order_and_record_it(tmp_path: Path) -> None:
    spec = _study(tmp_path, CLEAR)
    truth = GroundTruth(spec, "demo")
    m = EmulatedMeasurer(truth, 3)
    a = m.measure(truth.best.launch, "a", spec.benchmark, first_round=0).bench
    b = m.measure(truth.configs[truth.baseline_cid].launch, "b", spec.benchmark,
                  first_round=0).bench
    later = m.measure(truth.best.launch, "c", spec.benchmark, first_round=10).bench
    n = len(truth.prompts)
    assert [r.position for r in a.runs] == [r.position for r in b.runs] == list(range(10))
    assert [r.position for r in later.runs] == [(10 + i) % n for i in range(10)]
    order = truth.prompts.sequence
    assert [r.categories for r in a.runs] == [[truth.prompts.category(order[i])]
                                              for i in range(10)]
    # the ground truth is the mean over the prompt set; a prompt's category moves a run
    assert truth.prompt_effects
    factors = {truth.prompt_factor(i, 1.0) for i in range(n)}
    assert max(factors) / min(factors) > 1.05
    assert statistics.fmean(truth.prompt_factor(i, 0.0) for i in range(n)) == 1.0


def test_node_seconds_count_start_ups_runs_and_warm_ups() -> None:
    def trial(up: float, runs: list[float]) -> SimpleNamespace:
        return SimpleNamespace(user_attrs={A.STARTUP: up, A.RUNS: runs})

    trials = [trial(100.0, [50.0, 50.0]), trial(0.0, [100.0])]  # the second reused its server
    secs, source = spent_seconds(trials, max_tokens=100, warmup=1)
    assert secs == pytest.approx(100 + 3 * 2.0 + 1 * 1.0)  # a warm-up on a fresh start only
    assert source == "start-ups and runs as timed"
    secs, source = spent_seconds(trials, max_tokens=100, warmup=1, restart_s=480, run_s=6)
    assert secs == pytest.approx(480 + 3 * 6 + 1 * 6)
    assert "restart_cost" in source and "run_cost" in source


def test_the_sweep_stops_when_no_restart_left_is_worth_its_node_seconds() -> None:
    # a leader on one start and a close runner-up: never "sure", so only the cost half
    # can stop it
    lead = [_runs(100.0)]
    others = [[_runs(99.5)]]
    trial_s = 8 * 60 + 11 * 6.0
    # 10 restarts left, each expected to gain 0.001% at best: 0.01% in all, under the
    # 0.05% expected loss stop_when_sure 0.95 tolerates (5% of 1%)
    cheap = _state(lead, others, gains=(0.00001, 0.000005), remaining=10, trial_s=trial_s)
    stop = should_stop(cheap)
    assert stop is not None and "worth less than it costs" in stop.reason
    # the same gain with 100 restarts left adds up to more than is tolerated: go on
    assert should_stop(replace(cheap, remaining=100)) is None
    # a new configuration expected to gain 0.1%, or a replicate of a leader worth it
    assert should_stop(replace(cheap, gains=(0.001, 0.0))) is None
    assert should_stop(replace(cheap, gains=(0.0, 0.001))) is None
    # still exploring, a level just reached, or never stop early: no
    assert should_stop(replace(cheap, restarts=7)) is None
    assert should_stop(replace(cheap, held=3)) is None
    assert should_stop(replace(cheap, stop_when_sure=1.0)) is None
    # a sampler that says nothing about its gains (tpe, random): only "sure" stops it
    assert should_stop(replace(cheap, gains=None)) is None


def test_not_worth_a_restart_prices_a_node_second_by_what_stop_when_sure_tolerates() -> None:
    # 0.02% expected gain per restart, 3 left: 0.06% > 0.05% tolerated at 0.95
    assert not_worth_a_restart(0.0002, 0.0, 3, 600.0, 0.95) is None
    # at 0.9 (0.1% tolerated) the same restarts are not worth it
    why = not_worth_a_restart(0.0002, 0.0, 3, 600.0, 0.90)
    assert why is not None and "3 restarts left" in why
    assert not_worth_a_restart(0.0, 0.0, 0, 600.0, 0.95) is None  # nothing left anyway
