"""Writes the storage answers without keeping: read back, found, and sent the storage-fault
way (kept on disk, one line, exit 1), then written in by the next run. Real parts: the CLI
as a subprocess, the simulator, SQLite with a trigger that refuses a write (Optuna's RDB
storage swallows that IntegrityError and returns False from ``tell``)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import optuna
from optuna.trial import TrialState

from .conftest import run_cli

REFUSE = ("CREATE TRIGGER refuse BEFORE INSERT ON trial_values "
          "BEGIN SELECT RAISE(ABORT, 'refused by a test trigger'); END")


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}


def _sql(db: Path, statement: str) -> None:
    with sqlite3.connect(db) as con:
        con.execute(statement)


def test_tell_that_did_not_take_is_kept_and_written_in_later(make_study, tmp_path: Path
                                                             ) -> None:  # noqa: ANN001
    db = tmp_path / "t.db"
    path = make_study()
    first = run_cli("optimize", "--study", str(path), "--trials", "1", env=_env(tmp_path))
    assert first.returncode == 0, first.stderr
    _sql(db, REFUSE)  # a storage that takes small writes but not the trial's value

    proc = run_cli("optimize", "--study", str(path), "--trials", "1", env=_env(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "did not take the write" in lines[0] and "kept in" in lines[0], lines[0]
    kept = list(db.parent.glob(".t.db.pending/*/trial-*.json"))
    assert len(kept) == 1, "kept on local disk"
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{db}")
    victim = next(t for t in study.get_trials() if t.state == TrialState.RUNNING)

    _sql(db, "DROP TRIGGER refuse")
    again = run_cli("optimize", "--study", str(path), "--trials", "1", env=_env(tmp_path))
    assert again.returncode == 0, again.stderr
    trials = optuna.load_study(study_name="t", storage=f"sqlite:///{db}").get_trials()
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    written = [t for t in trials if t.user_attrs.get("replayed_from") == victim.number]
    assert len(written) == 1 and written[0].state == TrialState.COMPLETE
    assert written[0].value is not None and written[0].value > 0
    assert not list(db.parent.glob(".t.db.pending/*/trial-*.json"))


def test_half_failed_replay_is_completed_not_lost(make_study, tmp_path: Path
                                                  ) -> None:  # noqa: ANN001
    """The replay's trial is created (small writes work) but its value is refused: the file
    stays; the next run finishes that same trial; nothing is measured twice."""
    db = tmp_path / "t.db"
    path = make_study()
    assert run_cli("optimize", "--study", str(path), "--trials", "1",
                   env=_env(tmp_path)).returncode == 0
    _sql(db, REFUSE)
    assert run_cli("optimize", "--study", str(path), "--trials", "1",
                   env=_env(tmp_path)).returncode == 1
    kept = list(db.parent.glob(".t.db.pending/*/trial-*.json"))
    assert len(kept) == 1

    half = run_cli("optimize", "--study", str(path), "--trials", "1", env=_env(tmp_path))
    assert half.returncode == 1, half.stdout + half.stderr
    assert "still fails" in half.stderr and str(kept[0]) in half.stderr, half.stderr
    assert kept[0].exists(), "the kept file stays until the trial is read back finished"
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{db}")
    halves = [t for t in study.get_trials() if "replay_id" in t.user_attrs]
    assert len(halves) == 1 and halves[0].state == TrialState.RUNNING

    _sql(db, "DROP TRIGGER refuse")
    again = run_cli("optimize", "--study", str(path), "--trials", "1", env=_env(tmp_path))
    assert again.returncode == 0, again.stderr
    trials = optuna.load_study(study_name="t", storage=f"sqlite:///{db}").get_trials()
    replays = [t for t in trials if "replay_id" in t.user_attrs]
    assert [t.number for t in replays] == [halves[0].number], "finished, not created twice"
    assert replays[0].state == TrialState.COMPLETE and replays[0].value > 0
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    origin = replays[0].user_attrs["replayed_from"]
    assert not [t for t in trials if t.user_attrs.get("retry_of") in (origin, halves[0].number)], \
        "a measured configuration is not queued again"
    assert not kept[0].exists()
