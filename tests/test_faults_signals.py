"""Closing the terminal (SIGHUP) is handled as SIGTERM: the trial is recorded and queued
again, the server stopped, the lock released. Real parts: the CLI, the simulator, SQLite."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from .conftest import ROOT, SIM_LAUNCHER, group_alive, wait_for
from .test_resilience import _ctrl_c_as_at_a_terminal, load, mid_benchmark
from .timeouts import scaled


def _as_at_a_terminal() -> None:
    # a suite run under nohup would hand the sweeper SIGHUP ignored (which it respects)
    _ctrl_c_as_at_a_terminal()
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def start_sweep(study_file: Path, trials: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", "--study",
                             str(study_file), "--trials", str(trials)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_as_at_a_terminal)


def signal_mid_trial(proc: subprocess.Popen[str], db: Path, sig: int, within: float,
                     what: str, ready: Callable[[Any], bool] = lambda t: True
                     ) -> tuple[Any, str, str]:
    """Send ``sig`` to the sweeper once a trial is mid-benchmark and ``ready`` (within
    ``within`` s, scaled); wait for it to exit. Returns that trial (as read then) and the
    sweeper's output; the sweeper's group is killed if it outlives the test."""
    try:
        victim = wait_for(lambda: (t := mid_benchmark(db, proc)) is not None and ready(t)
                          and t, within, what)
        os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=scaled(60))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return victim, out, err


def test_sighup_records_requeues_and_stops_the_server(make_study, tmp_path: Path
                                                      ) -> None:  # noqa: ANN001
    study_file = make_study(benchmark={"max_tokens": 400, "runs": 3, "warmup": 1})
    db = tmp_path / "t.db"
    proc = start_sweep(study_file, 3)
    victim, out, err = signal_mid_trial(proc, db, signal.SIGHUP, 60, "a trial mid-way")
    assert proc.returncode == 130, f"trial {victim.number}\n{out}\n{err}"
    study = load(db)
    t = next(t for t in study.get_trials() if t.number == victim.number)
    assert t.state == TrialState.FAIL and t.user_attrs["failure"] == "interrupted"
    assert any(w.params == victim.params and w.user_attrs.get("retry_of") == victim.number
               for w in study.get_trials(states=(TrialState.WAITING,)))
    assert not group_alive(victim.user_attrs["server"]["pgid"]), "the server was stopped"
    assert not study.get_trials(states=(TrialState.RUNNING,))


def test_ctrl_c_releases_the_lock_and_says_the_sweeper_ended(make_study, tmp_path: Path
                                                             ) -> None:  # noqa: ANN001
    study_file = make_study(benchmark={"max_tokens": 400, "runs": 3, "warmup": 1})
    db = tmp_path / "t.db"
    locks = tmp_path / "locks"
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", "--study",
                             str(study_file), "--trials", "3"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_as_at_a_terminal,
                            env={**os.environ, "SWEEPER_LOCK_DIR": str(locks)})
    try:
        wait_for(lambda: mid_benchmark(db, proc), 60, "a trial mid-way")
        assert list(locks.glob("*.lock")), "the lock is held while it runs"
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=scaled(60))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out + err
    assert not list(locks.glob("*.lock")), "no lock file left behind"
    live = {k: v for k, v in load(db).user_attrs.items() if k.startswith("sweeper:live:")}
    assert live and all(v is None for v in live.values()), live


def _rounds_begun(t: object) -> int:
    """The benchmark rounds the trial's server has begun: one cache flush per round."""
    log = Path(t.user_attrs["server"]["log_path"])  # type: ignore[attr-defined]
    return log.read_text(errors="replace").count("Cache flushed successfully!")


def test_ctrl_c_mid_trial_keeps_its_completed_runs(make_study, tmp_path: Path
                                                   ) -> None:  # noqa: ANN001
    # 1 warm-up + 5 runs: the Ctrl-C lands once the warm-up and two measured runs are done
    study_file = make_study(benchmark={"max_tokens": 300, "runs": 5, "warmup": 1})
    db = tmp_path / "t.db"
    proc = start_sweep(study_file, 3)
    victim, out, err = signal_mid_trial(proc, db, signal.SIGINT, 90, "two measured runs done",
                                        ready=lambda t: _rounds_begun(t) >= 4)
    assert proc.returncode == 130, out + err
    study = load(db)
    t = next(t for t in study.get_trials() if t.number == victim.number)
    assert t.state == TrialState.FAIL and t.user_attrs["failure"] == "interrupted"
    kept = t.user_attrs.get("interrupted_runs")
    assert kept, f"the completed runs were thrown away\n{out}\n{err}"
    runs = [v for level in kept.values() for v in level]
    assert 2 <= len(runs) < 5 and all(v > 0 for v in runs), kept
    retry = [w for w in study.get_trials(states=(TrialState.WAITING,))
             if w.user_attrs.get("retry_of") == victim.number]
    assert len(retry) == 1 and retry[0].user_attrs["interrupted_runs"] == kept
    assert f"kept its {len(runs)} completed measured runs (" in out, out  # 2 to 4: plural
    assert not group_alive(victim.user_attrs["server"]["pgid"]), "the server was stopped"
    assert not study.get_trials(states=(TrialState.RUNNING,))


