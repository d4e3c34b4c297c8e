"""reconcile (run/reconcile.py) on a real SQLite study: what it takes for an orphan."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore
from optuna.trial import TrialState

from sweeper.remote.local import LocalHost
from sweeper.results import attrs as A
from sweeper.run.reconcile import UNOWNED_GRACE, reconcile
from sweeper.run.record import Recorder


def _running(study: optuna.Study, started: datetime) -> int:
    """A RUNNING trial with no owner yet, as another sweeper's ``ask`` leaves it."""
    storage = study._storage
    frozen = optuna.trial.FrozenTrial(
        number=-1, state=TrialState.RUNNING, value=None, datetime_start=started,
        datetime_complete=None, params={}, distributions={}, user_attrs={},
        system_attrs={}, intermediate_values={}, trial_id=-1)
    tid = storage.create_new_trial(study._study_id, template_trial=frozen)
    return storage.get_trial(tid).number


def test_a_trial_just_asked_by_another_sweeper_is_left_alone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")
    # another sweeper beats on the study (run/heartbeat.py): its young trial is its own
    study.set_user_attr(A.LIVE_PREFIX + "node-b:7", {"machine": "node-b", "pid": 7,
                                                    "at": time.time()})
    young = _running(study, datetime.now())
    old = _running(study, datetime.now() - UNOWNED_GRACE - timedelta(seconds=5))
    recorder = Recorder(study, study._storage, FileSystemArtifactStore(str(tmp_path)),
                        lambda s: s)
    lines: list[str] = []
    n = reconcile(study, recorder, LocalHost(), lambda h: None, lines.append)
    states = {t.number: t for t in study.get_trials()}
    assert n == 1
    assert states[young].state == TrialState.RUNNING  # its sweeper writes its owner next
    assert states[old].state == TrialState.FAIL
    assert states[old].user_attrs[A.FAILURE] == "interrupted"
