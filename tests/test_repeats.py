"""An accidental repeat of a measured configuration costs no restart; a deliberate
replicate (enqueued with ``is_deliberate_replicate``) is measured. The real CLI, the
simulator as a real process, a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

import sweeper.results.verdict as R
from sweeper.results import attrs as A
from sweeper.run.decide import REPEAT_LIMIT

from .conftest import run_cli

POINT = {"speculative-num-steps": 3, "speculative-eagle-topk": 1,
         "speculative-num-draft-tokens": 4}


def load(db: Path) -> optuna.Study:
    return optuna.load_study(study_name="t", storage=f"sqlite:///{db}")


def test_repeats_cost_no_restart_replicates_are_measured(make_study, tmp_path: Path) -> None:
    study_file = make_study(start_from=[POINT], baseline=False)
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "1")
    assert proc.returncode == 0, proc.stderr
    db = tmp_path / "t.db"
    first = load(db).get_trials()[0]
    assert first.state == TrialState.COMPLETE
    # the sampler proposes the measured configuration again and again (emulated by
    # enqueueing it), then the racing asks for a replicate on purpose
    study = load(db)
    for _ in range(REPEAT_LIMIT + 1):
        study.enqueue_trial(first.params)
    study.enqueue_trial(first.params, user_attrs={A.REPLICATE: True})
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("repeat, no restart") == REPEAT_LIMIT
    trials = sorted(load(db).get_trials(), key=lambda t: t.number)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * (REPEAT_LIMIT + 3)
    repeats, insisted, replicate = trials[1:-2], trials[-2], trials[-1]
    for t in repeats:
        assert t.user_attrs[A.REPEAT_OF] == [0]
        assert t.value == first.value  # the sampler hears what the configuration gave
        assert "server" not in t.user_attrs and A.RUNS not in t.user_attrs
        assert t.constraints == {"failed": 0.0}
    # after REPEAT_LIMIT in a row the sampler gets its replicate: the loop moves on
    assert "server" in insisted.user_attrs and not insisted.user_attrs.get(A.REPEAT_OF)
    assert "server" in replicate.user_attrs and len(replicate.user_attrs[A.RUNS]) == 2
    # pooled: the three measurements, never the repeats; --trials 2 meant two restarts
    [res] = R.config_results(trials)
    assert res.trials == [0, insisted.number, replicate.number] and len(res.runs) == 6
    status = run_cli("status", "--study", str(study_file))
    assert status.returncode == 0 and "repeat of 0, no restart" in status.stdout
