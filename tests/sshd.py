"""A real OpenSSH server on loopback for tests (pytest plugin).

Register with ``pytest_plugins = ["tests.sshd"]`` in tests/conftest.py. Fixtures:

* ``sshd`` (session): one sshd for the whole run.
* ``sshd_jump`` (module): a second sshd, and an ssh_config in which ``gpu-behind`` reaches
  ``sshd`` only through it (ProxyJump).
* ``sshd_factory`` (function): start more servers (to stop, restart, or keep unknown);
  everything it started is stopped at the end of the test.

Each server runs ``sshd -D -e`` in its own process group with throwaway host and client keys
(docs/NOTES.md) and is stopped by its pid in teardown, also when tests fail. Processes
the tests start *through* ssh are their own business: they setsid away from sshd.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.timeouts import scaled

SSHD = "/usr/sbin/sshd"
ALIAS = "gpu-test"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sweeper-test", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )


def _wait_banner(
    port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 10.0
) -> None:
    """Ready = it answers with an SSH banner (listening alone is not enough)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited ({proc.returncode}): {log.read_text()[-2000:]}")
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", port), timeout=1) as s,
        ):
            s.settimeout(1)
            if s.recv(64).startswith(b"SSH-"):
                return
        time.sleep(0.02)
    raise RuntimeError(f"sshd on port {port} not ready in {timeout}s: {log.read_text()[-2000:]}")


@dataclass
class Sshd:
    """One throwaway sshd. ``ssh_config`` has ``Host gpu-test`` pointing at it."""

    dir: Path
    port: int
    host: str = "127.0.0.1"
    alias: str = ALIAS
    log_level: str = "INFO"
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def client_key(self) -> Path:
        return self.dir / "client_key"

    @property
    def host_key_pub(self) -> Path:
        return self.dir / "host_key.pub"

    @property
    def known_hosts(self) -> Path:
        """A known_hosts file holding exactly this server's host key."""
        return self.dir / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.dir / "ssh_config"

    @property
    def log(self) -> Path:
        return self.dir / "sshd.log"

    @property
    def spec(self) -> str:
        """``root@127.0.0.1:PORT``: the explicit form of the target."""
        return f"root@{self.host}:{self.port}"

    def host_key_line(self) -> str:
        key_type, blob = self.host_key_pub.read_text().split()[:2]
        return f"[{self.host}]:{self.port} {key_type} {blob}\n"

    def config_block(self, alias: str | None = None) -> str:
        return (
            f"Host {alias or self.alias}\n"
            f"    HostName {self.host}\n    Port {self.port}\n    User root\n"
            f"    IdentityFile {self.client_key}\n    UserKnownHostsFile {self.known_hosts}\n"
        )

    def start(self) -> None:
        """(Re)start on the same port and keys."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        logf = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config"), "-p", str(self.port)],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stopped by pgid, never by name
        )
        logf.close()
        _wait_banner(self.port, self.proc, self.log)

    def stop(self) -> None:
        """Stop the listener and every session it forked (its process group)."""
        if self.proc is None:
            return
        sessions = self.session_pids()  # before the listener dies and they are re-parented
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        # sshd setsid()s each connection's process, so the group kill above missed them.
        for pid in sessions:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def session_pids(self) -> list[int]:
        """Per-connection sshd processes: children of the listener (found by pid, not name)."""
        if self.proc is None:
            return []
        kids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == self.proc.pid:  # field 4: ppid
                    kids.append(int(stat.parent.name))
        return kids

    def kill_sessions(self) -> int:
        """Cut every open SSH connection (SIGKILL the per-connection processes, whose
        unprivileged children then exit), leaving the listener up. Returns how many."""
        pids = self.session_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def ssh_host(self, spec: str | None = None, **kwargs: object):  # -> SSHHost
        """An SSHHost for this server through its ssh_config (``gpu-test`` by default)."""
        from sweeper.remote.ssh import SSHHost

        kwargs.setdefault("ssh_config_path", str(self.ssh_config))
        kwargs.setdefault("connect_timeout", 5)
        kwargs.setdefault("retry_budget", 5)
        return SSHHost(spec or self.alias, **kwargs)  # type: ignore[arg-type]


def make_sshd(root: Path, *, log_level: str = "INFO", client_key: Path | None = None) -> Sshd:
    """Create keys and config under ``root`` and start an sshd on a free loopback port."""
    if not os.path.exists(SSHD):
        pytest.skip(f"{SSHD} is missing (apt-get install -y openssh-server)")
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privsep directory
    server = Sshd(dir=root, port=_free_port(), log_level=log_level)
    _keygen(root / "host_key")
    if client_key is None:
        _keygen(server.client_key)
    else:
        shutil.copy(client_key, server.client_key)
        shutil.copy(f"{client_key}.pub", f"{server.client_key}.pub")
    shutil.copy(f"{server.client_key}.pub", root / "authorized_keys")
    (root / "sshd_config").write_text(f"""\
ListenAddress 127.0.0.1
HostKey {root}/host_key
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowTcpForwarding yes
MaxSessions 50
MaxStartups 50
LogLevel {log_level}
Subsystem sftp internal-sftp
""")
    server.known_hosts.write_text(server.host_key_line())
    server.ssh_config.write_text(server.config_block())
    server.start()
    return server


@pytest.fixture(scope="session")
def sshd() -> Iterator[Sshd]:
    """A real sshd on loopback for the whole session."""
    root = Path(tempfile.mkdtemp(prefix="sweeper-sshd-"))
    server = make_sshd(root)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class JumpSetup:
    """``jump`` is a second sshd; in ``ssh_config``, ``gpu-behind`` = the session sshd
    reached through ``jump-test``. ``known_hosts`` trusts both."""

    jump: Sshd
    target: Sshd
    ssh_config: Path
    known_hosts: Path


@pytest.fixture(scope="module")
def sshd_jump(sshd: Sshd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JumpSetup]:
    root = tmp_path_factory.mktemp("sshd-jump")
    # DEBUG1 so the jump's log shows the direct-tcpip request: proof the tunnel was used.
    jump = make_sshd(root / "jump", log_level="DEBUG1", client_key=sshd.client_key)
    try:
        known = root / "known_hosts"
        known.write_text(jump.host_key_line() + sshd.host_key_line())
        config = root / "ssh_config"
        config.write_text(
            jump.config_block("jump-test").replace(str(jump.known_hosts), str(known))
            + sshd.config_block("gpu-behind").replace(str(sshd.known_hosts), str(known))
            + "    ProxyJump jump-test\n"
        )
        yield JumpSetup(jump=jump, target=sshd, ssh_config=config, known_hosts=known)
    finally:
        jump.stop()


@pytest.fixture
def sshd_factory(tmp_path: Path) -> Iterator[Callable[..., Sshd]]:
    """``sshd_factory()`` -> a fresh Sshd, stopped at the end of the test."""
    started: list[Sshd] = []

    def factory(**kwargs: object) -> Sshd:
        server = make_sshd(tmp_path / f"sshd{len(started)}", **kwargs)  # type: ignore[arg-type]
        started.append(server)
        return server

    try:
        yield factory
    finally:
        for server in started:
            server.stop()


@pytest.fixture(params=["local", "ssh"])
def any_host(request: pytest.FixtureRequest) -> Iterator[object]:
    """The Host contract: each test using this runs once on LocalHost, once on SSHHost."""
    from sweeper.remote import LocalHost

    host = LocalHost() if request.param == "local" else request.getfixturevalue("sshd").ssh_host()
    try:
        yield host
    finally:
        host.close()
