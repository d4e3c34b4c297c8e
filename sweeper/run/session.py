"""One host's hold on a study: everything that happens before and after the trial loop.

``HostSession.open`` checks everything that can refuse the study before anything is
written (the host answers, no strays on the port, the space and objective match the
stored study, preflight), takes the study's lock on that host, creates or loads the
study and builds the measurer (run/trial.py's ``TrialRunner``). The trial loop itself is
run/workers.py's (``HostPool``), for one host or many; the confirm phase (run/confirm.py)
and ``sweeper stop`` use a session without a loop. ``attach`` gives the loop a session
over a study that is already open and a measurer of the caller's (the bench's emulation).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

import sweeper.results.verdict as R
from sweeper.errors import (
    ConfigurationFailure,
    InfrastructureError,
    InputError,
    PortBusy,
    PreflightError,
)
from sweeper.launch import LaunchConfig
from sweeper.remote import Host
from sweeper.remote.preflight import (
    PreflightReport,
    drop_unavailable,
    flag_values,
    help_flags,
    launcher_help,
    optional_dimensions,
    preflight,
    sglang_version,
)
from sweeper.remote.server import ServerHandle
from sweeper.remote.workdir import remove_run_dir, run_dir, worker_marker
from sweeper.results import attrs as A
from sweeper.results.hosts import in_group
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
from sweeper.run.common import SweepOptions, SweepSummary, open_host
from sweeper.run.heartbeat import Heartbeat, refuse_if_live
from sweeper.run.lock import StudyLock, claim
from sweeper.run.measurer import Measurer
from sweeper.run.progress import NullReporter, Reporter
from sweeper.run.reconcile import owned_pgids
from sweeper.run.record import Recorder
from sweeper.run.servers import stop_strays
from sweeper.run.trial import TrialRunner
from sweeper.search.failures import FailureMemory
from sweeper.search.sampler import make_sampler
from sweeper.search.space import SearchSpace
from sweeper.study import HostSpec, StudySpec
from sweeper.study.base import public_url


def create_study(storage: optuna.storages.BaseStorage, spec: StudySpec, space: SearchSpace,
                 sampler: optuna.samplers.BaseSampler, simulated: bool) -> optuna.Study:
    """The study in ``storage`` (created, or loaded when it exists): a new one gets its
    signature and its first trials, the baseline then the study's start_from points."""
    # every command that opens a session (optimize, confirm) reports for itself: Optuna's
    # "[I ...] Using an existing study" would be a second, unasked voice on stderr
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # pareto: Optuna's multi-objective study (per-request against total tok/s)
    study = optuna.create_study(storage=storage, study_name=spec.name,
                                directions=["maximize"] * len(spec.objective.metric_names()),
                                sampler=sampler, load_if_exists=True)
    if A.SPACE not in study.user_attrs:
        study.set_user_attr(A.WINNER, "no configuration has completed yet")  # listed first
        study.set_user_attr(A.SPACE, space_signature(space.distributions()))
        study.set_user_attr(A.OBJECTIVE, spec.objective.signature())
        study.set_user_attr(A.SIMULATED, simulated)
        if spec.baseline:
            study.enqueue_trial({}, user_attrs={A.ROLE: A.BASELINE})
        for point in spec.start_from:
            study.enqueue_trial(space.internal_params(point),
                                user_attrs={A.ROLE: A.START_FROM}, skip_if_exists=True)
    return study


def study_sampler(spec: StudySpec, options: SweepOptions, space: SearchSpace
                  ) -> optuna.samplers.BaseSampler:
    """The sampler the options (else the study) name, seeded the same way."""
    return make_sampler(options.sampler or spec.sweep.sampler,
                        options.seed if options.seed is not None else spec.sweep.seed,
                        spec.sweep.n_startup_trials, space=space)


