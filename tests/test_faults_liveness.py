"""Who works on a study is seen through its storage (run/heartbeat.py): `--fresh` refuses
while another sweeper (any machine, any study file) sweeps it; a trial whose sweeper
stopped beating, or that never got an owner, is closed and queued again by any sweeper and
never counted in flight; `status` calls it stale. Real parts: the CLI, the simulator,
SQLite; the other machine is a trial whose owner names another host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from sweeper.remote.host import free_port
from sweeper.results import attrs as A
from sweeper.run.heartbeat import STALE_SECONDS
from sweeper.run.reconcile import counts_as_finished

from .conftest import ROOT, SIM_LAUNCHER, run_cli, wait_for
from .timeouts import duration, scaled

HOLD = ROOT / "tests" / "hold_launcher.py"


def _running(study: optuna.Study, started: datetime, **attrs: object) -> int:
    """A RUNNING trial as a dead or remote sweeper leaves it, with the study's params."""
    storage = study._storage
    done = study.get_trials(states=(TrialState.COMPLETE,))[-1]
    frozen = FrozenTrial(
        number=-1, state=TrialState.RUNNING, value=None, datetime_start=started,
        datetime_complete=None, params=done.params, distributions=done.distributions,
        user_attrs={A.ROLE: "sampler", **attrs}, system_attrs={}, intermediate_values={},
        trial_id=-1)
    tid = storage.create_new_trial(study._study_id, template_trial=frozen)
    return storage.get_trial(tid).number


def test_stale_and_ownerless_trials_are_closed_and_never_in_flight(make_study,
                                                                   tmp_path: Path) -> None:
    path = make_study()
    db = f"sqlite:///{tmp_path / 't.db'}"
    first = run_cli("optimize", "--study", str(path), "--trials", "2")
    assert first.returncode == 0, first.stderr
    study = optuna.load_study(study_name="t", storage=db)
    long_ago = datetime.now() - timedelta(seconds=STALE_SECONDS * 2)
    # killed between ask and the owner write (2 min ago: less than the old 5-minute grace)
    ownerless = _running(study, long_ago)
    # a sweeper on another machine that stopped beating
    remote_dead = _running(study, long_ago, owner={"machine": "node-b", "pid": 4242},
                           heartbeat=time.time() - STALE_SECONDS * 2)
    # a sweeper on another machine that is alive: left alone
    remote_alive = _running(study, datetime.now(), owner={"machine": "node-c", "pid": 7},
                            heartbeat=time.time() + 3600)

    status = run_cli("status", "--study", str(path), "--all")
    assert status.returncode == 0, status.stderr
    assert status.stdout.count("stale") >= 2, status.stdout

    again = run_cli("optimize", "--study", str(path), "--trials", "2")
    assert again.returncode == 0, again.stderr + again.stdout
    trials = {t.number: t for t in optuna.load_study(study_name="t", storage=db).get_trials()}
    for n in (ownerless, remote_dead):
        assert trials[n].state == TrialState.FAIL, (n, trials[n].state)
        assert any(t.user_attrs.get(A.RETRY_OF) == n for t in trials.values()), "re-queued"
    assert trials[remote_alive].state == TrialState.RUNNING, "a beating trial is left alone"
    done = [t.number for t in trials.values() if counts_as_finished(t)]
    assert len(done) == 3, [(t.number, t.state, t.user_attrs) for t in trials.values()]


def _second_file(path: Path, tmp_path: Path) -> Path:
    """The README's set-up for a second machine: the same name and storage, another port."""
    data = yaml.safe_load(path.read_text())
    data["server"]["port"] = free_port()
    data["hosts"][0]["workdir"] = str(tmp_path / "host-b")
    other = tmp_path / "b.yaml"
    other.write_text(yaml.safe_dump(data))
    return other


def test_fresh_refuses_while_another_sweeper_works_on_the_study(make_study,
                                                               tmp_path: Path) -> None:
    # the first sweeper's first server start is held until the second command has run:
    # it is certainly mid-sweep then (on a loaded machine it once finished all its trials
    # before the second command had even started, and --fresh rightly went through)
    sim = SIM_LAUNCHER.removeprefix("{python} ")
    path = make_study(benchmark={"max_tokens": 400, "runs": 3, "warmup": 1}, server={
        "launcher": f"{{python}} {HOLD} gate {tmp_path} {scaled(240):g} {sim}",
        "startup_timeout": duration(240), "hang_timeout": duration(240)})
    db = tmp_path / "t.db"
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", "--study", str(path),
                             "--trials", "3"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: proc.poll() is None and (tmp_path / "held-gate").exists(), 90,
                 "the first sweeper's first server start")
        fresh = run_cli("optimize", "--study", str(_second_file(path, tmp_path)),
                        "--trials", "1", "--fresh", "--yes")
        (tmp_path / "release-gate").touch()
        out, err = proc.communicate(timeout=scaled(240))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert fresh.returncode == 2, fresh.stdout + fresh.stderr
    lines = [ln for ln in fresh.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"PID {proc.pid} on " in lines[0], fresh.stderr
    assert "deleted" not in fresh.stdout
    assert proc.returncode == 0, err
    trials = optuna.load_study(study_name="t", storage=f"sqlite:///{db}").get_trials()
    assert sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials) == 3
    # ended cleanly: its beat says so, and --fresh now goes through
    fresh = run_cli("optimize", "--study", str(_second_file(path, tmp_path)), "--trials", "1",
                    "--fresh", "--yes")
    assert fresh.returncode == 0, fresh.stderr
    assert "deleted the" in fresh.stdout


