"""Where commands run: the Host interface. LocalHost (local.py) and SSHHost (ssh/) implement
it, and tests/test_ssh_contract.py runs both through the same cases.

The contract: code above this module (server lifecycle, preflight, the sweep) never knows
whether a command runs on this machine or on a GPU node over SSH.

* Every command is an argv list: values from study files are data, quoted exactly once
  where an argv has to become a shell string (only SSH needs that).
* ``run`` is bounded by its timeout on both sides: past it, CommandTimeout here, and the
  command's whole process group is killed there.
* ``start_detached`` starts a server in its own session (pid == process group id) that
  outlives the call and the connection; its output goes to a log file and its exit code to
  an exit file (a killed process can linger as a zombie that ``kill -0`` still sees: the
  exit file is the reliable "it has ended" signal).
* Transport faults are InfrastructureError subclasses (HostUnreachable, ConnectionLost,
  CommandTimeout): the sweep retries them; they are never blamed on a configuration.
"""

from __future__ import annotations

import contextlib
import socket
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# The detached wrapper (envfile.py): reads the environment from a private file, runs argv,
# then records its exit code in a file.
from sweeper.remote.envfile import DETACH_WRAPPER  # noqa: F401 - re-exported

# Bind addresses that mean "every interface": a client reaches such a server on loopback.
WILDCARDS = frozenset({"", "0.0.0.0", "::", "*"})


def connect_address(bind_host: str) -> str:
    """Where a client on the host itself reaches a server bound to ``bind_host``."""
    return "127.0.0.1" if bind_host in WILDCARDS else bind_host


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str


class Host(ABC):
    """A machine the sweeper drives. ``name`` is what messages call it."""

    name: str
    # Whether the server listens from the process group start_detached made: true for a
    # plain launcher. A container's server runs under the runtime's shim, a Slurm step's
    # under slurmstepd, so a listener outside the group is no stranger there
    # (remote/owner.py; those hosts know their servers by label or job name instead).
    listens_in_group: bool = True

    @abstractmethod
    def run(self, argv: Sequence[str], *, timeout: float = 60.0,
            env: Mapping[str, str] | None = None) -> CommandResult:
        """Run a command to completion. Raises CommandTimeout past ``timeout``."""

    @abstractmethod
    def start_detached(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str,
                       log_path: str, exit_path: str, log_keep: int = 0) -> int:
        """Start argv in its own session, stdout+stderr to log_path; its exit code goes
        to exit_path when it ends. Returns the pid, which is also the process group id.
        The process outlives this call (and, over SSH, the connection). ``log_keep`` > 0:
        the log keeps argv's first and last ``log_keep`` bytes (envfile.DETACH_WRAPPER)."""

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

    def run_launcher(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run the server's launcher to completion where the server would run it (the
        preflight's ``--help``): here, on the host; in the image for a container host."""
        return self.run(argv, timeout=timeout)

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

    def marked_groups(self, needle: str) -> set[int]:
        """Process groups of the live processes whose environment contains ``needle``
        (``SWEEPER_SERVER=<study key>:``): the servers of one study, found on the host
        itself, recorded or not. Only this user's processes are readable, which are the
        only ones a sweeper can have started."""
        script = ('for f in $(grep -lzsF -- "$1" /proc/[0-9]*/environ 2>/dev/null); do '
                  'awk \'{sub(/^.*\\) /, ""); if ($1 != "Z") print $3}\' '
                  '"${f%/environ}/stat" 2>/dev/null; done; true')
        result = self.run(["sh", "-c", script, "sh", needle], timeout=30)
        return {int(w) for w in result.stdout.split() if w.isdigit() and int(w) > 1}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the processes started detached keep running."""


def free_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on this machine (for tests and tunnels)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
