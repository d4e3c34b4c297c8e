"""Listening sockets from the kernel's tables (/proc/net/tcp, tcp6), read on the host:
needs no python3 or ss there, sends no connection to a stranger's server, is not fooled
by a firewall or by TIME_WAIT sockets, and sees listeners bound to any address."""

from __future__ import annotations

import socket
from collections.abc import Iterator

from sweeper.remote.host import WILDCARDS

# TCP states in /proc/net/tcp*: 0A = LISTEN.
_TCP_LISTEN = "0A"


def normalise_bind(bind_host: str) -> str | None:
    """The address as /proc shows it, or None for 'any address' (or an unresolved name)."""
    if bind_host in WILDCARDS:
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


def listeners(proc_net_tcp: str) -> Iterator[tuple[str | None, int]]:
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


def port_listened(proc_net_tcp: str, port: int, bind_host: str) -> bool:
    """Whether a LISTEN socket in the tables would stop a server binding ``bind_host:port``."""
    wanted = normalise_bind(bind_host)
    for addr, lport in listeners(proc_net_tcp):
        if lport == port and (wanted is None or addr is None or addr == wanted):
            return True
    return False
