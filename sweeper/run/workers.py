"""The trial loop: one worker per host, all asking the same study (one host: a pool of one).

    ask + claim (run/asking.py: budget, duplicates) -> run/step.py (decide,
    measure, record) -> count -> stop on the budget, a time limit or too many failures

Each entry of ``hosts:`` gets a worker thread with its own session (run/session.py: SSH
connection, tunnel, workdir, server port, lock, measurer) over a one-host view of the
study (``host_view``), so a trial's life is the same code whether one host or ten run it,
and the bench's emulated measurer runs this loop too. What the workers share lives in the
storage, so sweepers on several machines share it too:

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
from optuna.trial import FrozenTrial, Trial

from sweeper.errors import InfrastructureError, InputError, SweepAborted
from sweeper.launch import LaunchConfig
from sweeper.remote import Host
from sweeper.remote.groups import detect_group
from sweeper.remote.server import ServerHandle
from sweeper.results import attrs as A
from sweeper.results.hosts import DONE, IDLE, RETIRED, STARTING, record_host
from sweeper.run.asking import Asker, Busy, NoRoom
from sweeper.run.common import SweepOptions, SweepSummary, storage_guard
from sweeper.run.ctrlc import cleaning_up, handled, raise_pending, sigterm_as_interrupt
from sweeper.run.decide import Outcome, skip_limit, sure_stop
from sweeper.run.failed import group_failing, group_left_out
from sweeper.run.hostview import Prefixed, host_view
from sweeper.run.killpoint import killpoint
from sweeper.run.memories import group_memories
from sweeper.run.progress import NullReporter, Reporter
from sweeper.run.reconcile import Budget, finished_count, reconcile
from sweeper.run.session import HostSession
from sweeper.run.step import Observer, run_trial
from sweeper.run.worker import Worker
from sweeper.search.grouped import GroupSampler
from sweeper.search.model.sampler import ModelSampler
from sweeper.search.nodetime import study_spent
from sweeper.study import StudySpec

BACKOFF_SECONDS = 1.0
CLAIM_GRACE = 10.0  # seconds a Ctrl-C waits for a worker between asking and running


class HostPool:
    """All the study's hosts, one worker each, sharing one budget: the trial loop."""

    def __init__(self, spec: StudySpec, options: SweepOptions, reporter: Reporter | None = None,
                 hosts: list[tuple[Host, str]] | None = None, *,
                 sessions: list[HostSession] | None = None, observe: Observer | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``hosts``: the hosts already connected (default: the study's); ``sessions``:
        sessions already attached to an open study (``open`` is then not called);
        ``observe`` sees every decision; ``clock`` measures ``options.timeout``."""
        self.spec = spec
        self.options = options
        self.report: Reporter = reporter or NullReporter()
        self.observe = observe
        self.clock = clock
        many = len(spec.hosts) > 1
        self.workers: list[Worker] = []
        for i in range(len(spec.hosts)):
            if sessions is not None:
                session = sessions[i]
            else:
                opts = dataclasses.replace(
                    options, seed=options.seed + i if options.seed is not None else None,
                    keep_best=options.keep_best and i == 0)
                host, python = hosts[i] if hosts else (None, None)
                session = HostSession(host_view(spec, i), opts,
                                      Prefixed(self.report, spec.hosts[i].label, many),
                                      host, python)
            self.workers.append(Worker(session, spec.hosts[i].label,
                                       spec.hosts[i].group or ""))
        self.primary = self.workers[0]
        self.storage_url = self.primary.session.storage_url
        self.summary = SweepSummary(spec.name, self.storage_url,
                                    simulated=self.primary.session.summary.simulated)
        self.target = 0
        self.budget: Budget | None = None
        self._lock = threading.Lock()  # ask + suggest + record, one worker at a time
        self._stop = threading.Event()
        self._error: BaseException | None = None
        # failed restarts in a row, per group of hardware: a group whose server settings
        # do not work there is left out while the others go on (_retire_group)
        self._consecutive: dict[str | None, int] = {}
        self._skipped = 0
        self._asker = Asker(spec, options, self._lock, self._stop)
        self.interrupted: list[int] = []  # the trials a Ctrl-C found running

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
                    w.group = detect_group(w.session.host,
                                           launcher.launcher_argv(w.session.python))
                except InfrastructureError as exc:
                    self._retire(w, f"unreachable while reading its GPU type: {exc}")
                    continue
        for w in self.workers:
            if w.retired and w.session.opened:
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
            w.session.open(require_existing=require_existing, fresh=fresh,
                           allow_delete=allow_delete)
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
        if w.session.opened:
            w.record(RETIRED, why=why)

    def _retire_group(self, w: Worker, texts: tuple[str, str]) -> bool:
        """``w``'s hardware cannot serve this study (its baseline did not serve, or too
        many restarts in a row failed there): every host of that group is retired, ``w``
        with the first of ``texts`` (run/failed.py), the others with the second, while
        hosts of other hardware go on. False when no other group is left: the sweep
        stops."""
        why, others = texts
        with self._lock:  # marked at once: two groups failing together leave none live
            if not any(o.group != w.group for o in self.live):
                return False
            group = [o for o in self.live if o.group == w.group]
            for o in group:
                o.retired = why
        for o in group:  # said and recorded outside the lock (the storage may be slow)
            self._retire(o, why if o is w else others)
        return True

    # --- claiming a trial --------------------------------------------------------------
    def claim(self, w: Worker) -> Trial:
        """A trial for ``w`` to run (run/asking.py), within the budget's target."""
        w.claiming = True
        try:
            return self._asker.claim(w, self.target)
        finally:
            w.claiming = False

    # --- the loop -----------------------------------------------------------------------
    def run(self) -> SweepSummary:
        """The trials, until the budget is spent, the time limit passes or the sweep is
        stopped. The study is not released: the caller goes on (the confirm phase), then
        calls ``done()``."""
        with storage_guard(self.summary, self.storage_url):
            return self._run()

    def _run(self) -> SweepSummary:
        study = self.study
        self.primary.session.replay_pending()
        self.summary.reconciled = reconcile(
            study, self.primary.session.recorder, [w.session.host for w in self.live],
            self._stop_handle, self.report.line)
        memories = group_memories({w.group for w in self.live},
                                  study.get_trials(deepcopy=False))
        for w in self.live:
            w.session.memory = memories[w.group]
            w.session.group = w.group
            if isinstance(w.study.sampler, ModelSampler | GroupSampler):  # learns from
                w.study.sampler.group = w.group  # this hardware's trials alone
        budget = Budget.of(study, self.options.trials)
        self.target = budget.target
        self.summary.resumed_from = budget.done - budget.start
        self.report.line(budget.describe(self.options.trials))
        budget.save(study, self.options.trials)
        self.budget = budget
        killpoint("startup")
        self.report.progress(budget.done - budget.start, self.options.trials)
        deadline = self.clock() + self.options.timeout if self.options.timeout else None
        self._run_threads(deadline)
        if self._error is not None:
            raise self._error
        if not self.live and finished_count(study) < self.target:
            raise SweepAborted("every host was retired: "
                               + "; ".join(f"{w.label}: {w.retired}" for w in self.workers)
                               + ". Fix the hosts, then run the same command to resume",
                               reason="hosts")
        return self.summary

    def _run_threads(self, deadline: float | None) -> None:
        threads = [threading.Thread(target=self._work, args=(w, deadline), daemon=True,
                                    name=f"sweeper-{w.label}") for w in self.live]
        interrupted = False
        with sigterm_as_interrupt():
            try:
                for t in threads:
                    t.start()
                while any(t.is_alive() for t in threads):
                    raise_pending()  # a Ctrl-C a finalizer dropped (run/ctrlc.py)
                    for t in threads:
                        t.join(0.2)
            except KeyboardInterrupt:
                interrupted = True
                handled()
                with cleaning_up():  # not cut short by another Ctrl-C or SIGTERM
                    self._interrupted()
                    self._finish()
                raise
            finally:
                if not interrupted:
                    self._finish()

    def _interrupted(self) -> None:
        with self._lock:  # never between a claim's stop check and its busy mark (claim)
            self._stop.set()
        # A worker that asked for its trial before the stop hands it back (asking.py) or
        # marks it busy for the loop below: wait for that, or the trial stays RUNNING
        # until the next start closes it. Bounded: the storage it writes to may hang.
        deadline = time.monotonic() + CLAIM_GRACE
        while any(w.claiming for w in self.workers) and time.monotonic() < deadline:
            time.sleep(0.02)  # the stop is set: its wait() would not wait
        self.summary.stopped_because = "interrupted"
        # the trials the Ctrl-C found running, as their workers recorded them (not every
        # busy worker: one past its trial's tell has nothing in flight)
        self.interrupted = []
        for w in self.workers:
            with contextlib.suppress(Exception):
                number = w.interrupt()
                if number is not None:
                    self.interrupted.append(number)

    def _work(self, w: Worker, deadline: float | None) -> None:
        infra = 0  # infrastructure failures in a row on this host
        while not self._stop.is_set() and not w.retired:
            if deadline is not None and self.clock() > deadline:
                self.summary.stopped_because = "timeout"
                break
            try:
                trial = self.claim(w)
                step = run_trial(w.session, trial, w.repeats_in_a_row, self.observe)
                outcome = step.outcome
                if step.failure:
                    w.last_failure = step.failure
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
                if exc.reason == "baseline" and self._retire_group(w, group_left_out(
                        w.group, w.label, exc, w.session.secrets.scrub)):
                    break
                if not isinstance(exc.__cause__, InfrastructureError):
                    self._abort(exc)
                    break
                # the configuration's retries are counted per host here
                w.last_failure = f"trial {w.busy}: {exc.__cause__}"
                outcome = Outcome.FAILED
            except BaseException as exc:  # noqa: BLE001 - a bug or the storage: stop all
                self._abort(exc)
                break
            finally:
                w.busy = None
            if self._counted(w, outcome, infra):
                infra = infra + 1 if outcome == Outcome.FAILED else 0
                continue
            if outcome == Outcome.FAILED:
                return
            break
        if not w.retired:
            w.record(DONE)

    def _counted(self, w: Worker, outcome: Outcome, infra: int) -> bool:
        """Count one trial's outcome; False when the loop stops here (for ``w`` alone
        when it was retired, for every worker when the sweep was aborted)."""
        if outcome == Outcome.FAILED:
            infra += 1
            if infra > self.spec.sweep.max_retries:
                self._retire(w, f"{infra} infrastructure failures in a row, the last: "
                                f"{w.last_failure}")
                w.session.measurer.stop(best_effort=True)
                return False
            w.record(IDLE)
            self._stop.wait(min(BACKOFF_SECONDS * infra, 5.0))
            return True
        if outcome in (Outcome.REPEAT, Outcome.LOST):  # no restart: nothing spent, counted
            if outcome == Outcome.REPEAT:
                w.repeats_in_a_row += 1
            return True
        w.repeats_in_a_row = 0  # a restart (or a skip): repeats count afresh
        if outcome == Outcome.SKIPPED:
            with self._lock:
                self._skipped += 1
                too_many = self._skipped > skip_limit(self.options.trials)
            if too_many:
                self._abort(SweepAborted(
                    f"the sampler proposed {self._skipped} configurations known to fail; "
                    "the space left may be too small or mostly failing: narrow the space "
                    "in the study file", reason="skips"))
                return False
            return True
        with self._lock:
            consecutive = 0 if outcome == Outcome.COMPLETE else \
                self._consecutive.get(w.group, 0) + 1
            self._consecutive[w.group] = consecutive
        done = finished_count(w.study) - (self.target - self.options.trials)
        trials = w.study.get_trials(deepcopy=False)
        self.report.progress(max(0, done), self.options.trials, self._spent(trials))
        if consecutive >= self.spec.sweep.max_consecutive_failures:
            if self._retire_group(w, group_failing(w.group, w.label, consecutive,
                                                   w.last_failure)):
                return False
            self._abort(SweepAborted(
                f"{consecutive} trials in a row failed; the last: {w.last_failure}. "
                "Check the study's server settings and the hosts, then run the same "
                "command to resume", reason="failures"))
            return False
        return not self._sure(trials, done)

    def _spent(self, trials: list[FrozenTrial]) -> str:
        """Node-hours so far, for the live line (and kept for the summary)."""
        secs, source = study_spent(self.spec, trials, self.summary.simulated)
        self.summary.node_seconds, self.summary.node_source = secs, source
        return f"{secs / 3600:.2f} node-h"

    def _sure(self, trials: list[FrozenTrial], done: int) -> bool:
        """The stop rule (run/decide.sure_stop): True stops the sweep here, the reason
        said in one line."""
        stop = sure_stop(self.spec, trials, done, self.options.trials)
        if stop is None:
            return False
        with self._lock:
            if self._stop.is_set():
                return True
            self.summary.stopped_because = "sure"
            self.summary.stop_reason = stop.reason
            self._stop.set()
        self.report.line(f"Stopping after {done} of {self.options.trials} trials: "
                         f"{stop.reason}")
        return True

    def _abort(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self.summary.stopped_because = "aborted"
        self._stop.set()

    def _stop_handle(self, handle: ServerHandle) -> None:
        """Stop a server an earlier sweeper left, through the worker of its host."""
        w = next((w for w in self.workers if w.session.host.name == handle.host), self.primary)
        w.session.stop_handle(handle)

    # --- the end ------------------------------------------------------------------------
    def _finish(self) -> None:
        s = self.summary
        with contextlib.suppress(Exception):
            done = finished_count(self.study)
            # Cleared when the time limit or the stop rule stopped it. Kept otherwise:
            # ``done()`` clears it after the confirm phase (a kill there resumes the
            # confirm), and after an abort or a kill the same command resumes towards the
            # same target.
            if s.stopped_because in ("timeout", "sure") and done < self.target:
                self.study.set_user_attr(A.BUDGET, None)
        for w in self.workers:
            if not w.session.opened:
                continue
            ws = w.session.summary
            if s.stopped_because in ("interrupted", "storage"):
                ws.stopped_because = s.stopped_because
            with contextlib.suppress(Exception):
                w.session.finish()
            s.add_counts(ws)
        s.best, s.baseline = self.primary.session.summary.best, \
            self.primary.session.summary.baseline
        s.kept_server = self.primary.session.summary.kept_server

    def done(self) -> None:
        """The command finished what it set out to do (its confirm phase included): nothing
        to resume; every host's lock is released. The budget is kept while a trial of a
        sweeper that was killed still holds part of it: the same command runs it again."""
        if finished_count(self.study) >= self.target:
            self.study.set_user_attr(A.BUDGET, None)
        for w in self.workers:
            if w.session.opened:
                with contextlib.suppress(Exception):
                    w.session.close()

    def describe_hosts(self) -> str:
        """``local:30001 (NVIDIA L40S), gpu-2 (NVIDIA H200)`` for the opening line."""
        return ", ".join(f"{w.session.host.name if len(self.workers) == 1 else w.label}"
                         + (f" ({w.group})" if w.group and len(self.workers) > 1 else "")
                         for w in self.live)
