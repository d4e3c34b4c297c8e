"""What a host whose servers run somewhere else keeps of the host it wraps.

A container host (container.py: the server in an image) and a Slurm host (slurm.py: the
server as a job step) each wrap the study's host (LocalHost or SSHHost): only where a
detached server runs, how it is stopped and how a stray one is found are theirs. Commands,
files, tunnels and the connection stay the wrapped host's, and so does every attribute
outside the Host contract (SSHHost.put_file, .session...).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sweeper.errors import CommandTimeout, InfrastructureError, PreflightError
from sweeper.remote.host import CommandResult, Host
from sweeper.remote.workdir import MARKER


class WrappedHost(Host):
    """``inner`` (LocalHost or SSHHost), whose servers a subclass starts elsewhere
    (``start_detached``, ``stop_group``, ``marked_groups``)."""

    listens_in_group = False  # the server runs under the runtime / slurmstepd

    def __init__(self, inner: Host) -> None:
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, attr: str) -> Any:
        if attr == "inner":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(attr)
        # what is not the Host contract (SSHHost.put_file, .session...) is the inner host's
        return getattr(self.inner, attr)

    def checked(self, argv: list[str], timeout: float, shown: int) -> CommandResult:
        """A command on the wrapped host that must work (the runtime's, Slurm's):
        InfrastructureError (retried, the host retired when it persists) naming its first
        ``shown`` words and its own last line otherwise."""
        result = self.inner.run(argv, timeout=timeout)
        if result.exit_code != 0:
            detail = (result.stderr.strip() or result.stdout.strip()).splitlines()
            raise InfrastructureError(
                f"{self.name}: `{' '.join(argv[:shown])} ...` failed "
                f"(exit {result.exit_code}): {detail[-1][:300] if detail else 'no output'}")
        return result

    def preflight_run(self, argv: list[str], *, silent: str,
                      missing: str) -> tuple[CommandResult, list[str]]:
        """A preflight probe of the runtime or Slurm on the wrapped host: its result and
        its output's lines (stderr, else stdout); PreflightError, with ``silent``'s advice,
        when it does not answer in 60 s, and ``missing`` when the command is not there."""
        try:
            result = self.inner.run(argv, timeout=60)
        except CommandTimeout as exc:
            raise PreflightError(f"host {self.name}: `{' '.join(argv)}` did not answer in "
                                 f"60s; {silent}") from exc
        if result.exit_code == 127:
            raise PreflightError(f"host {self.name}: {missing}")
        return result, (result.stderr.strip() or result.stdout.strip()).splitlines()

    def stop_wrapper(self, pgid: int, ids: Sequence[str], still_there: Callable[[], bool], *,
                     seconds: float, poll: float, survived: str, grace: float) -> None:
        """After the server (``ids``: its container or step) was told to end: wait up to
        ``seconds`` until ``still_there`` says it is gone (InfrastructureError ``survived``
        past that), then stop the wrapper's process group on the wrapped host, unless a
        server was found but that group is no longer a sweeper server's (its pgid may now
        be someone else's)."""
        deadline = time.monotonic() + seconds
        while ids and still_there():
            if time.monotonic() > deadline:
                raise InfrastructureError(f"{self.name}: {survived}")
            time.sleep(poll)
        if not ids or pgid in self.inner.marked_groups(f"{MARKER}="):
            self.inner.stop_group(pgid, grace=grace)

    # --- the wrapped host's own -----------------------------------------------------------
    def group_alive(self, pgid: int) -> bool:
        # the wrapper (docker wait, srun) lives as long as its server; a server whose
        # wrapper is gone is a stray, found by label or name (marked_groups)
        return self.inner.group_alive(pgid)

    def run(self, argv: Sequence[str], *, timeout: float = 60.0,
            env: Mapping[str, str] | None = None) -> CommandResult:
        return self.inner.run(argv, timeout=timeout, env=env)

    def read_file(self, path: str, max_bytes: int = 16384) -> str | None:
        return self.inner.read_file(path, max_bytes)

    def file_size(self, path: str) -> int | None:
        return self.inner.file_size(path)

    def port_free(self, port: int, bind_host: str = "127.0.0.1") -> bool:
        return self.inner.port_free(port, bind_host)

    def makedirs(self, path: str) -> str:
        return self.inner.makedirs(path)

    def forward(self, port: int,
                bind_host: str = "127.0.0.1") -> contextlib.AbstractContextManager[str]:
        return self.inner.forward(port, bind_host)

    def check_alive(self) -> None:
        self.inner.check_alive()

    def close(self) -> None:
        self.inner.close()
