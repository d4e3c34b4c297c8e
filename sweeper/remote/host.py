"""Where commands run: one small interface, a local and an SSH implementation.

Code above this module (server lifecycle, preflight, the sweep) never knows whether a
command runs on this machine or on a GPU node over SSH. Every command is an argv list:
values from study files are data and are quoted exactly once, at the point where an
argv has to become a shell string (only SSH needs that).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sweeper.errors import CommandTimeout

# The detached wrapper: runs argv, then records its exit code in a file. A killed
# process can linger as a zombie that `kill -0` still sees; the exit-code file is the
# reliable "it has ended" signal (shared/STACK.md).
# Usage: bash -c WRAPPER sweeper-wrap EXIT_PATH ARGV...
DETACH_WRAPPER = 'exit_path="$1"; shift; "$@"; echo $? > "$exit_path"'


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str


class Host(ABC):
    """A machine the sweeper drives. ``name`` is what messages call it."""

    name: str

    @abstractmethod
    def run(self, argv: Sequence[str], *, timeout: float = 60.0,
            env: Mapping[str, str] | None = None) -> CommandResult:
        """Run a command to completion. Raises CommandTimeout past ``timeout``."""

    @abstractmethod
    def start_detached(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str,
                       log_path: str, exit_path: str) -> int:
        """Start argv in its own session, stdout+stderr to log_path; its exit code goes
        to exit_path when it ends. Returns the pid, which is also the process group id.
        The process outlives this call (and, over SSH, the connection)."""

    @abstractmethod
    def group_alive(self, pgid: int) -> bool:
        """True while any process of the group exists (zombies of ours excluded)."""

    @abstractmethod
    def stop_group(self, pgid: int, *, grace: float = 15.0) -> None:
        """TERM the process group, wait up to ``grace`` seconds, KILL, confirm it is gone."""

    @abstractmethod
    def read_file(self, path: str, max_bytes: int = 16384) -> str | None:
        """The last ``max_bytes`` of a file, or None when it does not exist."""

    @abstractmethod
    def file_size(self, path: str) -> int | None:
        """Size in bytes, or None when the file does not exist (hang watchdog)."""

    @abstractmethod
    def port_free(self, port: int, bind_host: str = "127.0.0.1") -> bool:
        """True when nothing listens on ``bind_host:port`` on this host."""

    @abstractmethod
    def makedirs(self, path: str) -> str:
        """Create a directory (``~`` expanded on the host); returns the absolute path."""

    @abstractmethod
    def forward(self, port: int,
                bind_host: str = "127.0.0.1") -> contextlib.AbstractContextManager[str]:
        """Context manager yielding a base URL (``http://127.0.0.1:P``) from which this
        machine reaches ``bind_host:port`` on the host (an SSH tunnel for remote hosts)."""

    def check_alive(self) -> None:
        """A real round trip; raises an InfrastructureError when the host is gone."""
        self.run(["true"], timeout=20)

    def exit_code(self, exit_path: str) -> int | None:
        text = self.read_file(exit_path, 64)
        if text is None or not text.strip():
            return None
        try:
            return int(text.strip().splitlines()[-1])
        except ValueError:
            return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the processes started detached keep running."""


class LocalHost(Host):
    """This machine: subprocess, sessions and process groups."""

    def __init__(self) -> None:
        self.name = "local"
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def run(self, argv: Sequence[str], *, timeout: float = 60.0,
            env: Mapping[str, str] | None = None) -> CommandResult:
        full_env = {**os.environ, **(env or {})}
        try:
            proc = subprocess.run(list(argv), capture_output=True, timeout=timeout,
                                  env=full_env, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as exc:
            raise CommandTimeout(
                f"local: {shlex.join(argv)} did not finish in {timeout:.0f}s") from exc
        except FileNotFoundError as exc:
            return CommandResult(127, "", str(exc))
        return CommandResult(proc.returncode, proc.stdout.decode(errors="replace"),
                             proc.stderr.decode(errors="replace"))

    def start_detached(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str,
                       log_path: str, exit_path: str) -> int:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(exit_path)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                ["bash", "-c", DETACH_WRAPPER, "sweeper-wrap", exit_path, *argv],
                cwd=cwd, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self._children[proc.pid] = proc
        return proc.pid

    def group_alive(self, pgid: int) -> bool:
        child = self._children.get(pgid)
        if child is not None:
            child.poll()  # reap our own zombie so killpg(0) below tells the truth
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop_group(self, pgid: int, *, grace: float = 15.0) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.group_alive(pgid):
            time.sleep(0.05)
        if self.group_alive(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.group_alive(pgid):
                time.sleep(0.05)
        self._children.pop(pgid, None)

    def read_file(self, path: str, max_bytes: int = 16384) -> str | None:
        try:
            with open(os.path.expanduser(path), "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - max_bytes))
                return fh.read().decode(errors="replace")
        except FileNotFoundError:
            return None

    def file_size(self, path: str) -> int | None:
        try:
            return os.path.getsize(os.path.expanduser(path))
        except FileNotFoundError:
            return None

    def port_free(self, port: int, bind_host: str = "127.0.0.1") -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            target = "127.0.0.1" if bind_host in ("0.0.0.0", "") else bind_host
            return sock.connect_ex((target, port)) != 0

    def makedirs(self, path: str) -> str:
        full = Path(os.path.expanduser(path)).resolve()
        full.mkdir(parents=True, exist_ok=True)
        return str(full)

    @contextlib.contextmanager
    def forward(self, port: int, bind_host: str = "127.0.0.1") -> Iterator[str]:
        host = "127.0.0.1" if bind_host in ("0.0.0.0", "") else bind_host
        yield f"http://{host}:{port}"


def free_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on this machine (for tests and tunnels)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
