"""Host keys: checked against known_hosts with a refusing policy. An unknown key is an
InputError that shows its fingerprint and says how to trust it (``sweeper trust-host
NAME``); a changed key is refused loudly. Never a silent trust-on-first-use."""

from __future__ import annotations

import base64
import hashlib
import os

import paramiko

from sweeper.errors import HostKeyUnknown
from sweeper.remote.ssh.config import Hop

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"


def fingerprint_sha256(key: paramiko.PKey) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint (what ``ssh-keygen -lf`` prints)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class UnknownHostKey(Exception):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(hostname)
        self.hostname = hostname
        self.key = key


class RefuseUnknown(paramiko.MissingHostKeyPolicy):
    """Like RejectPolicy, but keeps the offered key so the message can show its fingerprint."""

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        raise UnknownHostKey(hostname, key)


def unknown_key_error(hop: Hop, hostname: str, key: paramiko.PKey) -> HostKeyUnknown:
    return HostKeyUnknown(
        f"ssh {hop.name}: host key of {hostname} ({key.get_name()} {fingerprint_sha256(key)}) "
        f"is not in known_hosts; if that fingerprint is the host's, trust it with: "
        f"sweeper trust-host {hop.name}"
    )


def bad_key_error(hop: Hop, exc: paramiko.BadHostKeyException) -> HostKeyUnknown:
    return HostKeyUnknown(
        f"ssh {hop.name}: host key CHANGED (offered {fingerprint_sha256(exc.key)}, known_hosts has "
        f"{fingerprint_sha256(exc.expected_key)}): possibly a man-in-the-middle; if the host was "
        f"reinstalled, run `ssh-keygen -R '{hop.known_hosts_name}'` then "
        f"`sweeper trust-host {hop.name}`"
    )




def known_hosts_files(hop: Hop, extra: str | None) -> list[str]:
    files = [SYSTEM_KNOWN_HOSTS, os.path.expanduser(DEFAULT_KNOWN_HOSTS), *hop.known_hosts_files]
    if extra:
        files.append(os.path.expanduser(extra))
    return [f for f in dict.fromkeys(files) if os.path.isfile(f)]


def load_known_hosts(client: paramiko.SSHClient, hop: Hop, extra: str | None) -> None:
    """Every known_hosts file that applies (never written back), and the refusing policy."""
    for path in known_hosts_files(hop, extra):
        client.load_system_host_keys(path)  # additive
    client.set_missing_host_key_policy(RefuseUnknown())
