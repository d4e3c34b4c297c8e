"""One worker per host, all asking the same study.

Each entry of ``hosts:`` gets a worker thread with its own SSH connection, tunnel,
workdir, server port and failure handling: a ``Sweep`` over a one-host view of the study
(``host_view``), so a trial's life is the same code whether one host or ten run it. What
the workers share lives in the storage, so sweepers on several machines share it too:

* the budget (``Budget``: a second sweeper with the same ``--trials`` joins the first's
  target) and who may start a trial (run/claims.py): exactly N trials finish in total;
* pending trials: TPE's constant liar sees every RUNNING trial, and a configuration in
  flight in a group is never started again until it has finished;
* each trial's host and group, and each host's state (results/hosts.py) for `status`.

A host whose infrastructure fails more than ``sweep.max_retries`` times in a row is
retired; its interrupted trial was queued again and another host takes it. In one
process, asking, suggesting and recording a trial's configuration happen under one lock
(the sampler sees each proposal before the next; SQLite keeps one writer at a time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable

import optuna
from optuna.trial import Trial, TrialState

from sweeper.errors import InfrastructureError, InputError
from sweeper.launch import LaunchConfig
from sweeper.remote import Host
from sweeper.remote.groups import detect_group
from sweeper.remote.server import ServerHandle
from sweeper.results import attrs as A
from sweeper.results.hosts import DONE, IDLE, RETIRED, RUNNING, STARTING, record_host
from sweeper.run.claims import admitted, duplicate_of, needs_baseline, room
from sweeper.run.hostview import Prefixed, host_view
from sweeper.run.killpoint import killpoint
from sweeper.run.progress import NullReporter, Reporter
from sweeper.run.reconcile import (
    Budget,
    counts_as_finished,
    finished_count,
    reconcile,
    requeue,
)
from sweeper.run.sweep import (
    SKIP_LIMIT_FACTOR,
    Sweep,
    SweepAborted,
    SweepOptions,
    SweepSummary,
    _sigterm_as_interrupt,
    storage_guard,
)
from sweeper.search.failures import FailureMemory
from sweeper.study import StudySpec

BACKOFF_SECONDS = 1.0
DUPLICATE_TRIES = 3  # proposals in a row already in flight elsewhere before waiting


class NoRoom(Exception):
    """The budget has no trial left for this worker to start."""


class Busy(Exception):
    """Every proposal is already being measured elsewhere: wait, then ask again."""


class Worker(Sweep):
    """One host's worker: a Sweep whose next trial is claimed from the shared budget."""

    def __init__(self, pool: HostPool, index: int, options: SweepOptions, reporter: Reporter,
                 host: Host | None, python: str | None) -> None:
        super().__init__(host_view(pool.spec, index), options, reporter, host, python)
        self.pool = pool
        self.index = index
        self.label = pool.spec.hosts[index].label
        self.group = pool.spec.hosts[index].group or ""
        self.busy: int | None = None  # the trial it is running
        self.retired = ""

    def next_trial(self) -> Trial:
        return self.pool.claim(self)

    def record(self, state: str, trial: int | None = None, why: str = "") -> None:
        with contextlib.suppress(Exception):  # the storage may be what failed
            record_host(self.study, self.label, state, group=self.group, trial=trial, why=why)

    def interrupt(self) -> None:
        """Ctrl-C: its trial recorded as interrupted and queued again, its server stopped."""
        number = self.busy
        if number is not None:
            with contextlib.suppress(Exception):
                t = self.study.get_trials(deepcopy=False)[number]
                if t.state == TrialState.RUNNING:
                    self.recorder.fail(self.recorder.slot_of(number), "interrupted",
                                       "interrupted by the user (Ctrl-C / SIGTERM)")
                    requeue(self.study, t, count_attempt=False)
        self.runner.stop(best_effort=True)


