"""Two sweepers on two machines (two working directories here, each with its own host and
server port) share one study through PostgreSQL or a journal file: they split the work,
exactly N trials finish, none is measured twice at once, none is lost; a sweeper killed
with -9 mid-trial leaves the other going, and the next `optimize` runs the lost trial."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import FrozenTrial, TrialState

from sweeper.remote import free_port
from sweeper.results import attrs as A
from sweeper.results.storage import open_storage
from sweeper.run.reconcile import counts_as_finished

from .conftest import demo_study_data, group_alive, kill_group, run_cli, wait_for
from .pgdb import pg_url  # noqa: F401  (fixture)
from .test_hosts import assert_no_overlap
from .timeouts import scaled

TRIALS = 6


def machine(tmp_path: Path, name: str, storage: str) -> Path:
    """A working directory with its own copy of the study file: same study and storage,
    its own host (this machine) on its own port."""
    root = tmp_path / name
    root.mkdir()
    data = demo_study_data(tmp_path, storage=storage,
                           benchmark={"max_tokens": 300, "runs": 2, "warmup": 0})
    data["hosts"] = [{"ssh": "local", "workdir": str(root / "host")}]
    data["server"]["port"] = free_port()
    path = root / "t.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", "--study", str(path),
                             "--trials", str(TRIALS)], cwd=path.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "COLUMNS": "200"})


def trials_of(storage: str) -> list[FrozenTrial]:
    try:
        return optuna.load_study(study_name="t", storage=open_storage(storage)).get_trials()
    except Exception:  # not created yet
        return []


def running_of(storage: str, pid: int) -> FrozenTrial | None:
    """A trial the sweeper ``pid`` is benchmarking (its server is up and decoding)."""
    for t in trials_of(storage):
        server = t.user_attrs.get(A.SERVER)
        if t.state == TrialState.RUNNING and server and \
                (t.user_attrs.get(A.OWNER) or {}).get("pid") == pid and \
                "Decode batch" in Path(server["log_path"]).read_text(errors="replace"):
            return t
    return None


def cleanup(storage: str, *procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for t in trials_of(storage):
        if t.user_attrs.get(A.SERVER):
            kill_group(int(t.user_attrs[A.SERVER]["pgid"]))


def check_exactly(storage: str, n: int) -> list[FrozenTrial]:
    trials = trials_of(storage)
    done = [t for t in trials if counts_as_finished(t)]
    assert len(done) == n, [(t.number, t.state.name) for t in trials]
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert_no_overlap([t for t in trials if t.user_attrs.get(A.SERVER)])
    return done


@pytest.fixture(params=["postgresql", "journal"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "journal":
        return f"journal://{tmp_path / 'shared' / 't.journal'}"
    return str(request.getfixturevalue("pg_url"))


def test_two_sweepers_split_the_work(shared: str, tmp_path: Path) -> None:
    one, two = machine(tmp_path, "one", shared), machine(tmp_path, "two", shared)
    first = start(one)
    second = None
    try:
        # the second machine joins once the first has created the study and started
        wait_for(lambda: any(t.state == TrialState.RUNNING for t in trials_of(shared)), 60,
                 "the first sweeper's first trial")
        second = start(two)
        out1, err1 = first.communicate(timeout=scaled(240))
        out2, err2 = second.communicate(timeout=scaled(240))
    finally:
        cleanup(shared, first, *([second] if second else []))
    assert first.returncode == 0 and second.returncode == 0, err1 + err2
    done = check_exactly(shared, TRIALS)
    assert "sharing the sweep" in out2
    owners = {t.user_attrs[A.OWNER]["pid"] for t in done}
    assert owners == {first.pid, second.pid}, "both sweepers measured"


def test_kill_9_of_one_sweeper_the_other_goes_on_and_resume_runs_the_lost_trial(
        tmp_path: Path) -> None:
    shared = f"journal://{tmp_path / 'shared' / 't.journal'}"
    one, two = machine(tmp_path, "one", shared), machine(tmp_path, "two", shared)
    first = start(one)
    second = None
    try:
        wait_for(lambda: any(t.state == TrialState.RUNNING for t in trials_of(shared)), 60,
                 "the first sweeper's first trial")
        second = start(two)
        victim = wait_for(lambda: running_of(shared, second.pid), 120,
                          "the second sweeper mid-benchmark")
        os.kill(second.pid, signal.SIGKILL)
        second.wait(timeout=10)
        out1, err1 = first.communicate(timeout=scaled(240))
        assert first.returncode == 0, err1
        orphan = int(victim.user_attrs[A.SERVER]["pgid"])
        assert group_alive(orphan)  # the dead sweeper's server is still up
        done = [t for t in trials_of(shared) if counts_as_finished(t)]
        assert len(done) == TRIALS - 1  # the first did everything but the lost trial
        assert trials_of(shared)[victim.number].state == TrialState.RUNNING

        again = run_cli("optimize", "--study", str(two), "--trials", str(TRIALS),
                        cwd=two.parent, timeout=240)
        assert again.returncode == 0, again.stderr + again.stdout
    finally:
        cleanup(shared, first, *([second] if second else []))
    assert not group_alive(orphan), "the next optimize stopped the orphaned server"
    trials = trials_of(shared)
    assert trials[victim.number].state == TrialState.FAIL
    assert trials[victim.number].user_attrs[A.FAILURE] == "interrupted"
    retry = [t for t in trials if t.user_attrs.get(A.RETRY_OF) == victim.number]
    assert len(retry) == 1 and counts_as_finished(retry[0])
    check_exactly(shared, TRIALS)


