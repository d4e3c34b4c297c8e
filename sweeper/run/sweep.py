"""The trial loop: ask -> (re)start the server -> wait healthy -> benchmark -> tell.

One process owns the study and uses Optuna's ask/tell interface (so SQLite keeps a
single writer). What the optimizer is told depends on whose fault a failure was
(shared/DESIGN.md, "A trial's life"):

* the configuration's fault (ConfigurationFailure): PRUNED with the constraint
  ``failed = 1`` so TPE learns the region is infeasible (a FAIL trial is invisible to
  TPE, which would propose the crashing configuration again and again);
* the infrastructure's fault (InfrastructureError): FAIL, and the same parameters are
  enqueued again, up to ``sweep.max_retries`` times.

A sweep killed by anything loses nothing: trials left RUNNING by a dead sweeper are
found on the next start, their servers stopped, and their parameters enqueued again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

import sweeper.results.verdict as R
from sweeper.errors import (
    ConfigurationFailure,
    InfrastructureError,
    InputError,
    PortBusy,
    PreflightError,
    SweeperError,
)
from sweeper.launch import LaunchConfig
from sweeper.measure.client import BenchmarkError, BenchResult, BenchSpec, run_benchmark
from sweeper.measure.logs import DecodeSummary, parse_decode_lines, summarize_decode
from sweeper.remote.host import Host, LocalHost
from sweeper.remote.preflight import preflight
from sweeper.remote.server import ServerHandle, ServerManager
from sweeper.results.storage import (
    SPACE_ATTR,
    artifact_store,
    check_space,
    delete_study,
    existing_study,
    open_storage,
    space_signature,
    storage_exists,
)
from sweeper.run.progress import NullReporter, Reporter
from sweeper.search.failures import FailureMemory
from sweeper.search.space import SearchSpace
from sweeper.study import StudySpec

A_OWNER = "owner"
A_SERVER = "server"
A_ATTEMPT = "attempt"
A_RETRY_OF = "retry_of"
KEPT_ATTR = "sweeper:kept_server"
# The budget of a sweep in progress: {"start", "target", "trials", "machine", "pid"}.
# A sweep killed (or Ctrl-C'd) leaves it behind, and the same command resumes towards
# the same target instead of starting N trials afresh.
TARGET_ATTR = "sweeper:budget"


class SweepAborted(SweeperError):
    """The sweep stopped before its budget: too many failures in a row, or retries
    of an infrastructure fault used up. The message says what to fix."""


@dataclass
class SweepOptions:
    trials: int = 40
    timeout: float | None = None
    storage: str | None = None
    sampler: str | None = None
    seed: int | None = None
    keep_best: bool = False


@dataclass
class SweepSummary:
    study: str
    storage: str
    finished: int = 0
    complete: int = 0
    pruned: Counter[str] = field(default_factory=Counter)
    skipped: int = 0
    failed: int = 0
    retried: int = 0
    reconciled: int = 0
    stopped_because: str = "budget"
    best: R.ConfigResult | None = None
    baseline: R.ConfigResult | None = None
    kept_server: ServerHandle | None = None
    simulated: bool = False
    resumed_from: int = 0


def make_sampler(name: str, seed: int | None, n_startup: int) -> optuna.samplers.BaseSampler:
    """TPE with multivariate + group: conditional parameters (one name per branch) are
    modelled jointly within each branch; constant_liar keeps parallel workers apart."""
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # multivariate/group are flagged experimental
            return optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed,
                                              n_startup_trials=n_startup, constant_liar=True)
    raise InputError(f"--sampler {name}: unknown sampler; use tpe or random")


def open_host(spec: StudySpec) -> tuple[Host, str]:
    """The study's first host and the python that ``{python}`` stands for on it."""
    hspec = spec.hosts[0]
    if hspec.is_local:
        return LocalHost(), hspec.python or sys.executable
    if hspec.is_placeholder:
        from sweeper.study import placeholder_message

        raise InputError(placeholder_message(spec, 0))
    from sweeper.remote.ssh import SSHHost

    return SSHHost(hspec.ssh), hspec.python or "python3"


