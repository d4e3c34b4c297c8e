"""~/.ssh/config and ProxyJump, resolved the way OpenSSH would: paramiko reads neither
by itself. A target becomes a chain of hops (jumps first, the target last)."""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from sweeper.errors import InputError
from sweeper.remote.target import SSHTarget, parse_target

DEFAULT_SSH_CONFIG = "~/.ssh/config"
_MAX_JUMP_DEPTH = 8


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
    user = target.user or entry.get("user") or getpass.getuser()
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
