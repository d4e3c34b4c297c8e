"""The storage fails mid-sweep (issue 16): one line, exit 1, the server stopped, and the
measurement kept on local disk, then written into the storage by the next run, with no
trial left RUNNING. Real parts: the CLI as a subprocess, the simulator, SQLite on a file
made immutable (chattr +i) and on a full tmpfs."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from .conftest import ROOT, group_alive, streaming_trial, wait_for
from .timeouts import scaled

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("chattr") is None,
                                reason="needs root for chattr +i and mounting a tmpfs")


def _env(tmp_path: Path) -> dict[str, str]:
    # the fallback place for kept measurements, inside the test's folder
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}


def _sweep(study_file: Path, trials: int, tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", "--study",
                             str(study_file), "--trials", str(trials)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=_env(tmp_path))


def _study_file(make_study, db: Path) -> Path:  # noqa: ANN001
    path = make_study(benchmark={"max_tokens": 400, "runs": 3, "warmup": 1})
    data = yaml.safe_load(path.read_text())
    data["storage"] = f"sqlite:///{db}"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _break_mid_trial(study_file: Path, db: Path, tmp_path: Path, break_it, repair) -> tuple[
        optuna.trial.FrozenTrial, str]:  # noqa: ANN001
    """Start a sweep, break the storage while trial >= 1 is benchmarking, and return that
    trial and the sweeper's stderr once it has exited 1."""
    proc = _sweep(study_file, 2, tmp_path)
    try:
        victim = wait_for(lambda: proc.poll() is None and streaming_trial(db, min_number=1),
                          90, "a speculative trial mid-benchmark")
        break_it()
        try:
            _, err = proc.communicate(timeout=scaled(120))
        finally:
            repair()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1, err
    return victim, err


def _assert_kept_then_written(study_file: Path, db: Path, tmp_path: Path,
                              victim: optuna.trial.FrozenTrial, err: str) -> None:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: storage sqlite:///") and str(db) in lines[0]
    assert f"trial {victim.number}" in lines[0] and "kept in" in lines[0]
    assert "Traceback" not in err
    assert not group_alive(victim.user_attrs["server"]["pgid"]), "the server was stopped"

    again = subprocess.run([sys.executable, "-m", "sweeper", "optimize", "--study",
                            str(study_file), "--trials", "2"], cwd=ROOT, capture_output=True,
                           text=True, timeout=scaled(240), env=_env(tmp_path))
    assert again.returncode == 0, again.stderr + again.stdout
    assert f"trial {victim.number}: its measurement, kept on disk" in again.stdout
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{db}")
    trials = study.get_trials()
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    old = next(t for t in trials if t.number == victim.number)
    assert old.state == TrialState.FAIL and old.user_attrs["failure"] == "storage"
    written = [t for t in trials if t.user_attrs.get("replayed_from") == victim.number]
    assert len(written) == 1, "written in exactly once"
    new = written[0]
    assert new.state == TrialState.COMPLETE and new.params == victim.params
    assert len(new.user_attrs["tok_s_runs"]) == 3 and new.value > 0
    assert new.constraints == {"failed": 0.0}
    assert new.user_attrs["config_id"] == victim.user_attrs["config_id"]
    # not re-queued: the configuration was measured, its retry would waste a restart
    assert not [t for t in trials if t.user_attrs.get("retry_of") == victim.number]
    done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            and not t.user_attrs.get("skipped_known_failure")]
    assert len(done) == 2, "the measurement counts towards --trials"
    assert not list((tmp_path / "state").rglob("trial-*.json"))
    assert not list(db.parent.glob(".t.db.pending/*/trial-*.json")), "the kept file is gone"


def test_immutable_storage_keeps_the_measurement(make_study, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    study_file = _study_file(make_study, db)

    def chattr(flag: str) -> None:
        subprocess.run(["chattr", flag, str(db)], check=True)

    victim, err = _break_mid_trial(study_file, db, tmp_path, lambda: chattr("+i"),
                                   lambda: chattr("-i"))
    assert list(db.parent.glob(".t.db.pending/*/trial-*.json")), \
        f"kept beside the storage: {err} (state folder: " \
        f"{list((tmp_path / 'state').rglob('*'))})"
    _assert_kept_then_written(study_file, db, tmp_path, victim, err)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_keeps_the_measurement_elsewhere(make_study, tmp_path: Path,
                                                   small_disk: Path) -> None:
    db = small_disk / "t.db"
    study_file = _study_file(make_study, db)
    filler = small_disk / "filler"

    def fill() -> None:
        # to the last byte: a small kept file must not fit beside the storage
        with open(filler, "wb", buffering=0) as fh:
            for chunk in (65536, 4096, 1):
                with contextlib.suppress(OSError):
                    while True:
                        fh.write(b"\0" * chunk)

    victim, err = _break_mid_trial(study_file, db, tmp_path, fill,
                                   lambda: filler.unlink(missing_ok=True))
    assert list((tmp_path / "state").rglob("trial-*.json")), \
        "the disk beside the storage is full: kept in the user's state folder"
    _assert_kept_then_written(study_file, db, tmp_path, victim, err)
