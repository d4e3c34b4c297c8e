"""SSHHost: the Host contract on a GPU node, over one reused SSH connection (Session).

Commands, detached servers, process groups, files (SFTP) and ports, each built from argv
and quoted once (shell.py); a dropped connection surfaces as ConnectionLost (session.py).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import select
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

import paramiko

from sweeper.errors import CommandTimeout, ConnectionLost, InfrastructureError
from sweeper.remote import envfile
from sweeper.remote.envfile import env_path_for
from sweeper.remote.host import DETACH_WRAPPER, CommandResult, Host, connect_address
from sweeper.remote.ssh.config import load_ssh_config, resolve_chain
from sweeper.remote.ssh.procnet import port_listened
from sweeper.remote.ssh.session import Session
from sweeper.remote.ssh.shell import env_argv, host_timeout, remote_path, sftp_path
from sweeper.remote.ssh.tunnel import Tunnel
from sweeper.remote.target import parse_target

_T = TypeVar("_T")


class SSHHost(Host):
    """A host reached over SSH. One connection is reused; a dropped one is re-opened with
    bounded retries; ConnectionLost (or HostUnreachable, if it never connected) when the
    retry budget runs out.

    Example (``gpu-node-1`` is an alias from ~/.ssh/config)::

        with SSHHost("gpu-node-1") as host:
            host.run(["nvidia-smi", "-L"]).exit_code
    """

    def __init__(
        self,
        spec: str,
        *,
        ssh_config_path: str | None = None,
        known_hosts_path: str | None = None,
        connect_timeout: float = 10.0,
        retry_budget: float = 30.0,
        alive_timeout: float = 10.0,
    ) -> None:
        self.name = spec
        self.target = parse_target(spec)
        self.alive_timeout = alive_timeout
        self.hops = resolve_chain(self.target, load_ssh_config(ssh_config_path))
        self.session = Session(spec, self.hops, known_hosts_path=known_hosts_path,
                               connect_timeout=connect_timeout, retry_budget=retry_budget)

    # connection ------------------------------------------------------------------------

    def connect(self) -> None:
        """Open the connection now (otherwise the first command opens it)."""
        self.session.transport()

    def close(self) -> None:
        """Close the connection; processes started detached keep running on the host."""
        self.session.drop()

    def __enter__(self) -> SSHHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_alive(self) -> None:
        """A real round trip (keepalives do not notice a dead peer). A half-open connection
        that does not answer is dropped and re-opened once (with the retry budget)."""
        try:
            self.run(["true"], timeout=self.alive_timeout)
            return
        except (CommandTimeout, ConnectionLost):
            self.session.drop()
        try:
            self.run(["true"], timeout=self.alive_timeout)
        except CommandTimeout as exc:
            raise ConnectionLost(
                f"ssh {self.name}: no answer within {self.alive_timeout:.0f}s"
            ) from exc

    # commands --------------------------------------------------------------------------

    def run_shell(self, command: str, *, timeout: float = 60.0,
                  stdin: bytes = b"") -> CommandResult:
        """Run a shell string already built from quoted parts (internal; prefer ``run``).
        ``stdin`` is sent, then EOF: data that must not appear on a command line."""
        with self.session.lost(f"`{command}`"):
            chan = self.session.open_session()
        out: list[bytes] = []
        err: list[bytes] = []
        deadline = time.monotonic() + timeout
        try:
            with self.session.lost(f"`{command}`"):
                chan.exec_command(command)
                if stdin:
                    chan.sendall(stdin)
                chan.shutdown_write()  # then EOF, like </dev/null
                code = self._drain(chan, out, err, deadline, command, timeout)
                if code == -1 and not self.session.transport_active():
                    # paramiko's "no status": the session died, e.g. sshd killed
                    raise EOFError("no exit status")
        finally:
            chan.close()
        return CommandResult(
            code, b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace")
        )

    def _drain(self, chan: paramiko.Channel, out: list[bytes], err: list[bytes],
               deadline: float, command: str, timeout: float) -> int:
        while True:
            # Drain both streams while waiting: a full window would block the command.
            busy = False
            while chan.recv_ready():
                out.append(chan.recv(65536))
                busy = True
            while chan.recv_stderr_ready():
                err.append(chan.recv_stderr(65536))
                busy = True
            if chan.exit_status_ready() and not chan.recv_ready() and \
                    not chan.recv_stderr_ready():
                break
            if chan.closed and not chan.exit_status_ready():
                raise EOFError("channel closed without an exit status")
            if time.monotonic() > deadline:
                raise CommandTimeout(f"ssh {self.name}: {command} did not finish in {timeout:g}s")
            if not busy:
                select.select([chan], [], [], 0.05)
        code = chan.recv_exit_status()
        # Output can still arrive right after the status; collect the rest.
        while not chan.eof_received or chan.recv_ready() or chan.recv_stderr_ready():
            if chan.recv_ready():
                out.append(chan.recv(65536))
            elif chan.recv_stderr_ready():
                err.append(chan.recv_stderr(65536))
            elif time.monotonic() > deadline or chan.closed:
                break
            else:
                select.select([chan], [], [], 0.05)
        return code

    @staticmethod
    def _bounded(script: str, timeout: float) -> str:
        """A shell script under the host's ``timeout``, like ``run``'s argv: if it hangs
        (a hung file system), it is killed there with its process group, not left behind.
        A server it starts with ``setsid`` has left that group and keeps running."""
        return shlex.join([*host_timeout(timeout), "sh", "-c", script])

    def run(
        self, argv: Sequence[str], *, timeout: float = 60.0, env: Mapping[str, str] | None = None
    ) -> CommandResult:
        """Run argv on the host (one shlex-quoted string; env via ``env K=V``). The host's
        own ``timeout`` bounds it there too, so a command we stop waiting for is killed with
        its whole process group on the host instead of running on."""
        command = shlex.join([*host_timeout(timeout), *env_argv(env), *argv])
        result = self.run_shell(command, timeout=timeout + 10)
        if result.exit_code in (124, 137):
            raise CommandTimeout(f"ssh {self.name}: {shlex.join(argv)} did not finish in "
                                 f"{timeout:g}s (killed on the host)")
        return result

    def start_detached(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        log_path: str,
        exit_path: str,
        log_keep: int = 0,
    ) -> int:
        """setsid + nohup, output to log_path, exit code to exit_path; pid = pgid.

        The command returns as soon as the job is forked (no pty, own session), so the job
        survives the SSH session. ``cd`` is a separate statement: ``cd x && setsid ... &``
        would background a subshell that holds the channel open.

        The environment travels on the channel's stdin into a 0600 file that the wrapper
        reads and removes (envfile.py): never on a command line, where every user of the
        node would read it in ``ps``. The log is created 0600 too.
        """
        wrapped = shlex.join(["bash", "-c", DETACH_WRAPPER, "sweeper-wrap"])
        inner = shlex.join(list(argv))
        log_dir = posixpath.dirname(log_path) or "."
        env_path = env_path_for(log_path)
        data = envfile.encode(env)
        script = (
            f"mkdir -p -- {remote_path(log_dir)} || exit 1; "
            f"rm -f -- {remote_path(exit_path)} {remote_path(env_path)}; "
            f"(umask 077 && : >> {remote_path(log_path)} && "
            f"chmod 600 -- {remote_path(log_path)} && "
            f"cat > {remote_path(env_path)}) || exit 1; "
            f"cd -- {remote_path(cwd)} || exit 1; "
            f"setsid nohup {wrapped} {remote_path(exit_path)} {remote_path(env_path)} "
            f"{remote_path(log_path)} {int(log_keep)} {inner} "
            f">>{remote_path(log_path)} 2>&1 </dev/null & echo $!"
        )
        result = self.run_shell(self._bounded(script, 30), timeout=40, stdin=data)
        pid_text = result.stdout.strip()
        if result.exit_code != 0 or not pid_text.isdigit():
            raise InfrastructureError(
                f"ssh {self.name}: detached start failed (exit {result.exit_code}): "
                f"{(result.stderr or result.stdout).strip()[-500:]}"
            )
        return int(pid_text)

    def _group_members(self, pgid: int) -> list[str]:
        # ps, parsed here: portable across Linux images, and zombies (state Z) are left out
        # because a killed child can linger as a zombie under a non-reaping pid 1.
        result = self.run(["ps", "-e", "-o", "pgid=,stat="], timeout=20)
        if result.exit_code != 0:
            raise InfrastructureError(f"ssh {self.name}: ps failed: {result.stderr.strip()[-300:]}")
        states = []
        for line in result.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == str(pgid) and not parts[1].startswith("Z"):
                states.append(parts[1])
        return states

    def group_alive(self, pgid: int) -> bool:
        return bool(self._group_members(pgid))

    def stop_group(self, pgid: int, *, grace: float = 15.0) -> None:
        """TERM the group, wait ``grace``, KILL, wait until gone (else InfrastructureError)."""
        if pgid <= 1:
            raise ValueError(f"refusing to signal process group {pgid}")
        for signame, wait in (("TERM", grace), ("KILL", 10.0)):
            self.run(["kill", f"-{signame}", "--", f"-{pgid}"], timeout=20)
            deadline = time.monotonic() + wait
            while self.group_alive(pgid):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            else:
                return
        raise InfrastructureError(f"ssh {self.name}: process group {pgid} survived SIGKILL")

    # files -----------------------------------------------------------------------------

    def _sftp_call(self, what: str, fn: Callable[[paramiko.SFTPClient], _T]) -> _T:
        with self.session.lost(what, files=True):
            return fn(self.session.sftp())

    def read_file(self, path: str, max_bytes: int = 16384) -> str | None:
        """Tail of a remote file via SFTP (exact bytes, no shell, no `tail` exit codes)."""

        def tail(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(sftp_path(path), "rb") as fh:
                size = fh.stat().st_size or 0
                fh.seek(max(0, size - max_bytes))
                return fh.read(max_bytes)

        try:
            data: bytes = self._sftp_call(f"read {path}", tail)
        except FileNotFoundError:
            return None
        return data.decode(errors="replace")

    def file_size(self, path: str) -> int | None:
        try:
            st = self._sftp_call(f"stat {path}", lambda s: s.stat(sftp_path(path)))
        except FileNotFoundError:
            return None
        return int(st.st_size or 0)

    def put_file(self, local_path: str | os.PathLike[str], remote: str) -> None:
        """Copy a local file to the host (SFTP); the remote directory must exist."""
        self._sftp_call(f"put {remote}", lambda s: s.put(str(local_path), sftp_path(remote)))

    def get_file(self, remote: str, local_path: str | os.PathLike[str]) -> None:
        """Copy a file from the host (SFTP)."""
        self._sftp_call(f"get {remote}", lambda s: s.get(sftp_path(remote), str(local_path)))

    def makedirs(self, path: str) -> str:
        result = self.run_shell(self._bounded(
            f"mkdir -p -- {remote_path(path)} && cd -- {remote_path(path)} && pwd -P", 30),
            timeout=40)
        if result.exit_code != 0:
            raise InfrastructureError(
                f"ssh {self.name}: mkdir {path} failed: {result.stderr.strip()}"
            )
        return result.stdout.strip()

    # ports -----------------------------------------------------------------------------

    def port_free(self, port: int, bind_host: str = "127.0.0.1") -> bool:
        """Whether a server could listen on ``bind_host:port`` on the host, from the
        kernel's socket tables (procnet.py says why not a probe)."""
        result = self.run(["cat", "/proc/net/tcp", "/proc/net/tcp6"], timeout=20)
        if not result.stdout:
            raise InfrastructureError(
                f"ssh {self.name}: cannot read /proc/net/tcp: {result.stderr.strip()}"
            )
        return not port_listened(result.stdout, port, bind_host)

    @contextlib.contextmanager
    def forward(self, port: int, bind_host: str = "127.0.0.1") -> Iterator[str]:
        """A local listener on 127.0.0.1:RANDOM whose connections go over this SSH connection
        (direct-tcpip) to ``bind_host:port`` as seen from the host. Re-opens the SSH
        connection if it dropped in between. Closed on exit."""
        tunnel = Tunnel(self.session, connect_address(bind_host), port)
        try:
            yield f"http://127.0.0.1:{tunnel.local_port}"
        finally:
            tunnel.close()