class HostSession:
    """One study on one host: its measurer, its recorder, its lock, its failure memory."""

    study: optuna.Study
    recorder: Recorder
    measurer: Measurer
    host: Host
    python: str

    def __init__(self, spec: StudySpec, options: SweepOptions, reporter: Reporter | None = None,
                 host: Host | None = None, python: str | None = None) -> None:
        self.spec = spec
        self.options = options
        self.report: Reporter = reporter or NullReporter()
        self.space = SearchSpace(spec)  # validates the space before anything starts
        self.storage_url = options.storage or spec.storage
        self.bench_spec = spec.benchmark
        self.summary = SweepSummary(spec.name, self.storage_url,
                                    simulated="sweeper.sim" in spec.server.launcher)
        # every secret the servers get (fixed flags and env of the study)
        self.secrets = LaunchConfig(spec.server.launcher, dict(spec.server.args),
                                    {k: str(v) for k, v in spec.server.env.items()})
        self.memory = FailureMemory()
        # its host's group (the GPU type), once the pool has read it: the confirm phase
        # compares and tags its visits within it (results are compared within a group)
        self.group: str | None = None
        self.opened = False
        self.lock: StudyLock | None = None
        self.beat: Heartbeat | None = None  # this sweeper's liveness, in the storage
        self.runner: TrialRunner | None = None  # the real measurer, once opened on a host
        self.preflight: PreflightReport | None = None
        self.deleted: int | None = None  # trials --fresh deleted (the Ctrl-C line says so)
        if host is not None:
            self.host = host
        if host is not None or python is not None:
            self.python = python or sys.executable
        self._given = host

    def trials(self) -> list[FrozenTrial]:
        """The study's trials this host compares with: its group's once the pool has read
        the group (results are compared only within one kind of hardware), all before."""
        return in_group(self.study.get_trials(deepcopy=False), self.group or None)

    # --- set-up -------------------------------------------------------------------------
    def open(self, require_existing: bool = False, fresh: bool = False,
             allow_delete: Callable[[int], bool] | None = None) -> optuna.Study:
        """Everything that can refuse the study runs before anything is written.
        ``fresh`` deletes the stored study first, only once all checks have passed and
        ``allow_delete(number of trials)`` agreed (the CLI asks the user)."""
        if self._given is None:
            self.host, self.python = open_host(self.spec)
        self.help_text: str | None = None
        if optional_dimensions(self.spec):  # a dimension only some builds have a flag for
            self.help_text = self._launcher_help()
            self.spec, notes = drop_unavailable(self.spec, help_flags(self.help_text))
            self.space = SearchSpace(self.spec)
            for note in notes:
                self.report.line(note)
        sampler = study_sampler(self.spec, self.options, self.space)
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
        self.measurer = self.runner
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
            self.help_text = self.help_text or self._launcher_help()
            try:
                self.preflight = preflight(
                    self.host, LaunchConfig(self.spec.server.launcher).launcher_argv(self.python),
                    self.space.emitted_flags(), self.spec.server.port, self.spec.server.host,
                    owned_pgids=owned_pgids(study) if study is not None else frozenset(),
                    help_text=self.help_text, values=flag_values(self.spec))
            except PortBusy as exc:  # before the first restart, a busy port is the user's to fix
                raise PreflightError(str(exc)) from exc
        if fresh and study is not None:
            # another sweeper, on any machine, working on it: seen through the storage
            refuse_if_live(study, "--fresh", str(self.spec.path), self.storage_url)
            n = len(study.get_trials(deepcopy=False))
            if n and (allow_delete is None or not allow_delete(n)):
                raise InputError(f"--fresh: not deleting the {n} trials of study "
                                 f"{self.spec.name!r} in {public_url(self.storage_url)}; add "
                                 "--yes to delete them, or drop --fresh to add to them")
            delete_study(self.storage_url, self.spec.name, self.spec.artifacts)
            self.deleted = n
            remove_run_dir(self.host, self.workdir)  # its servers' logs: nobody else's
            self.report.line(f"--fresh: deleted the {n} earlier trials of {self.spec.name!r}")
            storage = None
        if storage is None:
            storage = open_storage(self.storage_url)
        study = create_study(storage, self.spec, self.space, sampler, self.summary.simulated)
        self.beat = Heartbeat.start(storage, self.spec.name)  # seen by other sweepers
        if isinstance(self.preflight, PreflightReport):
            # what exports need: the build's flags, its retired ones, its version
            study.set_user_attr(A.BUILD, self.preflight.build_attrs(sglang_version(
                self.host, self.python, self.help_text or "")))
        self._adopt(study, storage)
        return study

    def _launcher_help(self) -> str:
        """``launcher --help`` on the host, read once: the preflight and the dimensions
        only some builds have a flag for (remote/preflight.OPTIONAL_DIMENSIONS)."""
        try:
            self.host.check_alive()
        except InfrastructureError as exc:
            raise InputError(f"{self.spec.path}: hosts[0].ssh: {self.spec.hosts[0].ssh}: {exc}; "
                             "check the address, your ~/.ssh/config and that the node is up"
                             ) from exc
        return launcher_help(self.host, LaunchConfig(self.spec.server.launcher)
                             .launcher_argv(self.python), 180.0)

    def attach(self, study: optuna.Study, storage: optuna.storages.BaseStorage,
               measurer: Measurer, host: Host) -> None:
        """A session over a study that is already open, measuring through ``measurer``:
        no lock, no preflight (bench/'s emulated measurer; nothing runs on ``host``)."""
        self.host = host
        self.python = sys.executable
        self.measurer = measurer
        self._adopt(study, storage)

    def _adopt(self, study: optuna.Study, storage: optuna.storages.BaseStorage) -> None:
        self.study = study
        self.recorder = Recorder(study, storage, artifact_store(self.storage_url, self.spec.name,
                                                               self.spec.artifacts),
                                 self.secrets.scrub, storage_url=self.storage_url,
                                 goal=self.spec.objective)
        self.opened = True

    def replay_pending(self) -> None:
        """Measurements an earlier run could not store (run/pending.py) go in first."""
        def mark(old: int, new: int) -> None:
            slot = self.recorder.slot_of(old)
            if self.recorder.storage.get_trial(slot.trial_id).state == TrialState.RUNNING:
                self.recorder.fail(slot, "storage", "measured, but the storage failed while "
                                   f"recording it; the measurement is trial {new}")

        pending.replay(self.study, self.recorder.storage, self.storage_url,
                       self.recorder.upload_to, mark, self.report.line)

    # --- while it runs -------------------------------------------------------------------
    def line(self, text: str) -> None:
        """A line for the user, every secret of the study scrubbed."""
        self.report.line(self.secrets.scrub(text))

    def server_log(self, fail: ConfigurationFailure | None = None) -> str | None:
        """The log of the server measured last, with a 5xx body when that was the failure."""
        handle = self.measurer.current
        if handle is None:
            return None
        with contextlib.suppress(InfrastructureError):
            text = self.measurer.log_text(handle)
            if fail is not None and fail.kind == "server_error" and text is not None:
                text += f"\n[sweeper] {fail}\n[sweeper] {fail.log_tail}\n"  # the body
            return text
        return None

    def stop_handle(self, handle: ServerHandle) -> None:
        """Stop a server of this study found on this session's host."""
        if self.runner is not None:
            self.runner.manager.stop(handle, grace=self.spec.server.stop_grace)

    # --- the end ------------------------------------------------------------------------
    def done(self) -> None:
        """The command finished what it set out to do: no sweep to resume any more; the
        study is free for the next sweeper. (Interrupted or aborted, neither happens: the
        same command then resumes towards the same target.)"""
        self.study.set_user_attr(A.BUDGET, None)
        self.close()

    def close(self) -> None:
        """Release the study's lock and stop beating (the servers were stopped by then)."""
        if self.beat is not None:
            self.beat.stop()
            self.beat = None
        if self.lock is not None:
            self.lock.release()

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
            self.stop_handle(handle)
        self.study.set_user_attr(A.KEPT_SERVER, None)
        return handle

    def stop_server(self) -> None:
        """Stop the server this session started, if any (Ctrl-C paths, confirm)."""
        self.measurer.stop(best_effort=True)

    def finish(self) -> None:
        """The loop ended: the verdict into the summary, the best configuration left
        serving with ``--keep-best``, every other server stopped, the host closed."""
        summary = self.summary
        with contextlib.suppress(Exception):
            v = R.verdict(self.study, self.bench_spec.aggregate)
            summary.best, summary.baseline = v.best, v.baseline
        keep = self.options.keep_best and summary.best is not None and \
            summary.stopped_because not in ("interrupted", "storage") and \
            self.runner is not None
        try:
            if keep:
                assert summary.best is not None and self.runner is not None
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
            self.measurer.stop(best_effort=True)
            self.host.close()

    def config_of(self, result: R.ConfigResult) -> LaunchConfig:
        """The launch configuration of a pooled result (the baseline's or a trial's)."""
        if result.is_baseline:
            return self.space.baseline_config()
        first = next(t for t in self.study.get_trials(deepcopy=False)
                     if t.number == result.trials[0])
        return self.space.launch_config(self.space.effective(first.params))
