"""The trial loop: ask -> predict -> measure (run/trial.py) -> record (run/record.py).

One process owns the study and uses Optuna's ask/tell interface (so SQLite keeps a
single writer). Failures are types: a ConfigurationFailure is recorded PRUNED and
infeasible, an InfrastructureError FAILs and its parameters are retried (up to
``sweep.max_retries``), a configuration predicted to fail is skipped without a restart.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

import sweeper.results.verdict as R
from sweeper.errors import (
    ConfigurationFailure,
    InfrastructureError,
    InputError,
    PortBusy,
    PreflightError,
    ServerErrorResponse,
)
from sweeper.launch import LaunchConfig
from sweeper.measure.stats import summarize
from sweeper.remote import Host
from sweeper.remote.preflight import preflight
from sweeper.remote.server import ServerHandle
from sweeper.remote.workdir import remove_run_dir, run_dir, worker_marker
from sweeper.results import attrs as A
from sweeper.results.headline import Headline, mark_best
from sweeper.results.storage import (
    artifact_store,
    check_objective,
    check_space,
    delete_study,
    existing_study,
    open_storage,
    space_signature,
    storage_exists,
)
from sweeper.run import pending
from sweeper.run.common import (  # noqa: F401 - re-exported: the sweep's public names
    SweepAborted,
    SweepOptions,
    SweepSummary,
    _sigterm_as_interrupt,
    open_host,
    storage_fault,
    storage_guard,
)
from sweeper.run.failed import configuration_failed, infrastructure_failed
from sweeper.run.heartbeat import Heartbeat, refuse_if_live
from sweeper.run.killpoint import killpoint
from sweeper.run.lock import claim
from sweeper.run.longer import more_runs
from sweeper.run.norestart import REPEAT_LIMIT, resolve_without_restart  # noqa: F401
from sweeper.run.progress import NullReporter, Reporter
from sweeper.run.reconcile import Budget, owned_pgids, reconcile, requeue
from sweeper.run.record import Recorder, Slot
from sweeper.run.servers import stop_strays
from sweeper.run.trial import TrialRunner, server_error
from sweeper.search.failures import FailureMemory
from sweeper.search.sampler import make_sampler
from sweeper.search.space import SearchSpace
from sweeper.study import HostSpec, StudySpec
from sweeper.study.base import public_url

SKIP_LIMIT_FACTOR = 10


class Sweep:
    """One sweep of one study on one host."""

    study: optuna.Study
    recorder: Recorder
    _beat: Heartbeat | None = None

    def __init__(self, spec: StudySpec, options: SweepOptions, reporter: Reporter | None = None,
                 host: Host | None = None, python: str | None = None) -> None:
        self.spec = spec
        self.options = options
        self.report: Reporter = reporter or NullReporter()
        self.space = SearchSpace(spec)  # validates the space before anything starts
        self.storage_url = options.storage or spec.storage
        self.bench_spec = spec.benchmark
        self._host = host
        self._python = python
        self.summary = SweepSummary(spec.name, self.storage_url,
                                    simulated="sweeper.sim" in spec.server.launcher)
        self._last_failure = ""
        # every secret the servers get (fixed flags and env of the study)
        self._secrets = LaunchConfig(spec.server.launcher, dict(spec.server.args),
                                     {k: str(v) for k, v in spec.server.env.items()})
        self.memory = FailureMemory()
        self._repeats_in_a_row = 0

    # --- set-up -------------------------------------------------------------------------
    def open(self, require_existing: bool = False, fresh: bool = False,
             allow_delete: Callable[[int], bool] | None = None) -> optuna.Study:
        """Everything that can refuse the study runs before anything is written.
        ``fresh`` deletes the stored study first, only once all checks have passed and
        ``allow_delete(number of trials)`` agreed (the CLI asks the user)."""
        sampler = make_sampler(self.options.sampler or self.spec.sweep.sampler,
                               self.options.seed if self.options.seed is not None
                               else self.spec.sweep.seed, self.spec.sweep.n_startup_trials,
                               space=self.space)
        if self._host is None:
            self._host, self._python = open_host(self.spec)
        self.host = self._host
        self.python = self._python or sys.executable
        hspec = self.spec.hosts[0]
        self.workdir = run_dir(hspec.workdir, self.storage_url, self.spec.name)
        # What collides on a host is a port: the lock and the servers' marker name the host
        # and the port, so several workers (or sweepers on one shared storage) of a study
        # share a machine on their own ports without taking each other's lock or stopping
        # each other's servers as strays; on the same port the second is refused.
        where = f"{hspec.ssh}:{self.spec.server.port}"
        self.marker = worker_marker(self.storage_url, self.spec.name, where)
        self.runner = TrialRunner(self.host, self.python, self.spec.server, hspec, self.report,
                                  workdir=self.workdir, marker=self.marker)
        self.lock = claim(self.storage_url, self.spec.name, where, self.report.line)
        try:
            return self._open(sampler, hspec, require_existing, fresh, allow_delete)
        except BaseException:
            self.lock.release()
            raise

    def _open(self, sampler: optuna.samplers.BaseSampler, hspec: HostSpec,
              require_existing: bool, fresh: bool,
              allow_delete: Callable[[int], bool] | None) -> optuna.Study:
        try:
            self.host.check_alive()
        except InfrastructureError as exc:
            raise InputError(f"{self.spec.path}: hosts[0].ssh: {hspec.ssh}: {exc}; check the "
                             "address, your ~/.ssh/config and that the node is up") from exc
        # servers of this study nobody recorded (a sweeper killed at the wrong moment)
        stop_strays(self.host, self.marker, self.spec.name, self.spec.server.stop_grace,
                    self.report.line)
        # An existing study may own a server on the port (a kept or orphaned one): read it
        # first. A storage that does not exist yet is not created before preflight passes.
        storage = open_storage(self.storage_url) if storage_exists(self.storage_url) else None
        study = existing_study(storage, self.spec.name) if storage is not None else None
        signature = space_signature(self.space.distributions())
        if study is not None and not fresh:
            check_space(study, signature, str(self.spec.path), self.storage_url)
            check_objective(study, self.spec.objective, str(self.spec.path), self.storage_url)
        elif require_existing:
            raise InputError(f"{self.spec.path}: no study {self.spec.name!r} in "
                             f"{public_url(self.storage_url)} yet; run `sweeper optimize` first")
        if not require_existing:
            try:
                self.preflight = preflight(
                    self.host, LaunchConfig(self.spec.server.launcher).launcher_argv(self.python),
                    self.space.emitted_flags(), self.spec.server.port, self.spec.server.host,
                    owned_pgids=owned_pgids(study) if study is not None else frozenset())
            except PortBusy as exc:  # before the first restart, a busy port is the user's to fix
                raise PreflightError(str(exc)) from exc
        if fresh and study is not None:
            refuse_if_live(study, "--fresh", str(self.spec.path), self.storage_url)
            n = len(study.get_trials(deepcopy=False))
            if n and (allow_delete is None or not allow_delete(n)):
                raise InputError(f"--fresh: not deleting the {n} trials of study "
                                 f"{self.spec.name!r} in {public_url(self.storage_url)}; add "
                                 "--yes to delete them, or drop --fresh to add to them")
            delete_study(self.storage_url, self.spec.name)
            remove_run_dir(self.host, self.workdir)  # its servers' logs: nobody else's
            self.report.line(f"--fresh: deleted the {n} earlier trials of {self.spec.name!r}")
            storage = None
        if storage is None:
            storage = open_storage(self.storage_url)
        # pareto: Optuna's multi-objective study (per-request against total tok/s)
        study = optuna.create_study(storage=storage, study_name=self.spec.name,
                                    directions=["maximize"] * len(
                                        self.spec.objective.metric_names()),
                                    sampler=sampler, load_if_exists=True)
        if A.SPACE not in study.user_attrs:
            study.set_user_attr(A.WINNER, "no configuration has completed yet")  # listed first
            study.set_user_attr(A.SPACE, signature)
            study.set_user_attr(A.OBJECTIVE, self.spec.objective.signature())
            study.set_user_attr(A.SIMULATED, self.summary.simulated)
            self._enqueue_initial(study)
        self.study = study
        self.recorder = Recorder(study, storage, artifact_store(self.storage_url, self.spec.name),
                                 self._secrets.scrub, storage_url=self.storage_url,
                                 goal=self.spec.objective)
        self._beat = Heartbeat.start(storage, self.spec.name)  # seen by other sweepers
        return study

    def _enqueue_initial(self, study: optuna.Study) -> None:
        """Baseline first, then the user's start_from points, then the sampler."""
        if self.spec.baseline:
            study.enqueue_trial({}, user_attrs={A.ROLE: A.BASELINE})
        for point in self.spec.start_from:
            study.enqueue_trial(self.space.internal_params(point),
                                user_attrs={A.ROLE: A.START_FROM}, skip_if_exists=True)

    # --- the loop -----------------------------------------------------------------------
    def run(self, going_on: bool = False) -> SweepSummary:
        """The trials. ``going_on``: the caller goes on with this study (the confirm
        phase), then calls ``done()``; else the study is released at the end."""
        if not hasattr(self, "study"):
            self.open()
        with storage_guard(self.summary, self.storage_url):
            return self._run(going_on)

    def _replay_pending(self) -> None:
        """Measurements an earlier run could not store (run/pending.py) go in first."""
        def mark(old: int, new: int) -> None:
            slot = self.recorder.slot_of(old)
            if self.recorder.storage.get_trial(slot.trial_id).state == TrialState.RUNNING:
                self.recorder.fail(slot, "storage", "measured, but the storage failed while "
                                   f"recording it; the measurement is trial {new}")

        pending.replay(self.study, self.recorder.storage, self.storage_url,
                       self.recorder.upload_to, mark, self.report.line)

    def _run(self, going_on: bool) -> SweepSummary:
        self._replay_pending()
        self.summary.reconciled = reconcile(self.study, self.recorder, self.host,
                                            self._stop_handle, self.report.line)
        for t in self.study.get_trials(deepcopy=False,
                                       states=(TrialState.COMPLETE, TrialState.PRUNED)):
            ua = t.user_attrs
            if A.CONFIG_ID in ua and not ua.get(A.SKIPPED) and not ua.get(A.CONFIRM) \
                    and not ua.get(A.REPEAT_OF):
                self.memory.add(t.number, ua[A.CONFIG_ID], ua.get(A.EFFECTIVE, {}),
                                ua.get(A.FAILURE) if t.state == TrialState.PRUNED else None)
        budget = Budget.of(self.study, self.options.trials)
        self.summary.resumed_from = budget.done - budget.start
        self.report.line(budget.describe(self.options.trials))
        budget.save(self.study, self.options.trials)
        self.budget = budget
        killpoint("startup")
        self._todo = budget.todo
        self.report.progress(0, self._todo)
        deadline = time.monotonic() + self.options.timeout if self.options.timeout else None
        consecutive = 0
        try:
            with _sigterm_as_interrupt():
                while self.summary.finished < self._todo:
                    if deadline is not None and time.monotonic() > deadline:
                        self.summary.stopped_because = "timeout"
                        break
                    outcome = self._one_trial()
                    if outcome in ("repeat", "lost"):
                        continue
                    if outcome == "skipped":
                        if self.summary.skipped > SKIP_LIMIT_FACTOR * self._todo + 100:
                            raise SweepAborted(
                                f"the sampler proposed {self.summary.skipped} configurations "
                                "known to fail; the space left may be too small or mostly "
                                "failing: narrow the space in the study file")
                        continue
                    self._repeats_in_a_row = 0  # a restart: repeats count afresh
                    self.report.progress(self.summary.finished, self._todo)
                    consecutive = 0 if outcome == "complete" else consecutive + 1
                    if consecutive >= self.spec.sweep.max_consecutive_failures:
                        raise SweepAborted(
                            f"{consecutive} trials in a row failed; the last: "
                            f"{self._last_failure}. Check the study's server settings and "
                            f"the host, then run the same command to resume")
        except Exception as exc:
            if isinstance(exc, pending.StorageFault) or pending.is_storage_error(exc):
                self.summary.stopped_because = "storage"  # nothing more is written
            raise
        finally:
            self._finish()
            if not going_on:
                self.close()
        if not going_on:
            self.study.set_user_attr(A.BUDGET, None)
        return self.summary

    def done(self) -> None:
        """The command finished what it set out to do: no sweep to resume any more; the
        study is free for the next sweeper. (Interrupted or aborted, neither happens: the
        same command then resumes towards the same target.)"""
        self.study.set_user_attr(A.BUDGET, None)
        self.close()

    def close(self) -> None:
        """Release the study's lock (the servers were stopped by then)."""
        if self._beat is not None:
            self._beat.stop()
            self._beat = None
        self.lock.release()

    def next_trial(self) -> optuna.trial.Trial:
        """The trial to run next. One host asks the study; a worker among several
        (run/workers.py) claims its share of the budget here instead."""
        return self.study.ask()

    def _one_trial(self) -> str:
        trial = self.next_trial()
        slot = self.recorder.slot(trial)
        role = str(trial.user_attrs.get(A.ROLE, A.SAMPLER))
        n_done = self.summary.finished + 1 + self.summary.resumed_from
        prefix = f"trial {trial.number} ({n_done}/{self.options.trials}) "
        if role == A.BASELINE:
            effective: dict[str, Any] = {}
            config = self.space.baseline_config()
        else:
            effective = self.space.suggest(trial)
            config = self.space.launch_config(effective)
        cid = config.config_id()
        try:
            self.recorder.begin(slot, role=role, config=config, effective=effective,
                                command=config.command_line(self.python))
        except optuna.exceptions.UpdateFinishedTrialError:
            # another sweeper sharing the storage took it for an orphan before this one
            # wrote its owner (run/heartbeat.STALE_SECONDS makes that rare): nothing ran
            self._line(f"{prefix}was closed by another sweeper before it started; "
                       "asking for another")
            return "lost"
        deliberate = getattr(self.study.sampler, "deliberate", None)
        note = deliberate(trial.number) if deliberate and role == A.SAMPLER else None
        if note:  # a racing replicate (search/model/): a repeat on purpose, marked so
            trial.set_user_attr(A.REPLICATE, note)
        label = f"{prefix}{R.short_params(effective)}: "

        resolved = resolve_without_restart(self, trial, slot, role, cid, effective, label)
        if resolved is not None:
            return resolved
        try:
            try:
                m = self.runner.measure(config, f"trial-{trial.number:04d}", self.bench_spec,
                                        label=prefix,
                                        on_start=lambda h: self.recorder.server_started(slot, h),
                                        primary=self.spec.objective.primary,
                                        more=more_runs(self.study, cid, self.bench_spec))
            except ServerErrorResponse as err:
                raise server_error(err, int(trial.user_attrs.get(A.ATTEMPT, 0)),
                                   self.spec.sweep.max_retries) from err
        except ConfigurationFailure as fail:
            return configuration_failed(self, trial, slot, role, cid, effective, label, fail)
        except InfrastructureError as err:
            return infrastructure_failed(self, trial, slot, label, err)
        except KeyboardInterrupt:
            self.recorder.fail(slot, "interrupted", "interrupted by the user (Ctrl-C / SIGTERM)")
            requeue(self.study, trial, count_attempt=False)
            self.summary.retried += 1
            self.summary.stopped_because = "interrupted"
            raise
        self.memory.add(trial.number, cid, effective, None)
        self._complete(slot, m, label)
        return "complete"

    def _complete(self, slot: Slot, m: Any, label: str) -> None:
        runs = self.recorder.series(m)  # the objective's per-run series
        base = R.baseline_result(R.config_results(self.study.get_trials(deepcopy=False)))
        ratio = R.speedup_over(R.ConfigResult("", {}, "", runs=runs), base)
        self.recorder.complete(slot, m, log=self.runner.log_text(m.server), speedup=ratio)
        self.summary.finished += 1
        self.summary.complete += 1
        headline = Headline.of(self.study, self.bench_spec.objective)
        with contextlib.suppress(Exception):  # the dashboard's note is a courtesy
            mark_best(self.study, self.bench_spec.objective)
        result = m.bench
        acc = f", accept len {result.accept_length:.2f}" if result.accept_length else ""
        best = f" | {headline.short()}" if headline.short() else ""
        # measured longer than benchmark.runs (close to the best): say so, it took longer
        longer = f" ({len(runs)} runs)" if len(runs) > self.bench_spec.runs else ""
        self._line(f"{label}[green]{R.fmt_tok_s(summarize(runs))} "
                   f"{self.spec.objective.metric_names()[0]}[/]{longer}{acc}{best}")

    def _server_log(self, slot: Slot, fail: ConfigurationFailure | None = None) -> str | None:
        handle = self.runner.current
        if handle is None:
            return None
        with contextlib.suppress(InfrastructureError):
            text = self.runner.log_text(handle)
            if fail is not None and fail.kind == "server_error" and text is not None:
                text += f"\n[sweeper] {fail}\n[sweeper] {fail.log_tail}\n"  # the body
            return text
        return None

    def _line(self, text: str) -> None:
        self.report.line(self._secrets.scrub(text))

    def _stop_handle(self, handle: ServerHandle) -> None:
        self.runner.manager.stop(handle, grace=self.spec.server.stop_grace)

    # --- the end ------------------------------------------------------------------------
    def stop_kept(self) -> ServerHandle | None:
        """Stop the server a `--keep-best` sweep left running; None when there is none."""
        kept = self.study.user_attrs.get(A.KEPT_SERVER)
        if not kept:
            return None
        handle = ServerHandle.from_attrs(kept)
        if handle.host != self.host.name:
            raise InputError(f"{self.spec.path}: the kept server runs on {handle.host}, "
                             f"not on {self.host.name}; stop it there")
        if self.host.group_alive(handle.pgid):
            self._stop_handle(handle)
        self.study.set_user_attr(A.KEPT_SERVER, None)
        return handle

    def stop_server(self) -> None:
        """Stop the server this sweep started, if any (Ctrl-C paths, confirm)."""
        self.runner.stop(best_effort=True)

    def _finish(self) -> None:
        summary = self.summary
        with contextlib.suppress(Exception):
            v = R.verdict(self.study, self.bench_spec.objective)
            summary.best, summary.baseline = v.best, v.baseline
        keep = self.options.keep_best and summary.best is not None and \
            summary.stopped_because not in ("interrupted", "storage")
        try:
            if keep:
                assert summary.best is not None
                current = self.runner.current
                if current is None or current.config_id != summary.best.config_id:
                    self.runner.stop(best_effort=True)
                    self.report.phase("starting the best configuration (--keep-best)")
                    self.runner.serve(self.config_of(summary.best), "best")
                summary.kept_server = self.runner.detach()
                # recorded so the next optimize (or a test's cleanup) can stop it
                self.study.set_user_attr(A.KEPT_SERVER, summary.kept_server.to_attrs()
                                         if summary.kept_server else None)
        finally:
            self.runner.stop(best_effort=True)
            self.host.close()

    def config_of(self, result: R.ConfigResult) -> LaunchConfig:
        """The launch configuration of a pooled result (the baseline's or a trial's)."""
        if result.is_baseline:
            return self.space.baseline_config()
        first = next(t for t in self.study.get_trials(deepcopy=False)
                     if t.number == result.trials[0])
        return self.space.launch_config(self.space.effective(first.params))
