"""An accidental repeat of a measured configuration costs no restart; a deliberate
replicate (enqueued with ``is_deliberate_replicate``) is measured. The real CLI, the
simulator as a real process, a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

import sweeper.results.verdict as R
from sweeper.results import attrs as A
from sweeper.run.sweep import REPEAT_LIMIT

from .conftest import run_cli

POINT = {"speculative-num-steps": 3, "speculative-eagle-topk": 1,
         "speculative-num-draft-tokens": 4}


def load(db: Path) -> optuna.Study:
    return optuna.load_study(study_name="t", storage=f"sqlite:///{db}")


def test_repeat_is_resolved_without_a_restart_and_a_replicate_is_measured(
        make_study, tmp_path: Path) -> None:
    study_file = make_study(start_from=[POINT], baseline=False)
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "1")
    assert proc.returncode == 0, proc.stderr
    db = tmp_path / "t.db"
    first = load(db).get_trials()[0]
    assert first.state == TrialState.COMPLETE
    # the sampler proposes the measured configuration again, twice (emulated by
    # enqueueing it), then the racing asks for a replicate on purpose
    study = load(db)
    study.enqueue_trial(first.params)
    study.enqueue_trial(first.params)
    study.enqueue_trial(first.params, user_attrs={A.REPLICATE: True})
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("repeat, no restart") == 2
    trials = sorted(load(db).get_trials(), key=lambda t: t.number)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    for t in trials[1:3]:
        assert t.user_attrs[A.REPEAT_OF] == [0]
        assert t.value == first.value  # the sampler hears what the configuration gave
        assert "server" not in t.user_attrs and A.RUNS not in t.user_attrs
        assert t.constraints == {"failed": 0.0}
    replicate = trials[3]
    assert "server" in replicate.user_attrs and len(replicate.user_attrs[A.RUNS]) == 2
    # pooled: the two measurements, never the repeats
    [res] = R.config_results(trials)
    assert res.trials == [0, 3] and len(res.runs) == 4
    # --trials 1 meant one restart: the repeats did not count
    status = run_cli("status", "--study", str(study_file))
    assert status.returncode == 0 and "repeat of 0, no restart" in status.stdout


def test_a_sampler_that_insists_gets_its_replicate(make_study, tmp_path: Path) -> None:
    study_file = make_study(start_from=[POINT], baseline=False)
    assert run_cli("optimize", "--study", str(study_file), "--trials", "1").returncode == 0
    db = tmp_path / "t.db"
    study = load(db)
    for _ in range(REPEAT_LIMIT + 1):
        study.enqueue_trial(study.get_trials()[0].params)
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "1")
    assert proc.returncode == 0, proc.stderr
    trials = sorted(load(db).get_trials(), key=lambda t: t.number)
    assert len(trials) == REPEAT_LIMIT + 2
    assert all(t.user_attrs.get(A.REPEAT_OF) for t in trials[1:-1])
    assert "server" in trials[-1].user_attrs  # measured: the loop moved on