class HostPool:
    """All the study's hosts, one worker each, sharing one budget."""

    def __init__(self, spec: StudySpec, options: SweepOptions, reporter: Reporter | None = None,
                 hosts: list[tuple[Host, str]] | None = None) -> None:
        self.spec = spec
        self.options = options
        self.report: Reporter = reporter or NullReporter()
        many = len(spec.hosts) > 1
        self.workers: list[Worker] = []
        for i in range(len(spec.hosts)):
            opts = dataclasses.replace(
                options, seed=options.seed + i if options.seed is not None else None,
                keep_best=options.keep_best and i == 0)
            host, python = hosts[i] if hosts else (None, None)
            self.workers.append(Worker(self, i, opts, Prefixed(self.report, spec.hosts[i].label,
                                                                many), host, python))
        self.primary = self.workers[0]
        self.storage_url = self.primary.storage_url
        self.summary = SweepSummary(spec.name, self.storage_url,
                                    simulated=self.primary.summary.simulated)
        self.target = 0
        self._lock = threading.Lock()  # ask + suggest + record, one worker at a time
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._consecutive = 0
        self._skipped = 0
        self._memories: dict[str, FailureMemory] = {}
        self._with_baseline: set[str] = set()  # groups whose baseline is settled

    @property
    def study(self) -> optuna.Study:
        return self.primary.study

    @property
    def live(self) -> list[Worker]:
        return [w for w in self.workers if not w.retired]

    # --- set-up -------------------------------------------------------------------------
    def open(self, require_existing: bool = False, fresh: bool = False,
             allow_delete: Callable[[int], bool] | None = None) -> optuna.Study:
        """The first reachable host opens (and may create) the study; the others join it.
        An unreachable host among several is retired, not a reason to stop."""
        opened: list[Worker] = []
        for w in self.workers:
            if self._open_one(w, require_existing, fresh, allow_delete):
                opened.append(w)
                break
        if not opened:
            raise InputError(f"{self.spec.path}: hosts: no host is reachable")
        self.primary = opened[0]
        rest = [w for w in self.workers if w is not self.primary and not w.retired]
        threads = [threading.Thread(target=self._open_guarded, args=(w, require_existing),
                                    daemon=True) for w in rest]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self._error is not None:
            raise self._error
        launcher = LaunchConfig(self.spec.server.launcher)
        for w in self.live:
            if not w.group:
                try:
                    w.group = detect_group(w.host, launcher.launcher_argv(w.python))
                except InfrastructureError as exc:
                    self._retire(w, f"unreachable while reading its GPU type: {exc}")
                    continue
            w.memory = self._memories.setdefault(w.group, FailureMemory())
        for w in self.workers:
            if w.retired and hasattr(w, "study"):
                w.record(RETIRED, why=w.retired)
            elif w.retired:
                with contextlib.suppress(Exception):
                    record_host(self.study, w.label, RETIRED, group=w.group or None,
                                why=w.retired)
            else:
                w.record(STARTING)
        return self.study

    def _open_one(self, w: Worker, require_existing: bool, fresh: bool = False,
                  allow_delete: Callable[[int], bool] | None = None) -> bool:
        try:
            w.open(require_existing=require_existing, fresh=fresh, allow_delete=allow_delete)
            return True
        except InputError as exc:
            if len(self.workers) > 1 and isinstance(exc.__cause__, InfrastructureError):
                self._retire(w, f"unreachable at start: {exc.__cause__}")
                return False
            raise

    def _open_guarded(self, w: Worker, require_existing: bool) -> None:
        try:
            self._open_one(w, require_existing)
        except BaseException as exc:  # handed to the main thread
            self._error = exc

    def _retire(self, w: Worker, why: str) -> None:
        w.retired = why
        self.report.line(f"[red]host {w.label} retired[/]: {why}")
        if hasattr(w, "study"):
            w.record(RETIRED, why=why)

    # --- claiming a trial --------------------------------------------------------------
    def claim(self, w: Worker) -> Trial:
        """A trial for ``w`` to run: room in the budget, its group's baseline first, and
        never a configuration in flight elsewhere in the group (run/claims.py)."""
        for _ in range(DUPLICATE_TRIES):
            # Only asking, suggesting and recording the configuration hold the lock (the
            # sampler must see each proposal before the next); the budget and duplicate
            # rules read the storage and hold across processes without it.
            if room(w.study.get_trials(deepcopy=False), self.target) <= 0:
                raise NoRoom
            with self._lock:
                trial, created = self._ask(w)
                killpoint("asked")  # test-only: a kill before the trial names its owner
                queued = A.ROLE in trial.user_attrs and not created
                role = str(trial.user_attrs.get(A.ROLE, A.SAMPLER))
                config = w.space.baseline_config() if role == A.BASELINE else \
                    w.space.launch_config(w.space.suggest(trial))
                w.recorder.set(w.recorder.slot(trial), **{
                    A.HOST: w.label, A.GROUP: w.group, A.CONFIG_ID: config.config_id()})
            trials = w.study.get_trials(deepcopy=False)
            if not admitted(trials, trial.number, self.target):
                self._hand_back(w, trial, queued, "another sweeper took the last trial")
                raise NoRoom
            other = duplicate_of(trials, trial.number, config.config_id(), w.group)
            if other is None:
                w.busy = trial.number
                # the live output numbers trials across all hosts: "(7/24)"
                done = sum(counts_as_finished(t) for t in trials)
                w.summary.resumed_from = done - (self.target - self.options.trials) \
                    - w.summary.finished
                w.record(RUNNING, trial=trial.number)
                return trial
            self._hand_back(w, trial, queued, f"trial {other} is measuring the same "
                                              "configuration")
        raise Busy

    def _ask(self, w: Worker) -> tuple[Trial, bool]:
        """The study's next trial, or a baseline created for ``w``'s group when it has
        none (True: created, not asked). Called under the lock."""
        if self.spec.baseline and w.group not in self._with_baseline:
            trials = w.study.get_trials(deepcopy=False)
            if needs_baseline(trials, w.group):
                slot = w.recorder.new_running({}, {}, {A.ROLE: A.BASELINE})
                return Trial(w.study, slot.trial_id), True
            if any(t.user_attrs.get(A.ROLE) == A.BASELINE and t.user_attrs.get(A.GROUP)
                   == w.group and t.state != TrialState.FAIL for t in trials):
                self._with_baseline.add(w.group)  # measured or in flight there: settled
        return w.study.ask(), False

    def _hand_back(self, w: Worker, trial: Trial, queued: bool, why: str) -> None:
        """Give up a trial before any restart: FAIL (invisible to the sampler), and its
        parameters queued again when they came from the queue."""
        w.recorder.set(w.recorder.slot(trial), **{A.BACKED_OFF: why})
        if queued:
            requeue(w.study, trial, count_attempt=False)
        w.study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)

    # --- the loop -----------------------------------------------------------------------
    def run(self) -> SweepSummary:
        with storage_guard(self.summary, self.storage_url):
            return self._run()

    def _run(self) -> SweepSummary:
        study = self.study
        self.primary._replay_pending()
        self.summary.reconciled = reconcile(
            study, self.primary.recorder, [w.host for w in self.live], self._stop_handle,
            self.report.line)
        self._load_memory(study)
        budget = Budget.of(study, self.options.trials)
        self.target = budget.target
        self.summary.resumed_from = budget.done - budget.start
        self.report.line(budget.describe(self.options.trials))
        budget.save(study, self.options.trials)
        self.budget = budget
        killpoint("startup")
        self.report.progress(budget.done - budget.start, self.options.trials)
        deadline = time.monotonic() + self.options.timeout if self.options.timeout else None
        threads = [threading.Thread(target=self._work, args=(w, deadline), daemon=True,
                                    name=f"sweeper-{w.label}") for w in self.live]
        try:
            with _sigterm_as_interrupt():
                for t in threads:
                    t.start()
                while any(t.is_alive() for t in threads):
                    for t in threads:
                        t.join(0.2)
        except KeyboardInterrupt:
            self._stop.set()
            self.summary.stopped_because = "interrupted"
            for w in self.workers:
                with contextlib.suppress(Exception):
                    w.interrupt()
            raise
        finally:
            self._finish()
        if self._error is not None:
            raise self._error
        if not self.live and finished_count(study) < self.target:
            raise SweepAborted("every host was retired: "
                               + "; ".join(f"{w.label}: {w.retired}" for w in self.workers)
                               + ". Fix the hosts, then run the same command to resume")
        return self.summary

    def _load_memory(self, study: optuna.Study) -> None:
        for t in study.get_trials(deepcopy=False,
                                  states=(TrialState.COMPLETE, TrialState.PRUNED)):
            ua = t.user_attrs
            if A.CONFIG_ID in ua and not ua.get(A.SKIPPED) and not ua.get(A.CONFIRM):
                for group, memory in self._memories.items():
                    if ua.get(A.GROUP, group) == group:
                        memory.add(t.number, ua[A.CONFIG_ID], ua.get(A.EFFECTIVE, {}),
                                   ua.get(A.FAILURE) if t.state == TrialState.PRUNED else None)

    def _work(self, w: Worker, deadline: float | None) -> None:
        infra = 0  # infrastructure failures in a row on this host
        while not self._stop.is_set():
            if deadline is not None and time.monotonic() > deadline:
                self.summary.stopped_because = "timeout"
                break
            try:
                outcome = w._one_trial()
            except NoRoom:
                if any(o.busy is not None for o in self.workers if o is not w):
                    w.record(IDLE)
                    self._stop.wait(BACKOFF_SECONDS)  # a trial there may fail and free room
                    continue
                break
            except Busy:
                w.record(IDLE)
                self._stop.wait(BACKOFF_SECONDS)
                continue
            except SweepAborted as exc:
                if not isinstance(exc.__cause__, InfrastructureError):
                    self._abort(exc)
                    break
                outcome = "failed"  # the configuration's retries are counted per host here
            except BaseException as exc:  # noqa: BLE001 - a bug or the storage: stop all
                self._abort(exc)
                break
            finally:
                w.busy = None
            if outcome == "failed":
                infra += 1
                if infra > self.spec.sweep.max_retries:
                    self._retire(w, f"{infra} infrastructure failures in a row, the last: "
                                    f"{w._last_failure}")
                    w.runner.stop(best_effort=True)
                    return
                w.record(IDLE)
                self._stop.wait(min(BACKOFF_SECONDS * infra, 5.0))
                continue
            infra = 0
            if outcome in ("repeat", "lost"):  # no restart: nothing spent, nothing counted
                continue
            w._repeats_in_a_row = 0  # a restart (or a skip): repeats count afresh
            if outcome == "skipped":
                with self._lock:
                    self._skipped += 1
                    too_many = self._skipped > SKIP_LIMIT_FACTOR * self.options.trials + 100
                if too_many:
                    self._abort(SweepAborted(
                        f"the sampler proposed {self._skipped} configurations known to fail; "
                        "the space left may be too small or mostly failing: narrow the space "
                        "in the study file"))
                    break
                continue
            with self._lock:
                self._consecutive = 0 if outcome == "complete" else self._consecutive + 1
                consecutive = self._consecutive
            done = finished_count(w.study) - (self.target - self.options.trials)
            self.report.progress(max(0, done), self.options.trials)
            if consecutive >= self.spec.sweep.max_consecutive_failures:
                self._abort(SweepAborted(
                    f"{consecutive} trials in a row failed; the last: {w._last_failure}. "
                    "Check the study's server settings and the hosts, then run the same "
                    "command to resume"))
                break
        if not w.retired:
            w.record(DONE)

    def _abort(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self.summary.stopped_because = "aborted"
        self._stop.set()

    def _stop_handle(self, handle: ServerHandle) -> None:
        """Stop a server an earlier sweeper left, through the worker of its host."""
        w = next((w for w in self.workers if w.host.name == handle.host), self.primary)
        w.runner.manager.stop(handle, grace=self.spec.server.stop_grace)

    # --- the end ------------------------------------------------------------------------
    def _finish(self) -> None:
        s = self.summary
        with contextlib.suppress(Exception):
            done = finished_count(self.study)
            # Cleared when the time limit stopped it. Kept otherwise: ``done()`` clears it
            # after the confirm phase (a kill there resumes the confirm), and after an
            # abort or a kill the same command resumes towards the same target.
            if s.stopped_because == "timeout" and done < self.target:
                self.study.set_user_attr(A.BUDGET, None)
        for w in self.workers:
            if not hasattr(w, "study"):
                continue
            if s.stopped_because == "interrupted":
                w.summary.stopped_because = "interrupted"
            with contextlib.suppress(Exception):
                w._finish()
            ws = w.summary
            s.finished += ws.finished
            s.complete += ws.complete
            s.pruned.update(ws.pruned)
            s.skipped += ws.skipped
            s.failed += ws.failed
            s.retried += ws.retried
        s.best, s.baseline = self.primary.summary.best, self.primary.summary.baseline
        s.kept_server = self.primary.summary.kept_server

    def done(self) -> None:
        """The command finished what it set out to do (its confirm phase included): nothing
        to resume; every host's lock is released. The budget is kept while a trial of a
        sweeper that was killed still holds part of it: the same command runs it again."""
        if finished_count(self.study) >= self.target:
            self.study.set_user_attr(A.BUDGET, None)
        for w in self.workers:
            if hasattr(w, "lock"):
                with contextlib.suppress(Exception):
                    w.close()

    def describe_hosts(self) -> str:
        """``local:30001 (NVIDIA L40S), gpu-2 (NVIDIA H200)`` for the opening line."""
        return ", ".join(f"{w.host.name if len(self.workers) == 1 else w.label}"
                         + (f" ({w.group})" if w.group and len(self.workers) > 1 else "")
                         for w in self.live)
