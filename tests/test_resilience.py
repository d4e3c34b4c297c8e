"""A sweep survives anything and loses nothing (issue 6), with the real parts:
the CLI as a subprocess, the simulator, SQLite."""

from __future__ import annotations

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

from sweeper.errors import SweepAborted
from sweeper.run.common import SweepOptions
from sweeper.run.workers import HostPool
from sweeper.study import load_study

from .conftest import ROOT, group_alive, recorded_pgids, run_cli, streaming_trial, wait_for
from .timeouts import scaled


def load(db: Path) -> optuna.Study:
    return optuna.load_study(study_name="t", storage=f"sqlite:///{db}")


def mid_benchmark(db: Path, proc: subprocess.Popen[str]):  # noqa: ANN201
    if proc.poll() is not None:
        out, err = proc.communicate()
        raise AssertionError(f"the sweeper exited early ({proc.returncode}): {out}{err}")
    return streaming_trial(db)


def _ctrl_c_as_at_a_terminal() -> None:
    # A suite started in the background without job control (`make test &` in a script,
    # nohup) inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored: the
    # sweeper would never see the Ctrl-C this test sends. At a terminal it is the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_sweep(study_file: Path, trials: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", "--study",
                             str(study_file), "--trials", str(trials)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_ctrl_c_as_at_a_terminal)


def test_kill_9_mid_trial_then_resume_loses_nothing(make_study, tmp_path: Path) -> None:
    # long enough runs that the kill lands mid-benchmark
    study_file = make_study(benchmark={"max_tokens": 400, "runs": 3, "warmup": 1})
    db = tmp_path / "t.db"
    proc = start_sweep(study_file, 4)
    try:
        victim = wait_for(lambda: mid_benchmark(db, proc), 60, "a trial mid-way")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    orphan = victim.user_attrs["server"]["pgid"]
    assert group_alive(orphan), "the server outlives a kill -9 of the sweeper"
    before = {t.number for t in load(db).get_trials()
              if t.state in (TrialState.COMPLETE, TrialState.PRUNED)}

    again = run_cli("optimize", "--study", str(study_file), "--trials", "4", timeout=240)
    assert again.returncode == 0, again.stderr + again.stdout
    assert "resuming" in again.stdout
    assert not group_alive(orphan), "the resumed sweep stopped the orphaned server"
    study = load(db)
    trials = {t.number: t for t in study.get_trials()}
    assert trials[victim.number].state == TrialState.FAIL
    assert trials[victim.number].user_attrs["failure"] == "interrupted"
    retry = [t for t in trials.values() if t.user_attrs.get("retry_of") == victim.number]
    assert len(retry) == 1 and retry[0].params == victim.params
    assert retry[0].state in (TrialState.COMPLETE, TrialState.PRUNED)
    done = [t for t in trials.values() if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(done) == 4, "the same command finished the requested 4 trials"
    assert before <= {t.number for t in done}, "nothing measured was lost"
    assert not any(group_alive(p) for p in recorded_pgids(db))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_server_and_requeues(make_study, tmp_path: Path, sig: int) -> None:
    study_file = make_study(benchmark={"max_tokens": 400, "runs": 3, "warmup": 1})
    db = tmp_path / "t.db"
    proc = start_sweep(study_file, 3)
    try:
        victim = wait_for(lambda: mid_benchmark(db, proc), 60, "a trial mid-way")
        os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=scaled(60))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, f"trial {victim.number} was mid-benchmark\n{out}\n{err}"
    assert "Resume with the same command: sweeper optimize" in err
    study = load(db)
    t = next(t for t in study.get_trials() if t.number == victim.number)
    assert t.state == TrialState.FAIL and t.user_attrs["failure"] == "interrupted"
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert any(w.params == victim.params and w.user_attrs.get("retry_of") == victim.number
               for w in waiting)
    assert not group_alive(victim.user_attrs["server"]["pgid"])


