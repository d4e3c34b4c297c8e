"""The one reused SSH connection to a host, re-opened with bounded retries when it drops.

Everything that talks to the host (commands, SFTP, the port tunnel) goes through a Session,
so reconnecting and the mapping of a dropped connection to ConnectionLost live here.
"""

from __future__ import annotations

import contextlib
import logging
import threading

import paramiko
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_before_delay,
    wait_exponential,
)

from sweeper.errors import ConnectionLost, HostUnreachable
from sweeper.remote.ssh.config import Hop
from sweeper.remote.ssh.connect import Connection, connect_chain
from sweeper.remote.ssh.faults import TRANSPORT_ERRORS, Transient, lost

log = logging.getLogger("sweeper.remote.ssh")
FIRST_CONNECT_BUDGET = 10.0  # seconds of retries before the very first connection gives up
# paramiko logs its own view of every fault ("Secsh channel 24 open FAILED: ..."), which
# faults.py already turns into the sweeper's errors and words: the user sees those only.
logging.getLogger("paramiko").setLevel(logging.CRITICAL)


class Session:
    """A connection to ``hops[-1]`` through the jumps before it, opened on first use."""

    def __init__(self, name: str, hops: list[Hop], *, known_hosts_path: str | None,
                 connect_timeout: float, retry_budget: float) -> None:
        self.name = name
        self.hops = hops
        self.known_hosts_path = known_hosts_path
        self.connect_timeout = connect_timeout
        self.retry_budget = retry_budget
        self._conn: Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._ever_connected = False
        self._lock = threading.RLock()

    def _say_retry(self, level: int, budget: float):  # noqa: ANN202 - tenacity's hook
        """One sweeper line per retry (tenacity's own names a function and a repr)."""
        def say(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            reason = str(exc).strip().splitlines()[0] if exc and str(exc).strip() else \
                type(exc).__name__
            log.log(level, "ssh %s: connection failed (%s); retry %d in %.1fs (gives up "
                    "after %.0fs)", self.name, reason, state.attempt_number, wait, budget)
        return say

    def transport(self) -> paramiko.Transport:
        """The live transport, re-connecting (bounded retries) when it has dropped."""
        with self._lock:
            if self._conn is not None and self._conn.active():
                transport = self._conn.transport
                assert transport is not None
                return transport
            self.drop()
            # The first connection fails fast and quietly (a wrong address or a node that
            # is down should be one clear error, not half a minute of retries); once the
            # sweep has connected, a drop gets the full budget and each retry is logged.
            first = not self._ever_connected
            budget = min(self.retry_budget, FIRST_CONNECT_BUDGET) if first else self.retry_budget
            retrying = Retrying(
                stop=stop_before_delay(budget),
                wait=wait_exponential(multiplier=0.25, min=0.25, max=4),
                retry=retry_if_exception_type(Transient),
                before_sleep=self._say_retry(logging.DEBUG if first else logging.WARNING,
                                             budget),
                reraise=True,
            )
            try:
                self._conn = retrying(
                    connect_chain, self.hops, self.known_hosts_path, self.connect_timeout
                )
            except Transient as exc:
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

    def transport_active(self) -> bool:
        """Whether the connection is open right now (no reconnect attempted)."""
        return self._conn is not None and self._conn.active()

    def drop(self) -> None:
        """Forget the connection (closing it); the next use re-opens it."""
        with self._lock:
            if self._sftp is not None:
                with contextlib.suppress(Exception):
                    self._sftp.close()
                self._sftp = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def lost(self, what: str, *, files: bool = False) -> contextlib.AbstractContextManager[None]:
        """Around a use of the open connection: a drop becomes ConnectionLost."""
        return lost(self.name, what, self.drop, files=files)

    def open_session(self) -> paramiko.Channel:
        """A channel for one command. Opening it is safe to retry (nothing has run yet);
        once the command is sent, a drop is reported, since re-running may not be safe."""
        for attempt in (1, 2):
            transport = self.transport()
            try:
                return transport.open_session(timeout=self.connect_timeout)
            except TRANSPORT_ERRORS:
                self.drop()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def open_channel(self, kind: str, dest: tuple[str, int], src: tuple[str, int],
                     timeout: float = 10.0) -> paramiko.Channel:
        """A forwarding channel (``direct-tcpip``); the connection may have dropped since
        the last use, so a failure re-opens it once and tries again.

        A refusal by the host (``ChannelException``: nothing listens at ``dest`` yet, as
        while a server starts) says nothing about the connection: it is raised as is and
        the connection is kept. Dropping it here would cut every command, file transfer and
        tunnel that other threads run on it at that moment."""
        try:
            return self.transport().open_channel(kind, dest, src, timeout=timeout)
        except paramiko.ChannelException:
            raise
        except TRANSPORT_ERRORS:
            self.drop()
            transport = self.transport()
            refused: paramiko.ChannelException | None = None
            with self.lost(f"forward to {dest[0]}:{dest[1]}"):
                try:
                    return transport.open_channel(kind, dest, src, timeout=timeout)
                except paramiko.ChannelException as exc:
                    refused = exc  # raised outside `lost`: the connection itself is fine
            assert refused is not None
            raise refused from None

    def sftp(self) -> paramiko.SFTPClient:
        """The SFTP client on this connection (opened on first use, re-opened after a drop)."""
        with self._lock:
            transport = self.transport()
            channel = self._sftp.get_channel() if self._sftp is not None else None
            if channel is None or channel.closed:
                with self.lost("sftp start"):
                    self._sftp = paramiko.SFTPClient.from_transport(transport)
            assert self._sftp is not None
            return self._sftp
