"""The storages several machines can share: PostgreSQL (Optuna's RDB storage over psycopg 3)
and Optuna's journal file. A real sweep on each, read back by `status`."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from sweeper.results import attrs as A
from sweeper.results.storage import open_storage
from tests.conftest import run_cli
from tests.pgdb import pg_url  # noqa: F401  (fixture)


def _sweep_and_read(make_study, storage: str) -> optuna.Study:
    study_file = make_study(storage=storage)
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "3")
    assert proc.returncode == 0, proc.stderr
    status = run_cli("status", "--study", str(study_file))
    assert status.returncode == 0 and "Best:" in status.stdout
    return optuna.load_study(study_name="t", storage=open_storage(storage))


def test_postgresql_storage(make_study, pg_url: str) -> None:  # noqa: F811
    study = _sweep_and_read(make_study, pg_url)
    done = [t for t in study.trials if t.state.is_finished()]
    assert len(done) >= 3 and study.user_attrs[A.SPACE]


def test_journal_storage(make_study, tmp_path: Path) -> None:
    path = tmp_path / "shared" / "t.journal"
    study = _sweep_and_read(make_study, f"journal://{path}")
    assert path.exists() and len(study.trials) >= 3


def test_unreachable_postgresql_is_one_line(make_study, tmp_path: Path) -> None:
    from sweeper.remote import free_port

    url = f"postgresql://postgres:hunter2@127.0.0.1:{free_port()}/nope"
    proc = run_cli("optimize", "--study", str(make_study(storage=url)), "--trials", "1")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "hunter2" not in proc.stderr  # the password is never shown
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("url", ["postgresql://", "journal://"])
def test_storage_url_without_a_target_is_refused(make_study, url: str) -> None:
    proc = run_cli("validate", "--study", str(make_study(storage=url)))
    assert proc.returncode == 2 and "storage" in proc.stderr