SKIP_LIMIT_FACTOR = 10


def finished_count(study: optuna.Study) -> int:
    """Trials that cost a restart and ended (measured or failed on the server); the
    proposals skipped as known failures cost nothing and do not count."""
    return sum(1 for t in study.get_trials(deepcopy=False,
                                           states=(TrialState.COMPLETE, TrialState.PRUNED))
               if not t.user_attrs.get(R.A_SKIPPED) and not t.user_attrs.get("confirm"))


def _owned_pgids(study: optuna.Study) -> set[int]:
    """Process groups of servers this study's sweeps started and may have left behind."""
    pgids = {int(t.user_attrs[A_SERVER]["pgid"])
             for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
             if t.user_attrs.get(A_SERVER)}
    kept = study.user_attrs.get(KEPT_ATTR)
    if kept:
        pgids.add(int(kept["pgid"]))
    return pgids


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM takes the Ctrl-C path: the trial is recorded, the server stopped."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (tests may drive a sweep from a thread)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Sweep:
    """One sweep of one study on one host."""

    def __init__(self, spec: StudySpec, options: SweepOptions, reporter: Reporter | None = None,
                 host: Host | None = None, python: str | None = None) -> None:
        self.spec = spec
        self.options = options
        self.report: Reporter = reporter or NullReporter()
        self.space = SearchSpace(spec)  # validates the space before anything starts
        self.storage_url = options.storage or spec.storage
        self.bench_spec = BenchSpec(
            api=spec.benchmark.api, max_tokens=spec.benchmark.max_tokens,
            runs=spec.benchmark.runs, warmup=spec.benchmark.warmup,
            concurrency=spec.benchmark.concurrency, prompts=spec.benchmark.prompts,
            request_timeout=spec.benchmark.request_timeout,
            objective=spec.benchmark.objective)
        self._host = host
        self._python = python
        self.summary = SweepSummary(spec.name, self.storage_url,
                                    simulated="sweeper.sim" in spec.server.launcher)
        self.current: ServerHandle | None = None
        self.report_prefix = ""
        self.last_decode: DecodeSummary | None = None
        self._last_failure = ""
        # every secret the servers get (fixed flags and env of the study)
        self._secrets = LaunchConfig(spec.server.launcher, dict(spec.server.args),
                                     {k: str(v) for k, v in spec.server.env.items()})
        self.memory = FailureMemory()

    # --- set-up -------------------------------------------------------------------
    def open(self, require_existing: bool = False, fresh: bool = False) -> optuna.Study:
        """Everything that can refuse the study runs before anything is written.
        ``fresh`` deletes the stored study first, only once all checks have passed."""
        sampler = make_sampler(self.options.sampler or self.spec.sweep.sampler,
                               self.options.seed if self.options.seed is not None
                               else self.spec.sweep.seed, self.spec.sweep.n_startup_trials)
        if self._host is None:
            self._host, self._python = open_host(self.spec)
        self.host = self._host
        self.python = self._python or sys.executable
        hspec = self.spec.hosts[0]
        self.manager = ServerManager(self.host, hspec.workdir, self.python)
        try:
            self.host.check_alive()
        except InfrastructureError as exc:
            raise InputError(f"{self.spec.path}: hosts[0].ssh: {hspec.ssh}: {exc}; check the "
                             "address, your ~/.ssh/config and that the node is up") from exc
        # An existing study may own a server on the port (a kept or orphaned one): read it
        # first. A storage that does not exist yet is not created before preflight passes.
        storage = open_storage(self.storage_url) if storage_exists(self.storage_url) else None
        study = existing_study(storage, self.spec.name) if storage is not None else None
        signature = space_signature(self.space.distributions())
        if study is not None and not fresh:
            check_space(study, signature, str(self.spec.path), self.storage_url)
        elif require_existing:
            raise InputError(f"{self.spec.path}: no study {self.spec.name!r} in "
                             f"{self.storage_url} yet; run `sweeper optimize` first")
        if not require_existing:
            try:
                self.preflight = preflight(
                    self.host, LaunchConfig(self.spec.server.launcher).launcher_argv(self.python),
                    self.space.emitted_flags(), self.spec.server.port, self.spec.server.host,
                    owned_pgids=_owned_pgids(study) if study is not None else frozenset())
            except PortBusy as exc:  # before the first restart, a busy port is the user's to fix
                raise PreflightError(str(exc)) from exc
        if fresh and study is not None:
            n = len(study.get_trials(deepcopy=False))
            delete_study(self.storage_url, self.spec.name)
            self.report.line(f"--fresh: deleted the {n} earlier trials of {self.spec.name!r}")
            storage = None
        if storage is None:
            storage = open_storage(self.storage_url)
        study = optuna.create_study(storage=storage, study_name=self.spec.name,
                                    direction="maximize", sampler=sampler, load_if_exists=True)
        if SPACE_ATTR not in study.user_attrs:
            study.set_user_attr(SPACE_ATTR, signature)
            study.set_user_attr(R.SIMULATED_ATTR, self.summary.simulated)
            self._enqueue_initial(study)
        self.study = study
        self.artifacts = artifact_store(self.storage_url, self.spec.name)
        return study

    def _enqueue_initial(self, study: optuna.Study) -> None:
        """Baseline first, then the user's start_from points, then the sampler."""
        if self.spec.baseline:
            study.enqueue_trial({}, user_attrs={R.A_ROLE: R.BASELINE})
        for point in self.spec.start_from:
            study.enqueue_trial(self.space.internal_params(point),
                                user_attrs={R.A_ROLE: "start_from"}, skip_if_exists=True)

    # --- reconciliation after a crash of a previous sweeper ---------------------------
    def reconcile(self) -> int:
        """Trials left RUNNING by a sweeper that no longer runs: stop their servers,
        mark them FAIL (interrupted) and enqueue their parameters again."""
        me = socket.gethostname()
        kept = self.study.user_attrs.get(KEPT_ATTR)
        if kept and kept.get("host") == self.host.name:
            handle = ServerHandle.from_attrs(kept)
            if self.host.group_alive(handle.pgid):
                self.report.line(f"stopping the server left running by --keep-best "
                                 f"(pgid {handle.pgid})")
                self.manager.stop(handle, grace=self.spec.server.stop_grace)
            self.study.set_user_attr(KEPT_ATTR, None)
        n = 0
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            owner = t.user_attrs.get(A_OWNER) or {}
            if owner.get("machine") == me and _pid_alive(int(owner.get("pid", -1))):
                continue  # another live sweeper on this machine owns it
            if owner and owner.get("machine") != me:
                self.report.line(f"[yellow]trial {t.number} is RUNNING under a sweeper on "
                                 f"{owner.get('machine')}; leaving it alone[/]")
                continue
            server = t.user_attrs.get(A_SERVER)
            if server and server.get("host") == self.host.name:
                handle = ServerHandle.from_attrs(server)
                if self.host.group_alive(handle.pgid):
                    self.report.line(f"stopping the server of interrupted trial {t.number} "
                                     f"(pgid {handle.pgid})")
                    with contextlib.suppress(InfrastructureError):
                        self.manager.stop(handle, grace=self.spec.server.stop_grace)
            storage = self.study._storage
            storage.set_trial_user_attr(t._trial_id, R.A_FAILURE, "interrupted")
            storage.set_trial_user_attr(t._trial_id, R.A_FAILURE_MSG,
                                        "the sweeper stopped during this trial (killed?)")
            self.study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            self._requeue(t, count_attempt=False)
            n += 1
        return n

    def _requeue(self, t: FrozenTrial | Trial, count_attempt: bool) -> int:
        attempt = int(t.user_attrs.get(A_ATTEMPT, 0)) + (1 if count_attempt else 0)
        attrs = {R.A_ROLE: t.user_attrs.get(R.A_ROLE, "sampler"), A_ATTEMPT: attempt,
                 A_RETRY_OF: t.number}
        self.study.enqueue_trial(dict(t.params), user_attrs=attrs)
        self.summary.retried += 1
        return attempt

    # --- the loop -----------------------------------------------------------------
    def run(self) -> SweepSummary:
        if not hasattr(self, "study"):
            self.open()
        self.summary.reconciled = self.reconcile()
        for t in self.study.get_trials(deepcopy=False,
                                       states=(TrialState.COMPLETE, TrialState.PRUNED)):
            ua = t.user_attrs
            if R.A_CONFIG_ID in ua and not ua.get(R.A_SKIPPED) and not ua.get("confirm"):
                self.memory.add(t.number, ua[R.A_CONFIG_ID], ua.get(R.A_EFFECTIVE, {}),
                                ua.get(R.A_FAILURE) if t.state == TrialState.PRUNED else None)
        self._set_budget()
        deadline = time.monotonic() + self.options.timeout if self.options.timeout else None
        consecutive = 0
        try:
            with _sigterm_as_interrupt():
                while self.summary.finished < self._todo:
                    if deadline is not None and time.monotonic() > deadline:
                        self.summary.stopped_because = "timeout"
                        break
                    outcome = self._one_trial()
                    if outcome == "skipped":
                        if self.summary.skipped > SKIP_LIMIT_FACTOR * self._todo + 100:
                            raise SweepAborted(
                                f"the sampler proposed {self.summary.skipped} configurations "
                                "known to fail; the space left may be too small or mostly "
                                "failing: narrow the space in the study file")
                        continue
                    consecutive = 0 if outcome == "complete" else consecutive + 1
                    if consecutive >= self.spec.sweep.max_consecutive_failures:
                        raise SweepAborted(
                            f"{consecutive} trials in a row failed; the last: "
                            f"{self._last_failure}. Check the study's server settings and "
                            f"the host, then run the same command to resume")
        finally:
            if self.summary.stopped_because != "interrupted":
                self.study.set_user_attr(TARGET_ATTR, None)
            self._finish()
        return self.summary

    def _set_budget(self) -> None:
        """--trials N means N more finished trials, except when the same command resumes
        a sweep that was killed or interrupted: then it goes on to that sweep's target."""
        done = finished_count(self.study)
        old = self.study.user_attrs.get(TARGET_ATTR) or {}
        owner_alive = old.get("machine") == socket.gethostname() and \
            _pid_alive(int(old.get("pid", -1))) and int(old.get("pid", -1)) != os.getpid()
        if old and old.get("trials") == self.options.trials and not owner_alive \
                and old.get("target", 0) > done:
            start, target = int(old["start"]), int(old["target"])
            self.summary.resumed_from = done - start
            self.report.line(f"resuming the interrupted sweep: {done - start} of "
                             f"{self.options.trials} trials were done, {target - done} to go")
        else:
            start, target = done, done + self.options.trials
            n = self.options.trials
            todo = f"{n} trial{'s' if n != 1 else ''} to run"
            self.report.line(f"{todo} ({done} already in the study)" if done else todo)
        self._todo = target - done
        self.study.set_user_attr(TARGET_ATTR, {
            "start": start, "target": target, "trials": self.options.trials,
            "machine": socket.gethostname(), "pid": os.getpid()})

    def _one_trial(self) -> str:
        trial = self.study.ask()
        role = str(trial.user_attrs.get(R.A_ROLE, "sampler"))
        n_done = self.summary.finished + 1 + self.summary.resumed_from
        self.report_prefix = f"trial {trial.number} ({n_done}/{self.options.trials}) "
        if role == R.BASELINE:
            effective: dict[str, Any] = {}
            config = self.space.baseline_config()
        else:
            effective = self.space.suggest(trial)
            config = self.space.launch_config(effective)
        cid = config.config_id()
        trial.set_user_attr(R.A_ROLE, role)
        trial.set_user_attr(R.A_CONFIG_ID, cid)
        trial.set_user_attr(R.A_EFFECTIVE, effective)
        trial.set_user_attr(R.A_LAUNCH, {**config.to_dict(redact=True),
                                         "command": config.command_line(self.python)})
        trial.set_user_attr(A_OWNER, {"machine": socket.gethostname(), "pid": os.getpid()})
        label = R.short_params(effective)

        predicted = self.memory.predict(cid, effective)
        if predicted is not None:
            # Known to fail: no restart wasted on it. Recorded (the sampler learns from
            # it) but not counted against --trials, which counts restarts.
            self._prune(trial, predicted.kind, f"predicted: {predicted.reason}", "",
                        skipped=True)
            self.summary.skipped += 1
            self._line(trial, label, f"[yellow]skipped, no restart[/]: known to fail "
                       f"({predicted.kind}: {predicted.reason})")
            return "skipped"
        try:
            try:
                result, startup_s, handle = self.measure(
                    config, f"trial-{trial.number:04d}",
                    on_start=lambda h: trial.set_user_attr(A_SERVER, h.to_attrs()))
            except BenchmarkError as exc:
                # the server is up but no run produced the requested tokens: the
                # configuration's fault (a crash-like failure), not the network's
                tail = self.manager.log_tail(self.current) if self.current else ""
                raise ConfigurationFailure("crash", f"benchmark unusable: {exc}", tail) from exc
        except ConfigurationFailure as fail:
            self._stop_current()
            self.memory.add(trial.number, cid, effective, fail.kind)
            self._prune(trial, fail.kind, str(fail), fail.log_tail)
            self._last_failure = f"trial {trial.number}: {fail}"
            self._line(trial, label, f"[red]{fail.kind}[/]: {fail}")
            return "pruned"
        except InfrastructureError as err:
            self._stop_current(best_effort=True)
            self._fail(trial, err.kind, str(err))
            self._last_failure = f"trial {trial.number}: {err}"
            attempt = self._requeue(trial, count_attempt=True)
            self._line(trial, label, f"[magenta]failed[/] ({err.kind}): {err} — "
                       f"retry {attempt}/{self.spec.sweep.max_retries}")
            if attempt > self.spec.sweep.max_retries:
                raise SweepAborted(
                    f"trial {trial.number}: {err} — the same configuration failed "
                    f"{attempt} times for reasons outside it; fix the host or network, then "
                    "run the same command to resume (the configuration stays queued)") from err
            return "failed"
        except KeyboardInterrupt:
            self._fail(trial, "interrupted", "interrupted by the user (Ctrl-C / SIGTERM)")
            self._requeue(trial, count_attempt=False)
            self.summary.stopped_because = "interrupted"
            raise
        self.memory.add(trial.number, cid, effective, None)
        self._complete(trial, config, result, startup_s, handle)
        return "complete"

    def measure(self, config: LaunchConfig, tag: str,
                on_start: Callable[[ServerHandle], None] | None = None,
                bench_spec: BenchSpec | None = None,
                ) -> tuple[BenchResult, float, ServerHandle]:
        """Serve ``config`` (restarting unless it is already serving) and benchmark it.
        ``on_start`` records the server before waiting, so a kill -9 can find it."""
        spec = self.spec.server
        handle = self.current
        if handle is not None and handle.config_id == config.config_id() and \
                not self.manager.exited(handle):
            startup_s = 0.0  # the same configuration is still serving: no restart needed
            self.report.phase(f"{self.report_prefix}reusing the running server")
        else:
            self._stop_current()
            self.report.phase(f"{self.report_prefix}starting the server")
            handle = self.manager.start(config, tag)
            self.current = handle
            startup_s = -1.0
        if on_start is not None:
            on_start(handle)
        with self._reach(config) as base_url:
            if startup_s < 0:
                startup_s = self.manager.wait_healthy(
                    handle, base_url, startup_timeout=spec.startup_timeout,
                    hang_timeout=spec.hang_timeout,
                    on_progress=lambda s: self.report.phase(
                        f"{self.report_prefix}waiting for health ({s:.0f}s)"))
            self.report.phase(f"{self.report_prefix}benchmarking")
            log_start = self.host.file_size(handle.log_path) or 0
            result = run_benchmark(
                base_url, bench_spec or self.bench_spec,
                on_progress=lambda msg: self.report.phase(f"{self.report_prefix}{msg}"),
                check_server=lambda: self.manager.check_alive(handle))
        # The server's own view of the same window: its "Decode batch" log lines.
        log_end = self.host.file_size(handle.log_path) or 0
        window = self.host.read_file(handle.log_path, max(0, log_end - log_start)) or ""
        self.last_decode = summarize_decode(parse_decode_lines(window))
        return result, startup_s, handle

    def _reach(self, config: LaunchConfig) -> contextlib.AbstractContextManager[str]:
        """The server's base URL from here: the study's ``url`` when it names one (the
        server binds an address this machine reaches), else a tunnel over the host's
        connection to the loopback-bound server (nothing exposed on the GPU node)."""
        url = self.spec.hosts[0].url
        if url:
            return contextlib.nullcontext(url.rstrip("/"))
        return self.host.forward(config.port, config.bind_host)

    # --- telling Optuna ----------------------------------------------------------
    def _prune(self, trial: Trial, kind: str, message: str, log_tail: str,
               skipped: bool = False) -> None:
        trial.set_constraint("failed", 1.0)
        trial.set_user_attr("constraint_failed", 1.0)  # the dashboard does not show constraints
        trial.set_user_attr(R.A_FAILURE, kind)
        trial.set_user_attr(R.A_FAILURE_MSG, self._secrets.scrub(message)[:500])
        if skipped:
            trial.set_user_attr(R.A_SKIPPED, True)
        if log_tail:
            trial.set_user_attr("log_tail", self._secrets.scrub(log_tail)[-4000:])
        self._upload_log(trial)
        self.study.tell(trial, state=TrialState.PRUNED)
        if not skipped:
            self.summary.finished += 1
            self.summary.pruned[kind] += 1

    def _fail(self, trial: Trial, kind: str, message: str) -> None:
        trial.set_user_attr(R.A_FAILURE, kind)
        trial.set_user_attr(R.A_FAILURE_MSG, self._secrets.scrub(message)[:500])
        with contextlib.suppress(Exception):
            self._upload_log(trial)
        self.study.tell(trial, state=TrialState.FAIL)
        self.summary.failed += 1

    def _complete(self, trial: Trial, config: LaunchConfig, result: BenchResult,
                  startup_s: float, handle: ServerHandle) -> None:
        runs = [r.tok_s for r in result.runs if r.counted]
        st = result.stats
        trial.set_constraint("failed", 0.0)
        trial.set_user_attr("constraint_failed", 0.0)
        trial.set_user_attr(R.A_RUNS, runs)
        trial.set_user_attr(R.A_STARTUP, round(startup_s, 2))
        trial.set_user_attr("tok_s_mean", st.mean)
        trial.set_user_attr("tok_s_stdev", st.stdev)
        trial.set_user_attr("tok_s_min", st.min)
        trial.set_user_attr("tok_s_max", st.max)
        trial.set_user_attr("tok_s_ci95", [st.ci_low, st.ci_high])
        trial.set_user_attr("runs_flagged", result.n_errors + result.n_short)
        trial.set_user_attr(R.A_ACCEPT, result.accept_length)
        decode = self.last_decode
        if decode is not None and decode.n_lines:
            trial.set_user_attr("accept_length_log", decode.accept_len)
            trial.set_user_attr("decode_log_lines", decode.n_lines)
            if decode.eager_lines:  # batches above --cuda-graph-max-bs ran without graphs
                trial.set_user_attr("decode_eager_lines", decode.eager_lines)
        base = R.baseline_result(R.config_results(self.study.get_trials(deepcopy=False)))
        ratio = R.speedup_over(R.ConfigResult("", {}, "", runs=runs), base)
        if ratio is not None:
            trial.set_user_attr("speedup", ratio.ratio)
        self._upload_json(trial, "benchmark.json", result.to_dict())
        self._upload_log(trial)
        self.study.tell(trial, result.value)
        self.summary.finished += 1
        self.summary.complete += 1
        best = R.best_result(self.study, self.bench_spec.objective)
        acc = f", accept len {result.accept_length:.2f}" if result.accept_length else ""
        best_txt = ""
        if best is not None:
            b_ratio = R.speedup_over(best, base)
            best_txt = f" | best {best.stats.mean:.1f} (trial {best.trials[0]}" + (
                f", {R.fmt_ratio(b_ratio)} vs baseline)" if b_ratio else ")")
        self._line(trial, R.short_params(trial.user_attrs.get(R.A_EFFECTIVE, {})),
                   f"[green]{R.fmt_tok_s(st)} tok/s[/]{acc}{best_txt}")

    def _line(self, trial: Trial, label: str, text: str) -> None:
        self.report.line(self._secrets.scrub(f"{self.report_prefix}{label}: {text}"))

    # --- artifacts -------------------------------------------------------------------
    def _upload_json(self, trial: Trial, name: str, data: dict[str, Any]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(json.dumps(data, indent=2, default=str))
            optuna.artifacts.upload_artifact(artifact_store=self.artifacts,
                                             file_path=str(path), study_or_trial=trial)

    def _upload_log(self, trial: Trial) -> None:
        server = trial.user_attrs.get(A_SERVER)
        if not server:
            return
        text = self.host.read_file(server["log_path"], 4 * 1024 * 1024)
        if text is None:
            return
        text = self._secrets.scrub(text)  # secrets never reach the artifact store
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"server-trial-{trial.number:04d}.log"
            path.write_text(text)
            optuna.artifacts.upload_artifact(artifact_store=self.artifacts,
                                             file_path=str(path), study_or_trial=trial)

    def stop_kept(self) -> ServerHandle | None:
        """Stop the server a `--keep-best` sweep left running; None when there is none."""
        kept = self.study.user_attrs.get(KEPT_ATTR)
        if not kept:
            return None
        handle = ServerHandle.from_attrs(kept)
        if handle.host != self.host.name:
            raise InputError(f"{self.spec.path}: the kept server runs on {handle.host}, "
                             f"not on {self.host.name}; stop it there")
        if self.host.group_alive(handle.pgid):
            self.manager.stop(handle, grace=self.spec.server.stop_grace)
        self.study.set_user_attr(KEPT_ATTR, None)
        return handle

    def stop_server(self) -> None:
        """Stop the server this sweep started, if any (Ctrl-C paths, confirm)."""
        self._stop_current(best_effort=True)

    # --- the end --------------------------------------------------------------------
    def _stop_current(self, best_effort: bool = False) -> None:
        if self.current is None:
            return
        self.report.phase(f"{self.report_prefix}stopping the server")
        try:
            self.manager.stop(self.current, grace=self.spec.server.stop_grace)
        except InfrastructureError:
            if not best_effort:
                raise
        self.current = None

    def _finish(self) -> None:
        summary = self.summary
        with contextlib.suppress(Exception):
            trials = self.study.get_trials(deepcopy=False)
            v = R.verdict(self.study, self.bench_spec.objective, trials)
            summary.best, summary.baseline = v.best, v.baseline
        keep = self.options.keep_best and summary.best is not None and \
            summary.stopped_because != "interrupted"
        try:
            if keep and self.current is not None and \
                    self.current.config_id == summary.best.config_id:
                summary.kept_server = self.current
                self.current = None
            else:
                self._stop_current(best_effort=True)
                if keep:
                    summary.kept_server = self._start_best(summary.best)
            if summary.kept_server is not None:
                # recorded so the next optimize (or a test's cleanup) can stop it
                self.study.set_user_attr(KEPT_ATTR, summary.kept_server.to_attrs())
        finally:
            if self.current is not None:
                self._stop_current(best_effort=True)
            self.host.close()

    def _start_best(self, best: R.ConfigResult) -> ServerHandle | None:
        trials = {t.number: t for t in self.study.get_trials(deepcopy=False)}
        t = trials[best.trials[0]]
        if t.user_attrs.get(R.A_ROLE) == R.BASELINE:
            config = self.space.baseline_config()
        else:
            config = self.space.launch_config(self.space.effective(t.params))
        self.report.phase("starting the best configuration (--keep-best)")
        handle = self.manager.start(config, "best")
        self.current = handle
        with self._reach(config) as url:
            self.manager.wait_healthy(handle, url, startup_timeout=self.spec.server.startup_timeout,
                                      hang_timeout=self.spec.server.hang_timeout)
        self.current = None
        return handle
