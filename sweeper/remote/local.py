"""LocalHost: this machine, through subprocess, sessions and process groups."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from sweeper.errors import CommandTimeout, HostStorageError
from sweeper.remote.host import DETACH_WRAPPER, CommandResult, Host, connect_address


class LocalHost(Host):
    """This machine: subprocess, sessions and process groups."""

    def __init__(self) -> None:
        self.name = "local"
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def run(self, argv: Sequence[str], *, timeout: float = 60.0,
            env: Mapping[str, str] | None = None) -> CommandResult:
        full_env = {**os.environ, **(env or {})}
        try:
            # Its own process group, so a command that overruns is killed with its children.
            proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, env=full_env,
                                    start_new_session=True)
        except FileNotFoundError as exc:
            return CommandResult(127, "", str(exc))
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise CommandTimeout(
                f"local: {shlex.join(argv)} did not finish in {timeout:.0f}s") from exc
        except BaseException:
            # Ctrl-C while it runs (the preflight's `--help`, nvidia-smi): its own session
            # keeps it from the terminal's SIGINT, so it is stopped here, not left behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        return CommandResult(proc.returncode, out.decode(errors="replace"),
                             err.decode(errors="replace"))

    def start_detached(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str,
                       log_path: str, exit_path: str, log_keep: int = 0) -> int:
        try:
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(exit_path)
            # the log is the owner's only (0600): a server's output can name paths and users
            fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.fchmod(fd, 0o600)
        except OSError as exc:  # an unwritable or full run folder: the host's fault
            raise HostStorageError(f"local: cannot create {log_path}: {exc.strerror}; "
                                   "check the run folder and the disk") from exc
        # the environment goes through Popen's env: on no command line (envfile.py)
        with os.fdopen(fd, "ab") as log:
            proc = subprocess.Popen(
                ["bash", "-c", DETACH_WRAPPER, "sweeper-wrap", exit_path, "", log_path,
                 str(log_keep), *argv],
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
        return _has_live_member(pgid)

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
            target = connect_address(bind_host)
            return sock.connect_ex((target, port)) != 0

    def makedirs(self, path: str) -> str:
        full = Path(os.path.expanduser(path)).resolve()
        full.mkdir(parents=True, exist_ok=True)
        return str(full)

    @contextlib.contextmanager
    def forward(self, port: int, bind_host: str = "127.0.0.1") -> Iterator[str]:
        host = connect_address(bind_host)
        yield f"http://{host}:{port}"


def _has_live_member(pgid: int) -> bool:
    """A process of group ``pgid`` that has not exited. kill(0) also finds zombies: a
    stopped server's processes whose parent died wait for PID 1 to reap them, which some
    inits (a container's, a VM's) do seconds later; every stop waited for that. A zombie
    holds no memory, GPU or port. Without /proc (not Linux), every member counts."""
    # the group's leader (the launched server) is almost always the live member: one read,
    # not a scan of every process, on the path every health poll takes
    if _proc_state(Path(f"/proc/{pgid}/stat"), pgid) is True:
        return True
    try:
        stats = list(Path("/proc").glob("[0-9]*/stat"))
    except OSError:
        return True
    if not stats:
        return True
    return any(_proc_state(stat, pgid) for stat in stats)


def _proc_state(stat: Path, pgid: int) -> bool | None:
    """Whether the process of ``stat`` (/proc/PID/stat) is a live member of group ``pgid``
    (None: gone or unreadable)."""
    try:
        # after the command's closing parenthesis: state, ppid, pgrp
        state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        return int(pgrp) == pgid and state not in ("Z", "X")
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """A process ``pid`` exists on this machine (another user's counts: EPERM)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
