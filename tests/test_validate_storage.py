"""`sweeper validate --storage URL`: the storage optimize will be given (the same option
as optimize, status and export), checked the way optimize opens it, creating nothing: no
file, no table, no study. Real parts: the CLI, SQLite, PostgreSQL when one answers."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from sweeper.run.common import SweepOptions
from sweeper.run.session import create_study, study_sampler
from sweeper.search.space import SearchSpace
from sweeper.study import load_study

from .conftest import run_cli
from .pgdb import pg_url  # noqa: F401  (fixture)


def _one_error_line(proc) -> str:  # noqa: ANN001
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert " ok " not in proc.stdout  # refused before "ok"
    return lines[0]


def _stored(study_file: Path, url: str) -> None:
    """The study as optimize creates it (signature, baseline and start_from queued)."""
    spec = load_study(str(study_file))
    space = SearchSpace(spec)
    create_study(optuna.storages.RDBStorage(url), spec, space,
                 study_sampler(spec, SweepOptions(), space), simulated=True)


def test_a_new_sqlite_file_is_named_and_not_created(make_study, tmp_path: Path) -> None:
    db = tmp_path / "elsewhere.db"
    proc = run_cli("validate", "--study", str(make_study()), "--storage", f"sqlite:///{db}")
    assert proc.returncode == 0, proc.stderr
    assert f"storage: sqlite:///{db}: a new file (optimize creates it)" in proc.stdout
    assert not db.exists() and not (tmp_path / "t.db").exists()


def test_a_stored_study_is_compared_with_the_file(make_study, tmp_path: Path) -> None:
    study_file = make_study()
    url = f"sqlite:///{tmp_path / 'kept.db'}"
    _stored(study_file, url)
    proc = run_cli("validate", "--study", str(study_file), "--storage", url)
    assert proc.returncode == 0, proc.stderr
    assert f"storage: {url}: holds study 't' (2 trials; optimize adds to it)" in proc.stdout
    # the same file with another range: optimize would refuse it; validate says so first
    data = yaml.safe_load(study_file.read_text())
    data["space"]["speculative-num-steps"] = {"int": [1, 5]}  # start_from has 5
    study_file.write_text(yaml.safe_dump(data, sort_keys=False))
    line = _one_error_line(run_cli("validate", "--study", str(study_file), "--storage", url))
    assert "space: differs from the study 't'" in line and "speculative-num-steps" in line
    # without --storage, the study file's own storage (none yet) is what is checked
    assert run_cli("validate", "--study", str(study_file)).returncode == 0


def test_storage_mistakes_are_one_line_and_touch_nothing(make_study, tmp_path: Path) -> None:
    study_file = str(make_study())
    line = _one_error_line(run_cli("validate", "--study", study_file, "--storage", "bogus"))
    assert line.startswith("error: --storage: unsupported storage URL 'bogus'; use sqlite")
    line = _one_error_line(run_cli("validate", "--study", study_file, "--storage",
                                   f"sqlite:///{tmp_path / 'no' / 'x.db'}"))
    assert f"directory {tmp_path / 'no'} does not exist" in line
    assert not (tmp_path / "no").exists()
    junk = tmp_path / "notes.sqlite"  # not *.db: the cleanup fixture reads those
    junk.write_text("not a database\n")
    line = _one_error_line(run_cli("validate", "--study", study_file, "--storage",
                                   f"sqlite:///{junk}"))
    assert "file is not a database" in line
    assert junk.read_text() == "not a database\n"
    from sweeper.remote import free_port

    refused = f"postgresql://postgres:hunter2@127.0.0.1:{free_port()}/nope"
    line = _one_error_line(run_cli("validate", "--study", study_file, "--storage", refused))
    assert "cannot open it" in line and "hunter2" not in line


def test_an_empty_database_gets_no_table(make_study, pg_url: str) -> None:  # noqa: F811
    import psycopg

    proc = run_cli("validate", "--study", str(make_study()), "--storage", pg_url)
    assert proc.returncode == 0, proc.stderr
    assert "reachable, no Optuna tables yet (optimize creates them)" in proc.stdout
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute("SELECT count(*) FROM information_schema.tables "
                              "WHERE table_schema = 'public'").fetchone()
    assert tables == (0,), "validate created tables"


def test_the_help_says_what_storage_is_checked() -> None:
    text = " ".join(run_cli("validate", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "--storage" in text and "Nothing is created in it." in text
