"""One SSH connection: the target's client plus the jump clients it tunnels through.
Each attempt either connects, fails for good (host key, authentication: InputError), or
raises Transient for the caller's retry loop."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import paramiko

from sweeper.errors import InputError
from sweeper.remote.ssh.config import Hop
from sweeper.remote.ssh.faults import Transient, transient
from sweeper.remote.ssh.hostkeys import (
    UnknownHostKey,
    bad_key_error,
    load_known_hosts,
    unknown_key_error,
)


@dataclass
class Connection:
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
            ((t := c.get_transport()) is not None and t.is_active()) for c in self.clients
        )

    def close(self) -> None:
        for client in reversed(self.clients):
            with contextlib.suppress(Exception):
                client.close()


def connect_hop(
    hop: Hop, sock: paramiko.Channel | None, known_hosts: str | None, timeout: float
) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    load_known_hosts(client, hop, known_hosts)
    try:
        with transient(f"ssh {hop.name} ({hop.hostname}:{hop.port})"):
            client.connect(
                hop.hostname,
                port=hop.port,
                username=hop.user,
                # paramiko takes a list of files too (its stubs say one)
                key_filename=list(hop.identity_files) or None,  # type: ignore[arg-type]
                # Agent and ~/.ssh/id_* as OpenSSH would try them, after the configured keys.
                allow_agent=True,
                look_for_keys=True,
                sock=sock,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                channel_timeout=timeout,
            )
    except UnknownHostKey as exc:
        client.close()
        raise unknown_key_error(hop, exc.hostname, exc.key) from None
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise bad_key_error(hop, exc) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        # Not retried: a wrong key stays wrong. The user fixes IdentityFile or the agent.
        raise InputError(
            f"ssh {hop.name}: authentication as {hop.user!r} failed ({exc}); check User and "
            f"IdentityFile in ~/.ssh/config or the keys in ssh-agent"
        ) from None
    except Transient:
        client.close()
        raise
    transport = client.get_transport()
    assert transport is not None
    # Keeps NAT/firewall state alive between trials; it does NOT detect a dead peer.
    transport.set_keepalive(30)
    return client


def jump_channel(client: paramiko.SSHClient, hop: Hop, timeout: float) -> paramiko.Channel:
    """A channel through ``client`` to the next hop's SSH port (ProxyJump)."""
    transport = client.get_transport()
    if transport is None:
        raise Transient(f"ssh {hop.name}: jump to {hop.hostname}:{hop.port} failed: "
                        "the jump host's connection is closed")
    with transient(f"ssh {hop.name}: jump to {hop.hostname}:{hop.port} failed"):
        return transport.open_channel(
            "direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0), timeout=timeout
        )


def connect_chain(hops: list[Hop], known_hosts: str | None, timeout: float) -> Connection:
    clients: list[paramiko.SSHClient] = []
    try:
        sock: paramiko.Channel | None = None
        for i, hop in enumerate(hops):
            if i:
                sock = jump_channel(clients[-1], hop, timeout)
            clients.append(connect_hop(hop, sock, known_hosts, timeout))
    except BaseException:
        Connection(clients).close()
        raise
    return Connection(clients)
