"""Measuring one configuration: a trial's life on the host, in one place.

    stop the previous server -> start this one (detached, recorded) -> wait for health
    -> benchmark over the tunnel -> the server's own log lines over the same window

used by the sweep and by the confirm phase alike. Nothing here knows about Optuna: a
caller records the server through ``on_start`` before waiting on it (so a sweeper killed
at any moment leaves a server someone can find), and gets one ``Measurement`` back, or a
ConfigurationFailure (the configuration's fault) or an InfrastructureError (not its fault).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sweeper.errors import (
    BenchmarkTransportError,
    ConfigurationFailure,
    InfrastructureError,
    ServerErrorResponse,
    SweeperError,
)
from sweeper.launch import LaunchConfig
from sweeper.measure import BenchmarkError, BenchResult, BenchSpec
from sweeper.measure.levels import run_levels
from sweeper.measure.logs import DecodeSummary, parse_decode_lines, summarize_decode
from sweeper.measure.runs import RunResult
from sweeper.remote import Host
from sweeper.remote.logcap import cap_text, keep_bytes
from sweeper.remote.server import ServerHandle, ServerManager
from sweeper.run.killpoint import killpoint
from sweeper.run.progress import NullReporter, Reporter
from sweeper.study import HostSpec, ServerSpec

LOG_ARTIFACT_BYTES = 4 * 1024 * 1024
# How long a server that cut the benchmark off may take to exit before the cut is taken for
# the network's fault (infrastructure) rather than its death (the configuration's).
DEATH_GRACE_S = 10.0


@dataclass(frozen=True)
class Measurement:
    """One configuration served and benchmarked, at every concurrency level of the study
    (on the same server start). ``bench`` is the primary level's benchmark (the objective's
    level, else the lowest): its accept length and JSON stand for the trial."""

    config: LaunchConfig
    server: ServerHandle
    bench: BenchResult
    startup_s: float  # start to healthy; 0.0 when the running server was reused
    decode: DecodeSummary  # the server's "Decode batch" lines over the benchmark window
    reused: bool
    levels: dict[int, BenchResult] = field(default_factory=dict)  # concurrency -> benchmark


def server_error(err: ServerErrorResponse, attempt: int, max_retries: int) -> SweeperError:
    """5xx answers are retried like any fault outside the configuration while the study's
    retries last (``attempt`` counts them); a configuration whose server answered 5xx on
    every start then fails as ``server_error``, which the sampler learns."""
    if attempt < max_retries:
        return err
    return ConfigurationFailure("server_error", f"{err} (on {attempt + 1} server starts)",
                                f"last response body: {err.body}" if err.body else "")


class TrialRunner:
    """Serves configurations on one host, one at a time, and measures them."""

    def __init__(self, host: Host, python: str, server: ServerSpec, host_spec: HostSpec,
                 reporter: Reporter | None = None, *, workdir: str | None = None,
                 marker: str | None = None) -> None:
        """``workdir``: the study's own folder on the host (remote/workdir.py), default the
        host's workdir; ``marker``: the study key its servers carry in their environment."""
        self.host = host
        self.python = python
        self.server = server
        self.host_spec = host_spec
        self.manager = ServerManager(host, workdir or host_spec.workdir or "~/.sweeper", python,
                                     marker, keep_bytes(server.log_keep_mb))
        self.report: Reporter = reporter or NullReporter()
        self.current: ServerHandle | None = None
        # the current measurement's completed runs, per level (per-request tok/s of the
        # counted ones): what a Ctrl-C handled in another thread keeps (run/worker.py)
        self.partial: dict[int, list[float]] = {}

    def measure(self, config: LaunchConfig, tag: str, bench: BenchSpec, *, label: str = "",
                on_start: Callable[[ServerHandle], None] | None = None,
                phase: str = "", primary: int | None = None,
                more: Callable[[list[float]], int] | None = None,
                first_round: int = 0) -> Measurement:
        """Serve ``config`` (restarting unless it is already serving) and benchmark it at
        every level of ``bench.concurrency`` (the restart is paid once). ``primary`` is
        the level that stands for the trial (default: the lowest). ``label`` prefixes the
        progress phases; ``phase`` the kill points (run/killpoint.py). A benchmark with no
        usable run is the configuration's fault (a crash-like failure), not the network's.
        ``more``: how many runs past ``bench.runs``; ``first_round``: where in the prompt
        order its runs start (measure/client.run_benchmark)."""
        handle, startup_s, reused = self._serve(config, tag, label, on_start, phase)
        self.partial = {}
        with self.reach(config) as base_url:
            if not reused:
                startup_s = self.wait_healthy(handle, base_url, label)
            self.report.phase(f"{label}benchmarking")
            log_start = self.host.file_size(handle.log_path) or 0
            try:
                def progress(msg: str) -> None:
                    self.report.phase(f"{label}{msg}")
                    if msg.startswith("run 1/"):
                        killpoint(f"{phase}benchmark")

                levels = run_levels(
                    base_url, bench, on_progress=progress,
                    check_server=lambda: self.manager.check_alive(handle),
                    api_key=config.api_key, more=more, first_round=first_round,
                    on_run=self._keep_run)
            except BenchmarkError as exc:
                raise ConfigurationFailure("crash", f"benchmark unusable: {exc}",
                                           self.manager.log_tail(handle)) from exc
            except BenchmarkTransportError:
                # A server whose scheduler died cuts the stream while its main process is
                # still tearing itself down (SGLang 0.5.23 kills its own tree seconds
                # later): give it a bounded moment before calling it the network's fault.
                deadline = time.monotonic() + DEATH_GRACE_S
                while time.monotonic() < deadline:
                    if self.manager.exited(handle):
                        raise self.manager.failure_from_exit(handle, "while serving") from None
                    time.sleep(0.5)
                raise
        # The server's own view of the same window: its "Decode batch" log lines.
        log_end = self.host.file_size(handle.log_path) or 0
        window = self.host.read_file(handle.log_path, max(0, log_end - log_start)) or ""
        decode = summarize_decode(parse_decode_lines(window))
        main = levels[primary if primary in levels else min(levels)]
        return Measurement(config, handle, main, startup_s, decode, reused, levels)

    def _keep_run(self, run: RunResult) -> None:
        if run.counted:
            self.partial.setdefault(len(run.requests), []).append(run.per_request_tok_s)

    def _serve(self, config: LaunchConfig, tag: str, label: str,
               on_start: Callable[[ServerHandle], None] | None, phase: str = ""
               ) -> tuple[ServerHandle, float, bool]:
        handle = self.current
        if handle is not None and handle.config_id == config.config_id() and \
                not self.manager.exited(handle):
            self.report.phase(f"{label}reusing the running server")
            reused = True  # the same configuration is still serving: no restart needed
        else:
            self.stop(label=label)
            self.report.phase(f"{label}starting the server")
            handle = self.manager.start(config, tag)
            self.current = handle
            reused = False
            killpoint(f"{phase}started")  # the server runs, the study does not say so yet
        if on_start is not None:
            on_start(handle)
        return handle, 0.0, reused

    def wait_healthy(self, handle: ServerHandle, base_url: str, label: str = "") -> float:
        return self.manager.wait_healthy(
            handle, base_url, startup_timeout=self.server.startup_timeout,
            hang_timeout=self.server.hang_timeout,
            on_progress=lambda s: self.report.phase(f"{label}waiting for health ({s:.0f}s)"))

    def serve(self, config: LaunchConfig, tag: str) -> ServerHandle:
        """Start ``config`` and wait until it is healthy (``--keep-best``)."""
        handle, _, reused = self._serve(config, tag, "", None)
        if not reused:
            with self.reach(config) as url:
                self.wait_healthy(handle, url)
        return handle

    def reach(self, config: LaunchConfig) -> contextlib.AbstractContextManager[str]:
        """The server's base URL from here: the host's ``url`` when the study names one
        (the server binds an address this machine reaches), else a tunnel over the host's
        connection to the loopback-bound server (nothing exposed on the GPU node)."""
        if self.host_spec.url:
            return contextlib.nullcontext(self.host_spec.url.rstrip("/"))
        return self.host.forward(config.port, config.bind_host)

    def stop(self, best_effort: bool = False, label: str = "") -> None:
        """Stop the server this runner started, if any."""
        if self.current is None:
            return
        self.report.phase(f"{label}stopping the server")
        try:
            self.manager.stop(self.current, grace=self.server.stop_grace)
        except InfrastructureError:
            if not best_effort:
                raise
        self.current = None

    def detach(self) -> ServerHandle | None:
        """Hand the running server over (``--keep-best``): this runner will not stop it."""
        handle, self.current = self.current, None
        return handle

    def log_text(self, handle: ServerHandle) -> str | None:
        """The server's log for the trial's artifacts: its head and its tail, capped as
        on the host (logcap.py); uncapped (``log_keep_mb: 0``), its last 4 MiB."""
        keep = self.manager.log_keep
        if keep <= 0:
            return self.host.read_file(handle.log_path, LOG_ARTIFACT_BYTES)
        # the host holds at most the head, the cut line and twice the tail
        text = self.host.read_file(handle.log_path, 3 * keep + 4096)
        return None if text is None else cap_text(text, keep)

    def log_tail(self, handle: ServerHandle) -> str:
        return self.manager.log_tail(handle)

