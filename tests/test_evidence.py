"""Evidence that belongs to one run (issue 10): each server start's own log and exit file,
artifacts per storage and study, one sweeper per study and host, every server found again
after a kill -9 at any moment. Real parts: the CLI as a subprocess, the simulator, SQLite."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from sweeper.errors import SweepLocked
from sweeper.results import attrs as A
from sweeper.results.storage import artifact_dir, artifact_store, delete_study, storage_key
from sweeper.run.lock import StudyLock
from sweeper.run.reconcile import counts_as_finished

from .conftest import (
    ROOT,
    demo_study_data,
    group_alive,
    recorded_pgids,
    run_cli,
    streaming_trial,
    wait_for,
)
from .test_optimize import failing_point
from .timeouts import scaled

NCCL = {"speculative-num-steps": 2, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 3, "env.NCCL_ALGO": "CollNetDirect"}
GOOD = {"speculative-num-steps": 2, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 3}


@pytest.fixture(autouse=True)
def _own_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the CLI subprocesses inherit it: locks of this test stay in this test
    monkeypatch.setenv("SWEEPER_LOCK_DIR", str(tmp_path / "locks"))


def write_study(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def load(db: Path, name: str = "t") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")


def marked_servers(storage_url: str, study: str = "t") -> set[int]:
    """Live process groups whose environment carries the study's marker: found on the
    machine itself, whatever the study recorded."""
    needle = f"SWEEPER_SERVER={storage_key(storage_url, study)}@".encode()  # any worker
    found = set()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if needle in environ.read_bytes():
                pid = int(environ.parent.name)
                with contextlib.suppress(OSError):
                    found.add(os.getpgid(pid))
    return {p for p in found if group_alive(p)}


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def trial_log(t: optuna.trial.FrozenTrial) -> str:
    return Path(t.user_attrs["server"]["log_path"]).read_text(errors="replace")


def test_fresh_runs_with_different_failures_at_one_trial_number(tmp_path: Path) -> None:
    # trial 1 runs out of memory in the first run, hits an NCCL error after --fresh: each
    # is classified from its own start's log (a shared trial-0001.log said oom twice)
    oom = failing_point("oom")
    path = tmp_path / "t.yaml"
    write_study(path, demo_study_data(tmp_path, start_from=[oom]))
    first = run_cli("optimize", "--study", str(path), "--trials", "2", "--no-confirm")
    assert first.returncode == 0, first.stderr
    assert load(tmp_path / "t.db").get_trials()[1].user_attrs["failure"] == "oom"
    data = demo_study_data(tmp_path, start_from=[NCCL])
    data["space"]["env.NCCL_ALGO"] = {"choices": ["unset", "Ring", "CollNetDirect"]}
    write_study(path, data)
    again = run_cli("optimize", "--study", str(path), "--trials", "2", "--no-confirm",
                    "--fresh", "--yes")
    assert again.returncode == 0, again.stderr
    t1 = load(tmp_path / "t.db").get_trials()[1]
    assert t1.state == TrialState.PRUNED
    assert t1.user_attrs["failure"] == "nccl", t1.user_attrs.get("failure_message")
    assert "out of memory" not in trial_log(t1).lower()


def test_two_checkouts_one_study_name_at_once(tmp_path: Path) -> None:
    # the same study name, the same host workdir (the default ~/.sweeper/<name> would be),
    # two storages: one's trial 1 runs out of memory while the other's is healthy
    oom = failing_point("oom")
    paths, dbs = [], []
    for checkout, point in (("a", oom), ("b", GOOD)):
        data = demo_study_data(tmp_path / checkout, start_from=[point])
        data["hosts"] = [{"ssh": "local", "workdir": str(tmp_path / "host")}]
        paths.append(write_study(tmp_path / checkout / "t.yaml", data))
        dbs.append(tmp_path / checkout / "t.db")
    procs = [subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", "--study", str(p),
                               "--trials", "2", "--no-confirm"], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for p in paths]
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=scaled(300))
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for db in dbs:
            for pgid in recorded_pgids(db):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
    a1, b1 = (load(db).get_trials()[1] for db in dbs)
    assert a1.state == TrialState.PRUNED and a1.user_attrs["failure"] == "oom"
    assert b1.state == TrialState.COMPLETE, b1.user_attrs.get("failure_message")
    assert Path(a1.user_attrs["server"]["log_path"]).parent != \
        Path(b1.user_attrs["server"]["log_path"]).parent
    # benchmark.flush_cache: the server flushed before each warm-up and measured run
    assert trial_log(b1).count("Cache flushed successfully!") == 1 + 2


def test_fresh_leaves_another_storages_artifacts(tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path / 'x.db'}", f"sqlite:///{tmp_path / 'y.db'}"]
    for url in urls:
        optuna.create_study(study_name="t", storage=url)
        artifact_store(url, "t")  # creates the folder, as a sweep does
        (artifact_dir(url, "t") / "evidence").write_text(url)
    assert artifact_dir(urls[0], "t") != artifact_dir(urls[1], "t")
    delete_study(urls[1], "t")  # what --fresh does
    assert (artifact_dir(urls[0], "t") / "evidence").read_text() == urls[0]
    assert not artifact_dir(urls[1], "t").exists()
    assert optuna.load_study(study_name="t", storage=urls[0]) is not None


def test_lock_per_study_and_host(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    held = StudyLock(url, "t", "gpu-1").acquire()
    try:
        with pytest.raises(SweepLocked, match=f"PID {os.getpid()}, started"):
            StudyLock(url, "t", "gpu-1").acquire()
        StudyLock(url, "t", "gpu-2").acquire().release()  # another host: its own worker
        StudyLock(url, "other", "gpu-1").acquire().release()
    finally:
        held.release()
    StudyLock(url, "t", "gpu-1").acquire().release()  # released: free again


def test_concurrent_optimize_is_refused_and_a_dead_holder_taken_over(tmp_path: Path) -> None:
    path = write_study(tmp_path / "t.yaml", demo_study_data(
        tmp_path, benchmark={"max_tokens": 400, "runs": 3, "warmup": 1}))
    # a budget the first sweep cannot finish while the second starts, however busy the
    # machine: it is killed once the second has been refused
    cmd = [sys.executable, "-m", "sweeper", "optimize", "--study", str(path), "--trials", "50",
           "--no-confirm"]
    first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        wait_for(lambda: streaming_trial(tmp_path / "t.db"), 120, "the first sweep streaming")
        second = run_cli(*cmd[3:])
        assert second.returncode == 2, second.stderr + second.stdout
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert f"PID {first.pid}" in second.stderr and "started" in second.stderr
        os.kill(first.pid, signal.SIGKILL)  # its lock dies with it
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    again = run_cli(*cmd[3:-3], "--trials", "1", "--no-confirm")  # the lock is free again
    assert again.returncode == 0, again.stderr
    assert not marked_servers(f"sqlite:///{tmp_path / 't.db'}")


KILLPOINTS = ["startup", "started", "benchmark", "confirm-started", "confirm-benchmark"]


@pytest.mark.parametrize("point", KILLPOINTS)
def test_kill_9_at_every_phase_resumes_with_nothing_left(tmp_path: Path, point: str) -> None:
    """SWEEPER_KILLPOINT makes the sweeper SIGKILL itself at that moment (run/killpoint.py);
    the same command then finishes the same target, confirm phase included, and no server
    of the study runs afterwards: found by its marker and its port, not by the records."""
    data = demo_study_data(tmp_path, sweep={"seed": 3, "confirm_top": 1, "confirm_runs": 2},
                           start_from=[GOOD])
    path = write_study(tmp_path / "t.yaml", data)
    url = data["storage"]
    args = ("optimize", "--study", str(path), "--trials", "2")
    killed = run_cli(*args, env={"SWEEPER_KILLPOINT": point})
    assert killed.returncode == -signal.SIGKILL, killed.stderr + killed.stdout
    if point in ("started", "benchmark", "confirm-started", "confirm-benchmark"):
        assert marked_servers(url), "the kill left a server running (what is tested here)"
    resumed = run_cli(*args)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    assert "resuming" in resumed.stdout, resumed.stdout
    study = load(tmp_path / "t.db")
    trials = study.get_trials()
    assert sum(counts_as_finished(t) for t in trials) == 2, "the same target, not 2 more"
    assert study.user_attrs.get(A.CONFIRMED), "the confirm phase ran to its end"
    assert not study.get_trials(states=(TrialState.RUNNING,))
    assert not marked_servers(url)
    assert not any(group_alive(p) for p in recorded_pgids(tmp_path / "t.db"))
    assert port_free(data["server"]["port"])


def test_5xx_for_the_whole_benchmark_fails_as_server_error(tmp_path: Path) -> None:
    data = demo_study_data(
        tmp_path, start_from=[], sweep={"seed": 3, "max_retries": 1},
        benchmark={"max_attempts": 2, "retry_wait_s": 0.05, "runs": 1, "warmup": 0})
    data["server"]["launcher"] += " --sim-fault http_500"
    path = write_study(tmp_path / "t.yaml", data)
    proc = run_cli("optimize", "--study", str(path), "--trials", "1", "--no-confirm")
    # the baseline is the trial here: a server that fails it fails every configuration,
    # and the sweep says so (run/failed.py) instead of ending as if its budget was spent
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert "the server without speculation (the baseline, trial 1) did not serve: " \
           "server_error" in proc.stderr, proc.stderr
    trials = load(tmp_path / "t.db").get_trials()
    # retried once (max_retries 1) as a fault outside the configuration, then its own
    assert [(t.state, t.user_attrs.get("failure")) for t in trials] == [
        (TrialState.FAIL, "server_error"), (TrialState.PRUNED, "server_error")]
    assert "Internal server error" in trials[1].user_attrs["log_tail"]
    # the stored server log carries the response body too
    texts = [p.read_text(errors="replace") for p in artifact_dir(data["storage"], "t").rglob("*")
             if p.is_file()]
    assert any("[sweeper]" in text and "Internal server error" in text for text in texts)