def test_port_busy_at_start_is_refused_before_anything(make_study, tmp_path: Path) -> None:
    study_file = make_study()
    port = yaml.safe_load(study_file.read_text())["server"]["port"]
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", port))
        stranger.listen()
        proc = run_cli("optimize", "--study", str(study_file), "--trials", "3")
    assert proc.returncode == 2
    assert f"port {port}" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "t.db").exists()


def test_port_taken_mid_sweep_fails_retries_then_stops(make_study, tmp_path: Path) -> None:
    spec = load_study(str(make_study(sweep={"max_retries": 1, "seed": 3})))
    pool = HostPool(spec, SweepOptions(trials=3))  # the loop optimize runs
    pool.open()  # preflight saw a free port
    with socket.socket() as stranger:  # ... then a stranger takes it
        stranger.bind(("127.0.0.1", spec.server.port))
        stranger.listen()
        with pytest.raises(SweepAborted, match=f"port {spec.server.port}"):
            pool.run()
    pool.done()
    study = load(tmp_path / "t.db")
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert all(t.user_attrs["failure"] == "port_busy" for t in failed)
    # max_retries 1: the host failed twice in a row for reasons outside the
    # configurations (the baseline, then the next), so it was retired and the sweep stopped
    assert len(failed) == 2 and failed[0].user_attrs["role"] == "baseline"
    assert not study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    # every failed configuration stays queued for the resume, which then measures it
    queued = study.get_trials(states=(TrialState.WAITING,))
    assert {t.number for t in failed} <= {t.user_attrs.get("retry_of") for t in queued}
    assert run_cli("optimize", "--study", str(spec.path), "--trials", "1").returncode == 0
    assert load(tmp_path / "t.db").get_trials(states=(TrialState.COMPLETE,))


def test_secrets_reach_the_server_but_nothing_written(make_study, tmp_path: Path) -> None:
    secret = "hf_sekrit_4242"
    study_file = make_study(server={"env": {"HF_TOKEN": secret, "NCCL_DEBUG": "WARN"}})
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "2", "--keep-best")
    assert proc.returncode == 0, proc.stderr
    kept = load(tmp_path / "t.db").user_attrs["sweeper:kept_server"]["pgid"]
    environ = Path(f"/proc/{kept}/environ").read_bytes().split(b"\0")
    assert f"HF_TOKEN={secret}".encode() in environ, "the server process gets the secret"
    out = tmp_path / "best.yaml"
    assert run_cli("export", "--study", str(study_file), "-o", str(out)).returncode == 0
    written = [tmp_path / "t.db", out, out.with_suffix(".env")]
    written += [p for p in tmp_path.rglob("*") if p.is_file() and "artifacts" in str(p)]
    for path in written:
        assert secret.encode() not in path.read_bytes(), path
    assert secret not in proc.stdout + proc.stderr
    assert "HF_TOKEN" in out.with_suffix(".env").read_text()


def test_consecutive_failures_stop_the_sweep(make_study, tmp_path: Path) -> None:
    # every configuration fails: the environment names a protocol NCCL does not have
    study_file = make_study(baseline=False, server={"env": {"NCCL_PROTO": "LL256"}},
                            sweep={"max_consecutive_failures": 2, "seed": 3})
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "10")
    assert proc.returncode == 1
    assert "2 trials in a row failed" in proc.stderr and "nccl" in proc.stderr
    study = load(tmp_path / "t.db")
    assert len(study.get_trials(states=(TrialState.PRUNED,))) == 2


def test_timeout_stops_starting_trials(make_study, tmp_path: Path) -> None:
    # 0.2 s: less than any trial takes (starting a server process alone takes longer)
    proc = run_cli("optimize", "--study", str(make_study()), "--trials", "10", "--timeout", "0.2")
    assert proc.returncode == 0, proc.stderr
    assert "ended (timeout)" in proc.stdout
    done = load(tmp_path / "t.db").get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    assert len(done) == 1  # the trial under way when the deadline passed was finished
