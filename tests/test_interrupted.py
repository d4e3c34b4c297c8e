"""A benchmark interrupted in the thread that runs the trial (run/step.py): the runs it
completed are kept on the trial and on its queued retry, the trial is FAIL (interrupted),
and the sweep stops. tests/test_faults_signals.py covers the other caller of the same
bookkeeping (run/interrupted.record_interrupted): a Ctrl-C to the sweeper's main thread,
through Worker.interrupt.

The loop is the product's (HostPool, run_trial, the Recorder on an Optuna storage); the
server is the bench's emulated measurer (the simulator's ground truth, a test double),
which raises the interruption the real benchmark client raises (BenchmarkInterrupted,
measure/client.py) at its second trial."""

from __future__ import annotations

import _thread
import re
import signal
import threading
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from bench.emulation import EmulatedMeasurer, GroundTruth, sampler_for
from sweeper.errors import BenchmarkInterrupted
from sweeper.remote import LocalHost
from sweeper.results import attrs as A
from sweeper.run.common import SweepOptions
from sweeper.run.interrupted import stopped_line
from sweeper.run.session import HostSession, create_study
from sweeper.run.trial import Measurement
from sweeper.run.workers import HostPool
from sweeper.study import parse_study

from .conftest import demo_study_data, wait_for

KEPT = {1: [41.5, 43.25]}  # the runs the interrupted benchmark completed, per level


class InterruptedAtSecond(EmulatedMeasurer):
    """The emulated measurer, whose second measurement is interrupted mid-benchmark."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0

    def measure(self, *args: Any, **kwargs: Any) -> Measurement:
        self.calls += 1
        if self.calls == 2:
            raise BenchmarkInterrupted(dict(KEPT))
        return super().measure(*args, **kwargs)


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def phase(self, text: str) -> None:
        pass

    def line(self, text: str) -> None:
        self.lines.append(text)

    def progress(self, done: int, total: int, note: str = "") -> None:
        pass


def _loop(tmp_path: Path, measurer_type: type[EmulatedMeasurer], report: Lines,
          notes: bool) -> tuple[optuna.Study, HostPool]:
    """The product's trial loop on the demo study (random sampler, seed 5, 4 trials), one
    host, measured by ``measurer_type`` (the emulated measurer or a variant of it)."""
    data = demo_study_data(tmp_path, sweep={"seed": 5, "sampler": "random", "confirm_top": 0})
    spec = parse_study(data, tmp_path / "t.yaml")
    truth = GroundTruth(spec, "demo")
    measurer = measurer_type(truth, 5, noise=False)
    options = SweepOptions(trials=4, storage=f"sqlite:///{tmp_path}/t.db", seed=5, notes=notes)
    storage = optuna.storages.InMemoryStorage()
    study = create_study(storage, spec, truth.space, sampler_for("random", truth, 5),
                         simulated=True)
    session = HostSession(spec, options, report)
    session.attach(study, storage, measurer, LocalHost())
    return study, HostPool(spec, options, sessions=[session], clock=measurer.now)


def test_an_interrupt_in_the_trials_thread_keeps_its_runs_and_requeues_it(
        tmp_path: Path) -> None:
    report = Lines()
    study, pool = _loop(tmp_path, InterruptedAtSecond, report, notes=False)
    with pytest.raises(KeyboardInterrupt):
        pool.run()

    trials = study.get_trials(deepcopy=False)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 1, [(t.number, t.state) for t in trials]
    victim = failed[0]
    kept = {str(level): runs for level, runs in KEPT.items()}
    assert victim.user_attrs[A.FAILURE] == "interrupted"
    assert victim.user_attrs[A.INTERRUPTED_RUNS] == kept
    retry = [t for t in trials if t.state == TrialState.WAITING
             and t.user_attrs.get(A.RETRY_OF) == victim.number]
    assert len(retry) == 1, [(t.number, t.state, t.user_attrs) for t in trials]
    assert retry[0].user_attrs[A.INTERRUPTED_RUNS] == kept
    # an interrupt is the user's doing, not an attempt that failed
    assert retry[0].user_attrs[A.ATTEMPT] == victim.user_attrs.get(A.ATTEMPT, 0)
    # queued: Optuna keeps its parameters as fixed until the retry is suggested
    assert retry[0].system_attrs["fixed_params"] == victim.params
    assert any(f"trial {victim.number} interrupted: kept its 2 completed measured runs "
               "(41.5, 43.2 tok/s)" in line for line in report.lines), report.lines
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert pool.summary.stopped_because in ("interrupted", "aborted")


class HeldAfterTell(Lines):
    """Holds the thread that prints the first trial's result line (printed after the trial
    was told, run/step._complete) until released: the window where a worker is still busy
    with a trial that has finished."""

    def __init__(self) -> None:
        super().__init__()
        self.number: int | None = None
        self.reached = threading.Event()
        self.release = threading.Event()

    def line(self, text: str) -> None:
        super().line(text)
        m = re.match(r"trial (\d+) \(.*tok/s", text)
        if m and self.number is None:
            self.number = int(m.group(1))
            self.reached.set()
            self.release.wait(60)  # bounded: the test releases it as soon as it has looked


def test_a_ctrl_c_after_a_trials_tell_names_no_trial_as_queued_again(tmp_path: Path) -> None:
    """Seen as a user: a Ctrl-C while trial 5's result was printed said "trial 5 was recorded
    as failed and queued again", and trial 5 was COMPLETE with nothing queued. The pool now
    names only the trials its workers found running."""
    report = HeldAfterTell()  # the result lines printed (notes on): the window it holds
    study, pool = _loop(tmp_path, EmulatedMeasurer, report, notes=True)

    def ctrl_c() -> None:
        if report.reached.wait(60):
            _thread.interrupt_main()  # SIGINT to the main thread, inside pool.run

    # interrupt_main does nothing while SIGINT is ignored (a suite started without job
    # control inherits it so): Python's own handler for the test's length
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=ctrl_c, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.run()
    finally:
        report.release.set()
        signal.signal(signal.SIGINT, previous)
    wait_for(lambda: all(w.busy is None for w in pool.workers), 30,
             "the held worker to finish its step and stop")
    assert report.number is not None
    assert pool.interrupted == []
    trials = study.get_trials(deepcopy=False)
    assert trials[report.number].state == TrialState.COMPLETE
    assert not [t for t in trials if t.state == TrialState.FAIL
                or A.RETRY_OF in t.user_attrs], [(t.number, t.state) for t in trials]
    assert stopped_line(opened=True, running=pool.interrupted, finished=1, resume="R",
                        again="").startswith("interrupted: no trial was running")
