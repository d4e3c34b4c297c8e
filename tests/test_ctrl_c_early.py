"""Ctrl-C in the first seconds of `sweeper optimize` (loading, the preflight, the first
server start) says, in one line, what was interrupted, what is kept and the exact command to
go on; and leaves nothing running. Real parts: the CLI as a process, SIGINT, the simulator,
SQLite. The launcher (tests/hold_launcher.py) holds at the moment under test, so the Ctrl-C
lands there and not where a sleep guessed."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweeper.run import ctrlc
from sweeper.run.interrupted import kept_line, stopped_line

from .conftest import ROOT, SIM_LAUNCHER, group_alive, wait_for
from .test_resilience import _ctrl_c_as_at_a_terminal, load
from .timeouts import duration, scaled

HOLD = ROOT / "tests" / "hold_launcher.py"


def _held_study(make_study, tmp_path: Path, mode: str) -> Path:  # noqa: ANN001
    sim = SIM_LAUNCHER.removeprefix("{python} ")
    return make_study(server={
        "launcher": f"{{python}} {HOLD} {mode} {tmp_path} {scaled(120):g} {sim}",
        # the held start logs nothing: neither deadline may end it before the Ctrl-C does
        "startup_timeout": duration(120), "hang_timeout": duration(120)})


def _sweep(args: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_ctrl_c_as_at_a_terminal,
                            env={**os.environ, "SWEEPER_LOCK_DIR": str(tmp_path / "locks")})


def _interrupt_when_held(proc: subprocess.Popen[str], marker: Path) -> tuple[int, str, str]:
    def held() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the sweeper exited first: {proc.communicate()}")
        return marker.exists()

    try:
        wait_for(held, 60, f"the launcher to hold ({marker.name})")
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=scaled(60))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out, err


def _the_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err  # one line, no traceback, no "Exception ignored"
    return lines[0]


def test_ctrl_c_during_the_preflight_says_nothing_started_and_gives_the_command_as_typed(
        make_study, tmp_path: Path) -> None:  # noqa: ANN001
    study = _held_study(make_study, tmp_path, "help")
    args = ["--study", str(study), "--trials", "3", "--fresh", "--yes"]
    code, out, err = _interrupt_when_held(_sweep(args, tmp_path), tmp_path / "held-help")
    assert code == 130, out + err
    # --fresh had not deleted anything yet: the command to give is the one typed, --fresh kept
    assert _the_line(err) == (
        "interrupted while starting (reading the study, checking the host), before any "
        "trial or server started. Run the same command again: sweeper optimize "
        + shlex.join(args))
    assert "Study 't'" not in out
    held = int((tmp_path / "held-help").read_text())
    assert not group_alive(held), "the preflight's --help was left running"
    assert not (tmp_path / "t.db").exists(), "nothing is created before the preflight passes"
    assert not list((tmp_path / "locks").glob("*.lock")), "the study's lock was released"


def test_ctrl_c_while_the_first_server_starts_names_the_trial_and_the_resume_works(
        make_study, tmp_path: Path) -> None:  # noqa: ANN001
    study = _held_study(make_study, tmp_path, "start")
    db = tmp_path / "t.db"
    args = ["--study", str(study), "--trials", "1", "--fresh", "--yes"]
    code, out, err = _interrupt_when_held(_sweep(args, tmp_path), tmp_path / "held-start")
    assert code == 130, out + err
    resume = ["--study", str(study), "--trials", "1"]  # --fresh would delete what it resumes
    assert _the_line(err) == (
        "interrupted: trial 0 was recorded as failed and queued again, its server stopped; "
        "no trial had finished yet. Resume with the same command: sweeper optimize "
        + shlex.join(resume))
    trials = load(db).get_trials()
    first = trials[0]
    assert first.state == TrialState.FAIL and first.user_attrs["failure"] == "interrupted"
    assert not group_alive(first.user_attrs["server"]["pgid"]), "the server was stopped"
    assert not group_alive(int((tmp_path / "held-start").read_text()))
    # queued again once: the worker thread, seeing its server stopped, does not queue it too
    assert [t.state for t in trials if t.user_attrs.get("retry_of") == 0] == \
        [TrialState.WAITING]
    # the printed command, run as printed, resumes towards the same target
    words = shlex.split(_the_line(err).split("Resume with the same command: ")[1])
    proc = _sweep(words[2:], tmp_path)
    out, err = proc.communicate(timeout=scaled(120))
    assert proc.returncode == 0, out + err
    assert "resuming the interrupted sweep: 0 of 1 trials were done, 1 to go" in out, out
    assert len([t for t in load(db).get_trials() if t.state == TrialState.COMPLETE]) == 1


def test_ctrl_c_while_the_cli_loads_is_one_line_not_a_traceback() -> None:
    # the import of the CLI (about a second on a busy machine), interrupted: made certain
    # by an import that raises KeyboardInterrupt, as SIGINT would there
    code = ("import builtins, sys\n"
            "real = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name == 'sweeper.cli':\n"
            "        raise KeyboardInterrupt\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
            "sys.argv = ['sweeper', 'optimize', '--study', 'demo', '--trials', '5']\n"
            "from sweeper.__main__ import main\n"
            "main()\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=scaled(60))
    assert proc.returncode == 130
    assert _the_line(proc.stderr) == (
        "interrupted while starting, before the command did anything. Run the same command "
        "again: sweeper optimize --study demo --trials 5")


def test_a_ctrl_c_a_finalizer_dropped_is_raised_at_the_next_check() -> None:
    class Thing:
        pass

    def press_ctrl_c(_: object) -> None:
        signal.raise_signal(signal.SIGINT)
        sum(range(1000))  # the handler runs here, inside the callback: Python drops it

    # a terminal's Ctrl-C: whoever started the tests may have left SIGINT ignored (a
    # background job of a shell without job control), and kept() rightly keeps it so
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with ctrlc.kept():
            thing = Thing()
            ref = weakref.ref(thing, press_ctrl_c)
            del thing  # the weakref callback runs; its KeyboardInterrupt is "ignored"
            assert ref() is None
            with pytest.raises(KeyboardInterrupt):
                ctrlc.raise_pending()
            ctrlc.raise_pending()  # raised once, not again
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_noted_ctrl_c_is_the_main_threads_alone() -> None:
    # a worker thread polling (a server start in the sweep's pool) neither raises it nor
    # clears it: the main thread's next check does
    import threading

    with ctrlc.kept():
        with pytest.raises(KeyboardInterrupt):
            ctrlc.note_and_raise(signal.SIGINT, None)
        raised: list[BaseException] = []

        def poll() -> None:
            try:
                ctrlc.raise_pending()
            except BaseException as exc:  # noqa: BLE001 - what it raised is the finding
                raised.append(exc)

        worker = threading.Thread(target=poll)
        worker.start()
        worker.join(timeout=10)
        assert not raised
        with pytest.raises(KeyboardInterrupt):
            ctrlc.raise_pending()


def test_an_ignored_sigint_stays_ignored() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # nohup, a background job
    try:
        with ctrlc.kept():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_lines_count_runs_and_trials_in_words() -> None:
    assert "kept its 1 completed measured run (101.0 tok/s)" in kept_line(4, {"1": [101.0]})
    assert "kept its 3 completed measured runs (1.0, 2.0, 3.0 tok/s)" in \
        kept_line(4, {"1": [1.0], "8": [2.0, 3.0]})
    resume = "Resume with the same command: sweeper optimize --study demo"
    assert stopped_line(opened=True, running=[5, 3], finished=1, resume=resume, again="") == (
        "interrupted: trials 3 and 5 were recorded as failed and queued again, their servers "
        "stopped; the study keeps its 1 finished trial. " + resume)
    assert stopped_line(opened=True, finished=12, resume=resume, again="") == (
        "interrupted: no trial was running and no server is left running; the study keeps "
        "its 12 finished trials. " + resume)
    assert "the study's trials are kept" in \
        stopped_line(opened=True, running=[2], resume=resume, again="")
    # --fresh had deleted: said, and the command as typed (it deletes nothing more now)
    again = "Run the same command again: sweeper optimize --study demo --fresh --yes"
    assert stopped_line(opened=False, deleted=1, resume=resume, again=again) == (
        "interrupted while starting (reading the study, checking the host), before any "
        "trial or server started; --fresh had deleted its 1 earlier trial. " + again)
