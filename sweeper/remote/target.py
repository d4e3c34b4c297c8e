"""The SSH target grammar, in one place: what a study's ``hosts[].ssh`` and
``sweeper trust-host HOST`` accept. Pure text, no connection (the study loader uses it
to refuse a bad host before anything starts)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sweeper.errors import InputError

# A user or a host name never starts with '-': ssh would read it as an option.
_USER_RE = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]*$")
_HOST_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_IPV6_RE = re.compile(r"^[0-9A-Fa-f:.]+$")


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
    InputError names what is wrong.

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
        if not _USER_RE.match(user):
            raise InputError(f"ssh target {spec!r}: {user!r} is not a user name")
    port_text = ""
    bracketed = text.startswith("[")
    if bracketed:  # [v6]:port
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
    if not host:
        raise InputError(f"ssh target {spec!r}: empty host name")
    if ":" in host or bracketed:
        if not _IPV6_RE.match(host):
            raise InputError(f"ssh target {spec!r}: {host!r} is not an IPv6 address")
    elif not _HOST_RE.match(host):
        raise InputError(f"ssh target {spec!r}: {host!r} is not a host name")
    port: int | None = None
    if port_text or text.endswith(":"):
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise InputError(f"ssh target {spec!r}: port {port_text!r} is out of range "
                             "(use 1-65535)")
        port = int(port_text)
    return SSHTarget(host=host, user=user, port=port)
