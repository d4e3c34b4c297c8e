"""SSHHost: drive a GPU node over one reused paramiko connection.

paramiko reads neither ~/.ssh/config nor ProxyJump by itself (shared/STACK.md), so this
module resolves the target the way OpenSSH would (HostName, User, Port, IdentityFile,
UserKnownHostsFile, ProxyJump chains) and checks host keys against known_hosts with a
refusing policy: an unknown key is an InputError that says how to trust it
(``sweeper trust-host NAME``), never a silent trust-on-first-use.

Every argv becomes a shell string in exactly one place (``_shell``), with shlex quoting,
so a value from a study file is data on the remote side and never runs as shell.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import posixpath
import re
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import paramiko
from tenacity import (
    Retrying,
    before_sleep_log,
    retry_if_exception_type,
    stop_before_delay,
    wait_exponential,
)

from sweeper.errors import (
    CommandTimeout,
    ConnectionLost,
    HostKeyUnknown,
    HostUnreachable,
    InfrastructureError,
    InputError,
)
from sweeper.remote.host import DETACH_WRAPPER, CommandResult, Host

log = logging.getLogger(__name__)
FIRST_CONNECT_BUDGET = 10.0  # seconds of retries before the very first connection gives up
_T = TypeVar("_T")

DEFAULT_SSH_CONFIG = "~/.ssh/config"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
_MAX_JUMP_DEPTH = 8
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# TCP states in /proc/net/tcp*: 0A = LISTEN.
_TCP_LISTEN = "0A"
_WILDCARDS = {"", "0.0.0.0", "::", "*"}


# --- targets and config resolution ------------------------------------------------------


@dataclass(frozen=True)
class SSHTarget:
    """What the user wrote: ``alias`` or ``user@host[:port]`` (user and port optional)."""

    host: str
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        host = self.host
        if self.port is not None:
            host = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        return f"{self.user}@{host}" if self.user else host


def parse_target(spec: str) -> SSHTarget:
    """Parse ``alias | user@host[:port] | user@[v6addr]:port`` (OpenSSH's -J syntax too).

    >>> parse_target("root@gpu-1:2222")
    SSHTarget(host='gpu-1', user='root', port=2222)
    """
    text = spec.strip()
    if text.startswith("ssh://"):
        text = text[len("ssh://") :].rstrip("/")
    if not text or any(ch.isspace() for ch in text):
        raise InputError(f"ssh target {spec!r}: expected 'alias' or 'user@host[:port]'")
    user: str | None = None
    if "@" in text:
        user, _, text = text.rpartition("@")
        if not user:
            raise InputError(f"ssh target {spec!r}: empty user before '@'")
    port: int | None = None
    port_text = ""
    if text.startswith("["):  # [v6]:port
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise InputError(f"ssh target {spec!r}: missing ']'")
        if rest:
            if not rest.startswith(":"):
                raise InputError(f"ssh target {spec!r}: expected ':port' after ']'")
            port_text = rest[1:]
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:  # a bare IPv6 address or a plain name
        host = text
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise InputError(f"ssh target {spec!r}: port {port_text!r} is not a TCP port")
        port = int(port_text)
    if not host:
        raise InputError(f"ssh target {spec!r}: empty host name")
    return SSHTarget(host=host, user=user, port=port)


@dataclass(frozen=True)
class Hop:
    """One SSH connection to make, fully resolved from the target and ~/.ssh/config."""

    name: str  # as the user wrote it, for messages and `sweeper trust-host NAME`
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()
    known_hosts_files: tuple[str, ...] = ()
    proxy_jump: tuple[str, ...] = field(default=(), compare=False)

    @property
    def known_hosts_name(self) -> str:
        """How OpenSSH names this host in known_hosts (``[host]:port`` off port 22)."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def load_ssh_config(path: str | os.PathLike[str] | None = None) -> paramiko.SSHConfig:
    """``~/.ssh/config`` (or ``path``); an empty config when the file does not exist."""
    full = Path(os.path.expanduser(str(path or DEFAULT_SSH_CONFIG)))
    if full.is_file():
        return paramiko.SSHConfig.from_path(str(full))
    if path is not None:
        raise InputError(f"ssh config {full}: no such file")
    return paramiko.SSHConfig()


def resolve_hop(target: SSHTarget | str, config: paramiko.SSHConfig) -> Hop:
    """Apply ~/.ssh/config to one target; what the user wrote wins over the config."""
    if isinstance(target, str):
        target = parse_target(target)
    entry = config.lookup(target.host)
    port = target.port or int(entry.get("port", 22))
    user = target.user or entry.get("user") or _local_user()
    # Only existing key files: OpenSSH silently skips missing default identities too.
    identities = tuple(
        p
        for p in (os.path.expanduser(f) for f in entry.get("identityfile", []))
        if os.path.isfile(p)
    )
    known = tuple(
        os.path.expanduser(f)
        for f in str(entry.get("userknownhostsfile", "")).split()
        if f and f != "/dev/null"
    )
    jump = str(entry.get("proxyjump", "")).strip()
    jumps = () if jump.lower() in ("", "none") else tuple(j.strip() for j in jump.split(","))
    return Hop(
        name=str(target),
        hostname=entry.get("hostname", target.host),
        port=port,
        user=user,
        identity_files=identities,
        known_hosts_files=known,
        proxy_jump=jumps,
    )


def resolve_chain(
    target: SSHTarget | str, config: paramiko.SSHConfig, _depth: int = 0
) -> list[Hop]:
    """The hops to connect through, first jump first, the target last.

    ``ProxyJump a,b`` means: connect to a, through it to b, through b to the target. As in
    OpenSSH, the first jump's own ProxyJump is honoured (recursively); later jumps' are not.
    """
    if _depth > _MAX_JUMP_DEPTH:
        raise InputError(
            f"ssh target {target}: ProxyJump chain deeper than {_MAX_JUMP_DEPTH} (a loop?)"
        )
    hop = resolve_hop(target, config)
    if not hop.proxy_jump:
        return [hop]
    first, *rest = hop.proxy_jump
    chain = resolve_chain(first, config, _depth + 1)
    chain += [resolve_hop(j, config) for j in rest]
    return [*chain, hop]


def _local_user() -> str:
    import getpass

    return getpass.getuser()


# --- host keys ----------------------------------------------------------------------------


def fingerprint_sha256(key: paramiko.PKey) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint (what ``ssh-keygen -lf`` prints)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _UnknownHostKey(Exception):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(hostname)
        self.hostname = hostname
        self.key = key


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    """Like RejectPolicy, but keeps the offered key so the message can show its fingerprint."""

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        raise _UnknownHostKey(hostname, key)


def _known_hosts_files(hop: Hop, extra: str | None) -> list[str]:
    files = [SYSTEM_KNOWN_HOSTS, os.path.expanduser(DEFAULT_KNOWN_HOSTS), *hop.known_hosts_files]
    if extra:
        files.append(os.path.expanduser(extra))
    return [f for f in dict.fromkeys(files) if os.path.isfile(f)]


def _unknown_key_error(hop: Hop, hostname: str, key: paramiko.PKey) -> HostKeyUnknown:
    return HostKeyUnknown(
        f"ssh {hop.name}: host key of {hostname} ({key.get_name()} {fingerprint_sha256(key)}) "
        f"is not in known_hosts; if that fingerprint is the host's, trust it with: "
        f"sweeper trust-host {hop.name}"
    )


def _bad_key_error(hop: Hop, exc: paramiko.BadHostKeyException) -> HostKeyUnknown:
    return HostKeyUnknown(
        f"ssh {hop.name}: host key CHANGED (offered {fingerprint_sha256(exc.key)}, known_hosts has "
        f"{fingerprint_sha256(exc.expected_key)}): possibly a man-in-the-middle; if the host was "
        f"reinstalled, run `ssh-keygen -R '{hop.known_hosts_name}'` then "
        f"`sweeper trust-host {hop.name}`"
    )


# --- connecting ---------------------------------------------------------------------------


class _Transient(Exception):
    """A connection attempt that may succeed if tried again (refused, timed out, reset)."""


@dataclass
class _Connection:
    """The target's client plus the jump clients it tunnels through (kept open)."""

    clients: list[paramiko.SSHClient]

    @property
    def client(self) -> paramiko.SSHClient:
        return self.clients[-1]

    @property
    def transport(self) -> paramiko.Transport | None:
        return self.client.get_transport()

    def active(self) -> bool:
        return all(
            (c.get_transport() is not None and c.get_transport().is_active()) for c in self.clients
        )

    def close(self) -> None:
        for client in reversed(self.clients):
            with contextlib.suppress(Exception):
                client.close()


def _connect_hop(
    hop: Hop, sock: paramiko.Channel | None, known_hosts: str | None, timeout: float
) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    for path in _known_hosts_files(hop, known_hosts):
        client.load_system_host_keys(path)  # additive; never written back
    client.set_missing_host_key_policy(_RefuseUnknown())
    try:
        client.connect(
            hop.hostname,
            port=hop.port,
            username=hop.user,
            key_filename=list(hop.identity_files) or None,
            # Agent and ~/.ssh/id_* as OpenSSH would try them, after the configured keys.
            allow_agent=True,
            look_for_keys=True,
            sock=sock,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            channel_timeout=timeout,
        )
    except _UnknownHostKey as exc:
        client.close()
        raise _unknown_key_error(hop, exc.hostname, exc.key) from None
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise _bad_key_error(hop, exc) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        # Not retried: a wrong key stays wrong. The user fixes IdentityFile or the agent.
        raise InputError(
            f"ssh {hop.name}: authentication as {hop.user!r} failed ({exc}); check User and "
            f"IdentityFile in ~/.ssh/config or the keys in ssh-agent"
        ) from None
    except (OSError, EOFError, paramiko.SSHException) as exc:
        client.close()
        raise _Transient(
            f"ssh {hop.name} ({hop.hostname}:{hop.port}): {exc or type(exc).__name__}"
        ) from exc
    transport = client.get_transport()
    assert transport is not None
    # Keeps NAT/firewall state alive between trials; it does NOT detect a dead peer.
    transport.set_keepalive(30)
    return client


def _tunnel(client: paramiko.SSHClient, hop: Hop, timeout: float) -> paramiko.Channel:
    transport = client.get_transport()
    try:
        assert transport is not None
        return transport.open_channel(
            "direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0), timeout=timeout
        )
    except (OSError, EOFError, paramiko.SSHException, AssertionError) as exc:
        raise _Transient(
            f"ssh {hop.name}: jump to {hop.hostname}:{hop.port} failed: {exc}"
        ) from exc


def _connect_chain(hops: list[Hop], known_hosts: str | None, timeout: float) -> _Connection:
    clients: list[paramiko.SSHClient] = []
    try:
        sock: paramiko.Channel | None = None
        for i, hop in enumerate(hops):
            if i:
                sock = _tunnel(clients[-1], hop, timeout)
            clients.append(_connect_hop(hop, sock, known_hosts, timeout))
    except BaseException:
        _Connection(clients).close()
        raise
    return _Connection(clients)


def fetch_host_key(
    target: SSHTarget | str,
    *,
    ssh_config_path: str | None = None,
    known_hosts_path: str | None = None,
    connect_timeout: float = 10.0,
) -> tuple[str, str, paramiko.PKey]:
    """The key the host offers: ``(key_type, "SHA256:...", key)``; nothing is trusted.

    Jump hosts on the way must already be trusted (their keys are checked as usual).
    """
    config = load_ssh_config(ssh_config_path)
    hops = resolve_chain(target, config)
    final = hops[-1]
    jumps = _connect_chain(hops[:-1], known_hosts_path, connect_timeout) if hops[:-1] else None
    try:
        if jumps is not None:
            sock: socket.socket | paramiko.Channel = _tunnel(jumps.client, final, connect_timeout)
        else:
            sock = socket.create_connection((final.hostname, final.port), timeout=connect_timeout)
        transport = paramiko.Transport(sock)
        try:
            transport.start_client(timeout=connect_timeout)
            key = transport.get_remote_server_key()
        finally:
            transport.close()
    except (OSError, EOFError, paramiko.SSHException, _Transient) as exc:
        raise HostUnreachable(f"ssh {final.name}: cannot read its host key: {exc}") from exc
    finally:
        if jumps is not None:
            jumps.close()
    return key.get_name(), fingerprint_sha256(key), key


def trust_host(
    target: SSHTarget | str,
    known_hosts_path: str | None = None,
    *,
    hashed: bool = False,
    ssh_config_path: str | None = None,
    connect_timeout: float = 10.0,
    key: paramiko.PKey | None = None,
) -> str:
    """Record the host's key in known_hosts (OpenSSH format); returns a one-line report
    with the fingerprint, for ``sweeper trust-host NAME`` to print.

    Pass ``key`` (from ``fetch_host_key``) to record exactly the key the user was shown
    and confirmed; without it the key is fetched here. The file is, in order:
    ``known_hosts_path``, the host's UserKnownHostsFile from ~/.ssh/config,
    ~/.ssh/known_hosts. ``hashed`` writes the name as HashKnownHosts does.
    """
    config = load_ssh_config(ssh_config_path)
    hop = resolve_chain(target, config)[-1]
    if key is None:
        _, _, key = fetch_host_key(
            target,
            ssh_config_path=ssh_config_path,
            known_hosts_path=known_hosts_path,
            connect_timeout=connect_timeout,
        )
    key_type, fingerprint = key.get_name(), fingerprint_sha256(key)
    path = Path(
        os.path.expanduser(
            known_hosts_path
            or (hop.known_hosts_files[0] if hop.known_hosts_files else DEFAULT_KNOWN_HOSTS)
        )
    )
    name = hop.known_hosts_name
    existing = paramiko.HostKeys()
    if path.is_file():
        existing.load(str(path))
    known = existing.lookup(name)
    if known is not None and key_type in known and known[key_type] == key:
        return f"{hop.name}: {key_type} {fingerprint} already trusted in {path}"
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    entry = paramiko.HostKeys.hash_host(name) if hashed else name
    needs_newline = (
        path.is_file() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    )
    with open(path, "a", encoding="ascii") as fh:
        fh.write(("\n" if needs_newline else "") + f"{entry} {key_type} {key.get_base64()}\n")
    return f"{hop.name}: trusted {key_type} {fingerprint} ({name}) in {path}"


# --- the host -----------------------------------------------------------------------------


def _remote_path(path: str) -> str:
    """Quote a path for the remote shell, keeping a leading ``~`` expandable there."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def _sftp_path(path: str) -> str:
    # The SFTP server starts in the login directory, so "~/x" is just "x" there.
    if path == "~":
        return "."
    return path[2:] if path.startswith("~/") else path


def _env_argv(env: Mapping[str, str] | None) -> list[str]:
    """``env K=V ...`` as argv words: the variables reach that one process only."""
    if not env:
        return []
    for key in env:
        if not _ENV_NAME.match(key):
            raise InputError(f"environment variable name {key!r} is not a valid shell name")
    return ["env", *(f"{k}={v}" for k, v in env.items())]


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
        self.ssh_config_path = ssh_config_path
        self.known_hosts_path = known_hosts_path
        self.connect_timeout = connect_timeout
        self.retry_budget = retry_budget
        self.alive_timeout = alive_timeout
        self.hops = resolve_chain(self.target, load_ssh_config(ssh_config_path))
        self._conn: _Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._ever_connected = False
        self._lock = threading.RLock()

    # connection ------------------------------------------------------------------------

    def connect(self) -> None:
        """Open the connection now (otherwise the first command opens it)."""
        self._transport()

    def _transport(self) -> paramiko.Transport:
        """The live transport, re-connecting (bounded retries) when it has dropped."""
        with self._lock:
            if self._conn is not None and self._conn.active():
                transport = self._conn.transport
                assert transport is not None
                return transport
            self._drop()
            # The first connection fails fast and quietly (a wrong address or a node that
            # is down should be one clear error, not half a minute of retries); once the
            # sweep has connected, a drop gets the full budget and each retry is logged.
            first = not self._ever_connected
            budget = min(self.retry_budget, FIRST_CONNECT_BUDGET) if first else self.retry_budget
            retrying = Retrying(
                stop=stop_before_delay(budget),
                wait=wait_exponential(multiplier=0.25, min=0.25, max=4),
                retry=retry_if_exception_type(_Transient),
                before_sleep=before_sleep_log(log, logging.DEBUG if first else logging.WARNING),
                reraise=True,
            )
            try:
                self._conn = retrying(
                    _connect_chain, self.hops, self.known_hosts_path, self.connect_timeout
                )
            except _Transient as exc:
                if self._ever_connected:
                    raise ConnectionLost(
                        f"ssh {self.name}: connection lost and not re-established within "
                        f"{self.retry_budget:.0f}s: {exc}"
                    ) from None
                raise HostUnreachable(
                    f"ssh {self.name}: unreachable for {budget:.0f}s: {exc}"
                ) from None
            self._ever_connected = True
            transport = self._conn.transport
            assert transport is not None
            return transport

    def _drop(self) -> None:
        with self._lock:
            if self._sftp is not None:
                with contextlib.suppress(Exception):
                    self._sftp.close()
                self._sftp = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def close(self) -> None:
        """Close the connection; processes started detached keep running on the host."""
        self._drop()

    def __enter__(self) -> SSHHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lost(self, what: str, exc: BaseException) -> ConnectionLost:
        self._drop()
        return ConnectionLost(
            f"ssh {self.name}: connection lost during {what}: {exc or type(exc).__name__}"
        )

    def check_alive(self) -> None:
        """A real round trip (keepalives do not notice a dead peer). A half-open connection
        that does not answer is dropped and re-opened once (with the retry budget)."""
        try:
            self.run(["true"], timeout=self.alive_timeout)
            return
        except (CommandTimeout, ConnectionLost):
            self._drop()
        try:
            self.run(["true"], timeout=self.alive_timeout)
        except CommandTimeout as exc:
            raise ConnectionLost(
                f"ssh {self.name}: no answer within {self.alive_timeout:.0f}s"
            ) from exc

    # commands --------------------------------------------------------------------------

    def _open_session(self) -> paramiko.Channel:
        # Opening a channel is safe to retry: nothing has run yet. Once the command is
        # sent, a drop is reported (ConnectionLost), since re-running it may not be safe.
        for attempt in (1, 2):
            transport = self._transport()
            try:
                return transport.open_session(timeout=self.connect_timeout)
            except (OSError, EOFError, paramiko.SSHException) as exc:
                self._drop()
                if attempt == 2:
                    raise self._lost("channel open", exc) from exc
        raise AssertionError("unreachable")

    def run_shell(self, command: str, *, timeout: float = 60.0) -> CommandResult:
        """Run a shell string already built from quoted parts (internal; prefer ``run``)."""
        chan = self._open_session()
        out: list[bytes] = []
        err: list[bytes] = []
        deadline = time.monotonic() + timeout
        try:
            chan.exec_command(command)
            chan.shutdown_write()  # stdin = EOF, like </dev/null
            while True:
                # Drain both streams while waiting: a full window would block the command.
                busy = False
                while chan.recv_ready():
                    out.append(chan.recv(65536))
                    busy = True
                while chan.recv_stderr_ready():
                    err.append(chan.recv_stderr(65536))
                    busy = True
                if (
                    chan.exit_status_ready()
                    and not chan.recv_ready()
                    and not chan.recv_stderr_ready()
                ):
                    break
                if chan.closed and not chan.exit_status_ready():
                    raise EOFError("channel closed without an exit status")
                if time.monotonic() > deadline:
                    raise CommandTimeout(
                        f"ssh {self.name}: {command} did not finish in {timeout:g}s"
                    )
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
        except CommandTimeout:
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._lost(f"`{command}`", exc) from exc
        finally:
            chan.close()
        if code == -1:  # paramiko's "no status": the session died, e.g. sshd killed
            transport = self._conn.transport if self._conn else None
            if transport is None or not transport.is_active():
                raise self._lost(f"`{command}`", EOFError("no exit status"))
        return CommandResult(
            code, b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace")
        )

    def run(
        self, argv: Sequence[str], *, timeout: float = 60.0, env: Mapping[str, str] | None = None
    ) -> CommandResult:
        """Run argv on the host (one shlex-quoted string; env via ``env K=V``)."""
        return self.run_shell(shlex.join([*_env_argv(env), *argv]), timeout=timeout)

    def start_detached(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        log_path: str,
        exit_path: str,
    ) -> int:
        """setsid + nohup, output to log_path, exit code to exit_path; pid = pgid.

        The command returns as soon as the job is forked (no pty, own session), so the job
        survives the SSH session. ``cd`` is a separate statement: ``cd x && setsid ... &``
        would background a subshell that holds the channel open (shared/STACK.md).
        """
        wrapped = shlex.join(["bash", "-c", DETACH_WRAPPER, "sweeper-wrap"])
        inner = shlex.join([*_env_argv(env), *argv])
        log_dir = posixpath.dirname(log_path) or "."
        script = (
            f"mkdir -p -- {_remote_path(log_dir)} || exit 1; "
            f"rm -f -- {_remote_path(exit_path)}; "
            f"cd -- {_remote_path(cwd)} || exit 1; "
            f"setsid nohup {wrapped} {_remote_path(exit_path)} {inner} "
            f">>{_remote_path(log_path)} 2>&1 </dev/null & echo $!"
        )
        result = self.run_shell(script, timeout=30)
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

    def _sftp_client(self) -> paramiko.SFTPClient:
        with self._lock:
            transport = self._transport()
            if (
                self._sftp is None
                or self._sftp.get_channel() is None
                or self._sftp.get_channel().closed
            ):
                try:
                    self._sftp = paramiko.SFTPClient.from_transport(transport)
                except (OSError, EOFError, paramiko.SSHException) as exc:
                    raise self._lost("sftp start", exc) from exc
            assert self._sftp is not None
            return self._sftp

    def _sftp_call(self, what: str, fn: Callable[[paramiko.SFTPClient], _T]) -> _T:
        try:
            return fn(self._sftp_client())
        except FileNotFoundError:
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if isinstance(exc, OSError) and exc.errno is not None:
                raise  # a remote file error (EACCES...), not the connection
            raise self._lost(what, exc) from exc

    def read_file(self, path: str, max_bytes: int = 16384) -> str | None:
        """Tail of a remote file via SFTP (exact bytes, no shell, no `tail` exit codes)."""

        def tail(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(_sftp_path(path), "rb") as fh:
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
            st = self._sftp_call(f"stat {path}", lambda s: s.stat(_sftp_path(path)))
        except FileNotFoundError:
            return None
        return int(st.st_size or 0)

    def put_file(self, local_path: str | os.PathLike[str], remote_path: str) -> None:
        """Copy a local file to the host (SFTP); the remote directory must exist."""
        self._sftp_call(
            f"put {remote_path}", lambda s: s.put(str(local_path), _sftp_path(remote_path))
        )

    def get_file(self, remote_path: str, local_path: str | os.PathLike[str]) -> None:
        """Copy a file from the host (SFTP)."""
        self._sftp_call(
            f"get {remote_path}", lambda s: s.get(_sftp_path(remote_path), str(local_path))
        )

    def makedirs(self, path: str) -> str:
        result = self.run_shell(
            f"mkdir -p -- {_remote_path(path)} && cd -- {_remote_path(path)} && pwd -P", timeout=30
        )
        if result.exit_code != 0:
            raise InfrastructureError(
                f"ssh {self.name}: mkdir {path} failed: {result.stderr.strip()}"
            )
        return result.stdout.strip()

    # ports -----------------------------------------------------------------------------

    def port_free(self, port: int, bind_host: str = "127.0.0.1") -> bool:
        """Whether a server could listen on ``bind_host:port`` on the host.

        Reads the kernel's socket tables (/proc/net/tcp, tcp6) instead of probing: needs no
        python3 or ss on the host, sends no connection to a stranger's server, is not fooled
        by a firewall or by TIME_WAIT sockets (which do not stop SO_REUSEADDR servers), and
        sees listeners bound to any address, not just the one a connect() would try.
        """
        result = self.run(["cat", "/proc/net/tcp", "/proc/net/tcp6"], timeout=20)
        if not result.stdout:
            raise InfrastructureError(
                f"ssh {self.name}: cannot read /proc/net/tcp: {result.stderr.strip()}"
            )
        wanted = _normalise_bind(bind_host)
        for addr, lport in _listeners(result.stdout):
            if lport != port:
                continue
            if wanted is None or addr is None or addr == wanted:
                return False
        return True

    @contextlib.contextmanager
    def forward(self, port: int, bind_host: str = "127.0.0.1") -> Iterator[str]:
        """A local listener on 127.0.0.1:RANDOM whose connections go over this SSH connection
        (direct-tcpip) to ``bind_host:port`` as seen from the host. Re-opens the SSH
        connection if it dropped in between. Closed on exit."""
        remote_host = "127.0.0.1" if bind_host in _WILDCARDS else bind_host
        tunnel = _Tunnel(self, remote_host, port)
        try:
            yield f"http://127.0.0.1:{tunnel.local_port}"
        finally:
            tunnel.close()


def _normalise_bind(bind_host: str) -> str | None:
    """The address as /proc shows it, or None for 'any address' (or an unresolved name)."""
    if bind_host in _WILDCARDS:
        return None
    if bind_host == "localhost":
        return "127.0.0.1"
    try:
        return socket.inet_ntop(socket.AF_INET, socket.inet_pton(socket.AF_INET, bind_host))
    except OSError:
        pass
    try:
        return socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, bind_host))
    except OSError:
        return None  # a host name: treat any listener on the port as a conflict


def _listeners(proc_net_tcp: str) -> Iterator[tuple[str | None, int]]:
    """(address or None for a wildcard, port) of every LISTEN socket in /proc/net/tcp*."""
    for line in proc_net_tcp.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[3] != _TCP_LISTEN or ":" not in parts[1]:
            continue
        hex_addr, hex_port = parts[1].rsplit(":", 1)
        try:
            raw = bytes.fromhex(hex_addr)
            port = int(hex_port, 16)
        except ValueError:
            continue
        # The kernel prints each 32-bit word in host (little-endian) order.
        words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
        if len(words) == 4:
            addr = socket.inet_ntop(socket.AF_INET, words)
        else:
            addr = socket.inet_ntop(socket.AF_INET6, words)
            if addr.startswith("::ffff:") and "." in addr:
                addr = addr[len("::ffff:") :]
        yield (None if addr in ("0.0.0.0", "::") else addr), port


class _Tunnel:
    """Local port -> direct-tcpip channel, one pump thread per accepted connection."""

    def __init__(self, host: SSHHost, remote_host: str, remote_port: int) -> None:
        self.host = host
        self.remote = (remote_host, remote_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.local_port = int(self.listener.getsockname()[1])
        self._closing = threading.Event()
        self._pairs: set[tuple[socket.socket, paramiko.Channel]] = set()
        self._pairs_lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._accept_loop, daemon=True, name=f"ssh-forward-{self.local_port}"
        )
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                conn, peer = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _open_channel(self, peer: tuple[str, int]) -> paramiko.Channel:
        try:
            return self.host._transport().open_channel(
                "direct-tcpip", self.remote, peer, timeout=10
            )
        except (OSError, EOFError, paramiko.SSHException):
            # The connection may have dropped since the last use: re-open once and retry.
            self.host._drop()
            return self.host._transport().open_channel(
                "direct-tcpip", self.remote, peer, timeout=10
            )

    def _serve(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        try:
            chan = self._open_channel(peer[:2])
        except Exception as exc:  # the client sees a closed connection; we log why
            log.warning("ssh %s: forward to %s:%d failed: %s", self.host.name, *self.remote, exc)
            conn.close()
            return
        pair = (conn, chan)
        with self._pairs_lock:
            self._pairs.add(pair)
        try:
            while not self._closing.is_set():
                ready, _, _ = select.select([conn, chan], [], [], 0.2)
                if conn in ready:
                    data = conn.recv(65536)
                    if not data:
                        break
                    chan.sendall(data)
                if chan in ready:
                    data = chan.recv(65536)
                    if not data:
                        break
                    conn.sendall(data)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            with self._pairs_lock:
                self._pairs.discard(pair)
            chan.close()
            conn.close()

    def close(self) -> None:
        self._closing.set()
        self.listener.close()
        self._thread.join(timeout=2)
        with self._pairs_lock:
            pairs = list(self._pairs)
        for conn, chan in pairs:
            with contextlib.suppress(Exception):
                chan.close()
            with contextlib.suppress(Exception):
                conn.close()