def test_sigterm_in_the_confirm_phase_stops_its_server(make_study, tmp_path: Path
                                                       ) -> None:  # noqa: ANN001
    """SIGTERM (a scheduler, `kill`) in the confirm phase takes the Ctrl-C path: the visit
    is closed, its server stopped. Killed by default there, the sweeper left the server
    running, holding a node's GPUs until the next start."""
    study_file = make_study(benchmark={"max_tokens": 400, "runs": 3, "warmup": 1},
                            sweep={"confirm_top": 1, "confirm_runs": 3})
    db = tmp_path / "t.db"
    proc = start_sweep(study_file, 2)
    victim, out, err = signal_mid_trial(
        proc, db, signal.SIGTERM, 120, "a confirm visit mid-way",
        ready=lambda t: t.user_attrs.get("role") in ("confirm", "baseline")
        and t.user_attrs.get("confirm") is True)
    assert proc.returncode == 130, f"trial {victim.number}\n{out}\n{err}"
    assert "interrupted during the confirm phase" in err, err
    study = load(db)
    assert not group_alive(victim.user_attrs["server"]["pgid"]), "the server was stopped"
    assert not study.get_trials(states=(TrialState.RUNNING,))


def test_sigterm_in_sweeper_confirm_stops_its_server(make_study, tmp_path: Path
                                                    ) -> None:  # noqa: ANN001
    """The same for the `confirm` command on its own, run after a sweep without one."""
    study_file = make_study(benchmark={"max_tokens": 400, "runs": 3, "warmup": 1},
                            sweep={"confirm_runs": 3})
    db = tmp_path / "t.db"
    swept = subprocess.run([sys.executable, "-m", "sweeper", "optimize", "--study",
                            str(study_file), "--trials", "2", "--no-confirm"], cwd=ROOT,
                           capture_output=True, text=True, timeout=scaled(180))
    assert swept.returncode == 0, swept.stderr
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", "confirm", "--study",
                             str(study_file), "--top", "1"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_as_at_a_terminal)
    victim, out, err = signal_mid_trial(
        proc, db, signal.SIGTERM, 120, "a confirm visit mid-way",
        ready=lambda t: t.user_attrs.get("confirm") is True)
    assert proc.returncode == 130, f"trial {victim.number}\n{out}\n{err}"
    study = load(db)
    assert not group_alive(victim.user_attrs["server"]["pgid"]), "the server was stopped"
    assert not study.get_trials(states=(TrialState.RUNNING,))


def _slow_stopping_sweep(make_study, tmp_path: Path, grace: str,  # noqa: ANN001
                         presses: int) -> tuple[Any, subprocess.Popen[str], str, str, bool]:
    """A one-trial sweep whose server is slow to stop (tests/hold_launcher.py
    ``slowstop``: SIGTERM stops the simulator, the launcher holds on, as a server freeing
    GPUs does): Ctrl-C mid-benchmark, then ``presses`` more once the server was told to
    stop. Returns the trial, the sweeper, its output and whether the server's group was
    alive when the sweeper had exited."""
    from .test_ctrl_c_early import HOLD

    sim = SIM_LAUNCHER.removeprefix("{python} ")
    study_file = make_study(
        baseline=False, benchmark={"max_tokens": 400, "runs": 3, "warmup": 1},
        server={"launcher": f"{{python}} {HOLD} slowstop {tmp_path} {scaled(120):g} {sim}",
                "stop_grace": grace})
    from sweeper.run.ctrlc import AGAIN

    db = tmp_path / "t.db"
    errors = tmp_path / "stderr.txt"
    with errors.open("w") as sink:  # a file, read while it runs: each press is seen
        proc = subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", "--study",
                                 str(study_file), "--trials", "1"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=sink, text=True,
                                start_new_session=True, preexec_fn=_as_at_a_terminal)
    victim = None
    try:
        victim = wait_for(lambda: mid_benchmark(db, proc), 60, "a trial mid-way")
        os.kill(proc.pid, signal.SIGINT)
        wait_for((tmp_path / "held-slowstop").exists, 60, "the server told to stop")
        for n in range(presses):  # impatient; each press once the one before was seen
            os.kill(proc.pid, signal.SIGINT)
            if n + 1 < presses:
                wait_for(lambda: AGAIN in errors.read_text(), 60, "the press said")
        out, _ = proc.communicate(timeout=scaled(60))
        alive = group_alive(victim.user_attrs["server"]["pgid"])
        err = errors.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if victim is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(victim.user_attrs["server"]["pgid"], signal.SIGKILL)
    return victim, proc, out, err, alive


def test_a_second_ctrl_c_does_not_leave_a_slow_stopping_server_running(
        make_study, tmp_path: Path) -> None:  # noqa: ANN001
    """A second Ctrl-C while the sweeper waits for its server to stop is said and absorbed:
    the stop goes on to its SIGKILL after stop_grace, nothing of the server is left, the
    trial is recorded."""
    from sweeper.run.ctrlc import AGAIN

    victim, proc, out, err, alive = _slow_stopping_sweep(make_study, tmp_path, "3s", 1)
    assert proc.returncode == 130, f"{out}\n{err}"
    assert AGAIN in err, err
    assert not alive, "the server was left running"
    study = load(tmp_path / "t.db")
    t = next(t for t in study.get_trials() if t.number == victim.number)
    assert t.state == TrialState.FAIL and t.user_attrs["failure"] == "interrupted"
    assert not study.get_trials(states=(TrialState.RUNNING,))


def test_a_third_ctrl_c_abandons_the_clean_up_and_says_so(make_study, tmp_path: Path
                                                          ) -> None:  # noqa: ANN001
    """One more press abandons the wait (a stop_grace of minutes is the user's to cut):
    the sweeper exits while the server still stops, and its line does not say "stopped"."""
    _, proc, out, err, alive = _slow_stopping_sweep(make_study, tmp_path, "10m", 2)
    assert proc.returncode == 130, f"{out}\n{err}"
    assert alive, "the sweeper waited for the server after all"
    assert "its clean-up abandoned: a server of this study may still be running" in err, err
    assert "stopped;" not in err, err

