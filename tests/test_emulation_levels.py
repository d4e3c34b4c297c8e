"""The bench's emulated measurer on a study of several concurrency levels: every level on
one server start (what run/trial.py's TrialRunner does), each level's per-request speed
from the simulator's ground truth at that level, failures as the server would raise them.
Pure logic, in process (bench/levels_sharing.py's figures rest on it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.emulation import EmulatedMeasurer, GroundTruth, sweep_only
from sweeper.errors import ConfigurationFailure
from sweeper.search.sampler import make_sampler
from sweeper.study import parse_study

from .conftest import demo_study_data

LEVELS = [1, 8]
SPACE = {"speculative-num-steps": {"int": [1, 6]},
         "speculative-eagle-topk": {"choices": [1, 2, 4]},
         "speculative-num-draft-tokens": {"int": [2, 16]}}


@pytest.fixture()
def truth(tmp_path: Path) -> GroundTruth:
    data = demo_study_data(tmp_path, space=SPACE, benchmark={"concurrency": LEVELS},
                           objective={"mix": {1: 0.5, 8: 0.5}})
    return GroundTruth(parse_study(data, tmp_path / "t.yaml"), "demo")


def test_every_level_on_one_start_at_its_own_truth(truth: GroundTruth) -> None:
    best = truth.best
    m = EmulatedMeasurer(truth, 0, noise=False)
    got = m.measure(best.launch, "t1", truth.spec.benchmark)
    assert sorted(got.levels) == LEVELS and m.restarts == 1 and not got.reused
    per_request = {}
    for c, result in got.levels.items():
        expected = best.levels[c].tok_s
        assert expected is not None
        assert [len(run.requests) for run in result.runs] == [c] * truth.spec.benchmark.runs
        assert [run.per_request_tok_s for run in result.runs] == \
            pytest.approx([expected] * truth.spec.benchmark.runs)
        per_request[c] = result.runs[0].per_request_tok_s
    assert best.levels[8].tok_s != best.levels[1].tok_s  # the levels differ: worth checking
    # noise off: no prompt effect either, so the plain expectation (the optimum is the
    # mean over the study's prompt set when the profile's prompts move acceptance)
    assert truth.spec.objective.combine(per_request) == \
        pytest.approx(truth.plain_tok_s(best.cid))
    assert got.bench is got.levels[1]  # the primary level stands for the trial

    again = m.measure(best.launch, "t2", truth.spec.benchmark)
    assert again.reused and m.restarts == 1  # the same configuration: no restart
    assert [e.restarts for e in m.log] == [1, 1]
    assert m.log[0].runs.keys() == {1, 8}


def test_noise_is_drawn_per_request(truth: GroundTruth) -> None:
    m = EmulatedMeasurer(truth, 0)
    got = m.measure(truth.best.launch, "t1", truth.spec.benchmark)
    speeds = [r.tok_s for r in got.levels[8].runs[0].requests]
    assert len(set(speeds)) == 8


def test_a_failing_configuration_fails_on_its_restart(truth: GroundTruth) -> None:
    cid = next(c for c in truth.space_cids if truth.fails(c))
    m = EmulatedMeasurer(truth, 0, noise=False)
    with pytest.raises(ConfigurationFailure):
        m.measure(truth.configs[cid].launch, "t1", truth.spec.benchmark)
    assert m.restarts == 1 and m.log[-1].cid == cid and m.log[-1].runs == {}


def test_the_loop_measures_every_level_of_every_trial(truth: GroundTruth) -> None:
    spec = truth.spec
    sampler = make_sampler("random", 5, spec.sweep.n_startup_trials)
    log = sweep_only(truth, spec, sampler, 5, 6, noise=False).log
    assert len(log) >= 6 and log[-1].restarts <= len(log)
    served = [e for e in log if e.runs]
    assert served and all(e.runs.keys() == {1, 8} for e in served)


def test_each_level_sends_its_round_of_the_prompt_order(truth: GroundTruth) -> None:
    """With noise on, a run at level c sends the c prompts of its round (from first_round,
    every level alike) and records their position and categories, as the real client."""
    m = EmulatedMeasurer(truth, 3)
    got = m.measure(truth.best.launch, "t1", truth.spec.benchmark, first_round=4)
    prompts, n = truth.prompts, len(truth.prompts)
    for c, result in got.levels.items():
        for i, run in enumerate(result.runs):
            idxs = prompts.round_prompts(4 + i, c)
            assert [r.prompt_index for r in run.requests] == idxs
            assert run.position == ((4 + i) * c) % n
            assert run.categories == [prompts.category(j) for j in idxs]
    assert m.first_seen == {truth.best.cid: m.clock} and m.run_s > 0
