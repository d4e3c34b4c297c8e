"""SGLang server lifecycle on a host: start detached, wait healthy, watch, stop.

Waiting fails fast: every poll checks whether the process ended (exit-code file or
an empty process group) and, if so, classifies the failure from the log tail at once
instead of waiting out the start-up deadline. A /health 200 counts only when no other
process is seen listening on the port in the server's place (remote/owner.py). A hang
watchdog fails a server whose log stops growing while /health never answers 200.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import httpx

from sweeper.errors import (
    ConfigurationFailure,
    HostStorageError,
    InfrastructureError,
    PortBusy,
    SweeperError,
)
from sweeper.launch import LaunchConfig
from sweeper.measure.logs import INFRASTRUCTURE_KINDS, Classified, classify_failure_line
from sweeper.remote.container import NOT_STARTED_NOTE, OOM_NOTE
from sweeper.remote.host import Host
from sweeper.remote.owner import stranger_on_port
from sweeper.remote.secretflags import secret_launch
from sweeper.remote.workdir import MARKER, check_run_dir, next_start
from sweeper.run.ctrlc import raise_pending

POLL_SECONDS = 0.2
LOG_TAIL_BYTES = 6000


@dataclass(frozen=True)
class ServerHandle:
    """A server the sweeper started: enough to find and stop it again, even from
    another sweeper process after a kill -9 (it is stored in the trial's user attrs)."""

    host: str
    pgid: int
    port: int
    bind_host: str
    log_path: str
    exit_path: str
    config_id: str
    started_at: float

    def to_attrs(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_attrs(cls, data: dict[str, object]) -> ServerHandle:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


def _tail_lines(text: str, n: int = 40) -> str:
    return "\n".join(text.splitlines()[-n:])


class ServerManager:
    """Runs one SGLang server at a time on one host."""

    def __init__(self, host: Host, workdir: str, python: str, marker: str | None = None,
                 log_keep: int = 0) -> None:
        self.host = host
        self.log_keep = log_keep  # bytes of each end of a start's log kept (logcap.py)
        self._workdir_spec = workdir
        self._workdir: str | None = None  # created on the first start, not before
        self.python = python
        self.marker = marker  # the study's key: its servers carry it (remote/workdir.py)

    @property
    def workdir(self) -> str:
        if self._workdir is None:
            self._workdir = self.host.makedirs(self._workdir_spec)
        return self._workdir

    # --- start / stop ---------------------------------------------------------
    def start(self, config: LaunchConfig, tag: str) -> ServerHandle:
        """Start ``config``: its own log and exit file (``<tag>-a<n>``, never another
        start's), and the study's marker in its environment."""
        if not self.host.port_free(config.port, config.bind_host):
            raise PortBusy(
                f"{self.host.name}: port {config.port} is already in use by a process sweeper "
                f"did not start; stop it or set server.port to a free port")
        check_run_dir(self.host, self.workdir)  # a full disk is the host's, not the config's
        name = next_start(self.host, self.workdir, tag)
        log_path = f"{self.workdir}/{name}.log"
        exit_path = f"{self.workdir}/{name}.exit"
        # secret flags reach SGLang through a FIFO --config, never its argv (secretflags.py)
        argv, private = secret_launch(config, self.python)
        env = {**config.env, **private}
        if self.marker is not None:
            env[MARKER] = f"{self.marker}:{name}"
        pgid = self.host.start_detached(argv, env=env,
                                        cwd=self.workdir, log_path=log_path, exit_path=exit_path,
                                        log_keep=self.log_keep)
        return ServerHandle(self.host.name, pgid, config.port, config.bind_host, log_path,
                            exit_path, config.config_id(), time.time())

    def stop(self, handle: ServerHandle, grace: float = 15.0, port_timeout: float = 30.0) -> None:
        """Stop the server's process group (TERM, then KILL) and wait for its port."""
        self.host.stop_group(handle.pgid, grace=grace)
        deadline = time.monotonic() + port_timeout
        while not self.host.port_free(handle.port, handle.bind_host):
            if time.monotonic() > deadline:
                raise PortBusy(f"{self.host.name}: port {handle.port} still in use after the "
                               f"server (pgid {handle.pgid}) was stopped")
            time.sleep(POLL_SECONDS)

    # --- observation ------------------------------------------------------------
    def log_tail(self, handle: ServerHandle, max_bytes: int = LOG_TAIL_BYTES) -> str:
        return self.host.read_file(handle.log_path, max_bytes) or ""

    def exited(self, handle: ServerHandle) -> bool:
        return (self.host.exit_code(handle.exit_path) is not None
                or not self.host.group_alive(handle.pgid))

    def failure_from_exit(self, handle: ServerHandle, when: str) -> SweeperError:
        """The process has ended: classify from its exit code and log tail, quoting the
        line that decided the class. Another process holding the port is not the
        configuration's fault (PortBusy, retried); everything else is."""
        tail = self.log_tail(handle)
        code = self.host.exit_code(handle.exit_path)
        found = classify_failure_line(tail)
        if found is not None and found.kind in INFRASTRUCTURE_KINDS:
            return PortBusy(f"{self.host.name}: the server exited {when} (exit code {code}): "
                            f"{found.line[:200]}; another process holds port {handle.port}")
        if found is None and not tail.strip() and code is None:
            # nothing written at all, not even the wrapper's exit code: the run folder
            # could not be written (or the disk is full), which no configuration causes
            return HostStorageError(
                f"{self.host.name}: the server exited {when} leaving no output and no exit "
                f"code in {self.workdir}: the run folder is unwritable or the node's disk "
                "is full")
        why = next((ln for ln in tail.splitlines() if NOT_STARTED_NOTE in ln), None)
        if why is not None:  # `docker run` failed: retried, never the configuration's fault
            return InfrastructureError(
                f"{self.host.name}: {why.removeprefix('[sweeper] ').strip()[:400]}")
        oom = next((ln.strip() for ln in tail.splitlines() if OOM_NOTE in ln), None)
        if oom is not None and (found is None or found.kind == "crash"):
            # the container runtime saw the kernel's OOM killer end it (remote/container.py)
            found = Classified("oom", oom)
        kind = found.kind if found is not None else "crash"
        line = found.line if found is not None else next(
            (ln.strip() for ln in reversed(tail.splitlines()) if ln.strip()), "no output")
        return ConfigurationFailure(
            kind, f"server exited {when} (exit code {code}): {kind}: {line[:200]}",
            _tail_lines(tail))

    def check_alive(self, handle: ServerHandle) -> None:
        """Raise the classified failure (ConfigurationFailure or PortBusy) when the server
        has died."""
        if self.exited(handle):
            raise self.failure_from_exit(handle, "while serving")

    def wait_healthy(self, handle: ServerHandle, base_url: str, *, startup_timeout: float,
                     hang_timeout: float,
                     on_progress: Callable[[float], None] | None = None) -> float:
        """Poll /health until 200. Returns the seconds from start to healthy.

        Fails fast with a classified ConfigurationFailure when the process exits, when
        ``startup_timeout`` passes, or when neither the log grows nor health answers for
        ``hang_timeout`` seconds (a hang: NCCL misconfigurations often do this).
        """
        start = time.monotonic()
        last_size = -1
        last_progress = start
        stranger: str | None = None  # another process answered /health on our port
        with httpx.Client(timeout=httpx.Timeout(2.0)) as client:
            while True:
                now = time.monotonic()
                if self.exited(handle):
                    raise self.failure_from_exit(handle, "during start-up")
                try:
                    if client.get(f"{base_url}/health").status_code == 200:
                        # ours, or a stranger that took the port (remote/owner.py)?
                        stranger = stranger_on_port(
                            self.host, self.python, handle.port, handle.pgid) \
                            if self.host.listens_in_group else None
                        if stranger is None:
                            return time.time() - handle.started_at
                except httpx.HTTPError:
                    pass  # not listening yet: that is what start-up looks like
                size = self.host.file_size(handle.log_path) or 0
                if size != last_size:
                    last_size, last_progress = size, now
                if stranger and (now - last_progress > hang_timeout
                                 or now - start > startup_timeout):
                    raise PortBusy(f"{self.host.name}: port {handle.port} answers /health from "
                                   f"another process (pid {stranger}), not from the server "
                                   f"sweeper started (pgid {handle.pgid})")
                if now - last_progress > hang_timeout:
                    raise ConfigurationFailure(
                        "hang", f"server hung: no log output and no health for "
                        f"{hang_timeout:.0f}s", _tail_lines(self.log_tail(handle)))
                if now - start > startup_timeout:
                    raise ConfigurationFailure(
                        "startup_timeout", f"server not healthy after {startup_timeout:.0f}s",
                        _tail_lines(self.log_tail(handle)))
                if on_progress:
                    on_progress(now - start)
                # a start takes minutes on a real node: a Ctrl-C a finalizer dropped in the
                # main thread (the confirm phase waits here) is raised now, not after it
                raise_pending()
                time.sleep(POLL_SECONDS)