def test_kill_between_ask_and_owner_write_does_not_cost_a_trial(make_study,
                                                                 tmp_path: Path) -> None:
    """Killed right after asking (the trial RUNNING with no owner), the same command run
    at once finishes every trial: the orphan is closed, not counted in flight."""
    path = make_study()
    env = {**os.environ, "SWEEPER_KILLPOINT": "asked:2"}
    killed = run_cli("optimize", "--study", str(path), "--trials", "3", env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    db = f"sqlite:///{tmp_path / 't.db'}"
    orphan = optuna.load_study(study_name="t", storage=db).get_trials(
        states=(TrialState.RUNNING,))
    assert len(orphan) == 1 and A.OWNER not in orphan[0].user_attrs
    # asked from the queue (the start_from point), it has no params yet: they must survive
    queued = orphan[0].system_attrs.get("fixed_params")
    assert queued, orphan[0].system_attrs
    again = run_cli("optimize", "--study", str(path), "--trials", "3")
    assert again.returncode == 0, again.stderr + again.stdout
    trials = optuna.load_study(study_name="t", storage=db).get_trials()
    assert sum(counts_as_finished(t) for t in trials) == 3, "not one short"
    assert next(t for t in trials if t.number == orphan[0].number).state == TrialState.FAIL
    retry = next(t for t in trials if t.user_attrs.get(A.RETRY_OF) == orphan[0].number)
    assert queued.items() <= retry.params.items(), "the queued configuration is retried"
    assert not [t for t in trials if t.state == TrialState.RUNNING]


def test_a_stale_trial_holds_no_place_in_the_budget() -> None:
    """Pure rule (run/claims.py): a trial whose sweeper stopped beating is not in flight."""
    from sweeper.run.claims import room

    def running(beat: float | None, **attrs: object) -> FrozenTrial:
        ua = dict(attrs) | ({A.HEARTBEAT: beat} if beat is not None else {})
        return FrozenTrial(number=len(attrs), state=TrialState.RUNNING, value=None,
                           datetime_start=datetime.now() - timedelta(hours=1),
                           datetime_complete=None, params={}, distributions={}, user_attrs=ua,
                           system_attrs={}, intermediate_values={}, trial_id=0)

    now = time.time()
    assert room([running(now, owner={"machine": "b", "pid": 1})], 2) == 1  # beating
    assert room([running(now - STALE_SECONDS - 1, owner={"machine": "b", "pid": 1})], 2) == 2
    assert room([running(None)], 2) == 2  # owner-less for an hour


def test_ctrl_c_between_ask_and_run_leaves_no_trial_running(make_study,
                                                            tmp_path: Path) -> None:
    """A Ctrl-C while a worker holds a trial it asked for but has not started (its storage
    slow: the test-only point holds it 3 s) waits for the worker: the trial is handed back
    (FAIL, saying why), not left RUNNING for the next start to close, and nothing is lost."""
    from .test_resilience import _ctrl_c_as_at_a_terminal

    path = make_study()
    env = {**os.environ, "SWEEPER_KILLPOINT": "claimed:1:int", "COLUMNS": "200"}
    # its Ctrl-C is the sweeper's own SIGINT: a suite started without job control hands
    # it SIGINT ignored, which the sweeper keeps (as under nohup)
    stopped = subprocess.run([sys.executable, "-m", "sweeper", "optimize", "--study",
                              str(path), "--trials", "3"], cwd=ROOT, capture_output=True,
                             text=True, timeout=scaled(300), env=env,
                             preexec_fn=_ctrl_c_as_at_a_terminal)
    assert stopped.returncode == 130, stopped.stderr + stopped.stdout
    db = f"sqlite:///{tmp_path / 't.db'}"
    trials = optuna.load_study(study_name="t", storage=db).get_trials()
    assert trials[0].state == TrialState.FAIL, [(t.number, t.state) for t in trials]
    assert trials[0].user_attrs.get(A.BACKED_OFF) == "the sweep was stopping"
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    again = run_cli("optimize", "--study", str(path), "--trials", "3")
    assert again.returncode == 0, again.stderr + again.stdout
    trials = optuna.load_study(study_name="t", storage=db).get_trials()
    assert sum(counts_as_finished(t) for t in trials) == 3
    assert not [t for t in trials if t.state == TrialState.RUNNING]


def test_a_baseline_that_cannot_serve_stops_the_sweep_and_is_measured_again(
        make_study, tmp_path: Path) -> None:  # noqa: ANN001
    """The server without speculation crashes: every configuration is that server and
    more, so the sweep stops at once (it went on to max_consecutive_failures restarts,
    each failing alike). Fixed, the same command measures the baseline again first."""
    from sweeper.results import attrs as A

    sim = SIM_LAUNCHER.removeprefix("{python} ")
    study_file = make_study(server={"launcher": f"{{python}} {HOLD} nobase {tmp_path} "
                                                f"{scaled(120):g} {sim}"})
    (tmp_path / "broken").touch()
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "4")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "error: sweep stopped: the server without speculation (the baseline, trial 0) " \
           "did not serve: crash" in proc.stderr, proc.stderr
    db = f"sqlite:///{tmp_path / 't.db'}"
    trials = optuna.load_study(study_name="t", storage=db).get_trials()
    ran = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert [t.user_attrs[A.ROLE] for t in ran] == [A.BASELINE], "no restart after it"
    (tmp_path / "broken").unlink()  # the server fixed
    again = run_cli("optimize", "--study", str(study_file), "--trials", "4")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "UserWarning" not in again.stderr, again.stderr  # its constraint set once
    study = optuna.load_study(study_name="t", storage=db)
    base = [t for t in study.get_trials(states=(TrialState.COMPLETE,))
            if t.user_attrs.get(A.ROLE) == A.BASELINE]
    assert len(base) == 1, "the baseline measured on the resume"
    assert "Speedup over baseline" in again.stdout, again.stdout
