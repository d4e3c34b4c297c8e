"""The run folder on the host made unwritable mid-sweep (chattr +i; a full disk does the
same), or the node's disk full: an infrastructure fault, retried and then the sweep
stops; never a configuration's failure (the sampler must not learn that a good
configuration fails). Real parts: the simulator, SQLite, chattr, a small tmpfs."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweeper.errors import HostStorageError, SweepAborted
from sweeper.remote import LocalHost
from sweeper.remote.server import ServerHandle, ServerManager
from sweeper.remote.workdir import check_run_dir
from sweeper.run.common import SweepOptions
from sweeper.run.workers import HostPool
from sweeper.study import load_study

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("chattr") is None,
                                reason="needs root for chattr +i and mounting a tmpfs")


def _chattr(flag: str, path: str) -> None:
    subprocess.run(["chattr", flag, path], check=True)


def sweep(spec, trials: int) -> None:  # noqa: ANN001
    """The loop ``optimize`` runs, on the study's one host."""
    pool = HostPool(spec, SweepOptions(trials=trials))
    pool.open()
    try:
        pool.run()
    finally:
        pool.done()


def test_unwritable_run_folder_is_the_hosts_fault(make_study, tmp_path: Path) -> None:
    spec = load_study(str(make_study(sweep={"max_retries": 1, "seed": 3})))
    sweep(spec, 1)  # the baseline, and the run folder exists
    run_dir = next((tmp_path / "host").iterdir())
    _chattr("+i", str(run_dir))
    try:
        with pytest.raises(SweepAborted) as aborted:
            sweep(spec, 2)
    finally:
        _chattr("-i", str(run_dir))
    assert "cannot be written" in str(aborted.value) or "disk" in str(aborted.value)
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}")
    assert not study.get_trials(states=(TrialState.PRUNED,)), \
        "no configuration was blamed for the host's folder"
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert failed and all(t.user_attrs["failure"] == "host_storage" for t in failed)
    start_from = [t for t in failed if t.user_attrs.get("role") == "start_from"]
    assert start_from, "the start_from configuration was tried and not condemned"
    queued = study.get_trials(states=(TrialState.WAITING,))
    assert {t.user_attrs["retry_of"] for t in queued} >= {failed[-1].number}

    sweep(spec, 2)  # writable again: the same configs measured
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}")
    done = study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    assert any(t.params == start_from[0].params and t.state == TrialState.COMPLETE
               for t in done)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_on_the_node_says_so(small_disk: Path) -> None:
    host = LocalHost()
    check_run_dir(host, str(small_disk), min_free=1024 * 1024)  # 2 MiB free: fine
    with open(small_disk / "filler", "wb", buffering=0) as fh:
        for chunk in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * chunk)
    with pytest.raises(HostStorageError, match="disk full on the node"):
        check_run_dir(host, str(small_disk), min_free=1024 * 1024)


def test_a_start_that_left_nothing_is_not_a_crash(tmp_path: Path) -> None:
    """No output and no exit code (the wrapper could not write either): the host's."""
    manager = ServerManager(LocalHost(), str(tmp_path), "python3")
    handle = ServerHandle("local", 999_999, 1, "127.0.0.1", str(tmp_path / "gone.log"),
                          str(tmp_path / "gone.exit"), "c", 0.0)
    err = manager.failure_from_exit(handle, "during start-up")
    assert isinstance(err, HostStorageError), err
    (tmp_path / "gone.log").write_text("RuntimeError: CUDA error: an illegal memory access\n")
    assert not isinstance(manager.failure_from_exit(handle, "during start-up"),
                          HostStorageError), "a start that said something is classified"
