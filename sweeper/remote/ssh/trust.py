"""``sweeper trust-host``: read the key a host offers (trusting nothing) and record the
key the user confirmed in known_hosts, in OpenSSH's format."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import paramiko

from sweeper.errors import HostUnreachable
from sweeper.remote.ssh.config import load_ssh_config, resolve_chain
from sweeper.remote.ssh.connect import connect_chain, jump_channel
from sweeper.remote.ssh.faults import TRANSPORT_ERRORS, Transient
from sweeper.remote.ssh.hostkeys import DEFAULT_KNOWN_HOSTS, fingerprint_sha256
from sweeper.remote.target import SSHTarget

UNREACHABLE: tuple[type[BaseException], ...] = (*TRANSPORT_ERRORS, Transient)


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
    jumps = connect_chain(hops[:-1], known_hosts_path, connect_timeout) if hops[:-1] else None
    try:
        if jumps is not None:
            sock: socket.socket | paramiko.Channel = jump_channel(
                jumps.client, final, connect_timeout)
        else:
            sock = socket.create_connection((final.hostname, final.port), timeout=connect_timeout)
        transport = paramiko.Transport(sock)
        try:
            transport.start_client(timeout=connect_timeout)
            key = transport.get_remote_server_key()
        finally:
            transport.close()
    except UNREACHABLE as exc:
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


