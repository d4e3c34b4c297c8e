"""A local port whose connections go over the host's SSH session (direct-tcpip) to a
server that binds loopback on the host: nothing exposed on the GPU node."""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from typing import Any

import paramiko

from sweeper.remote.ssh.faults import TRANSPORT_ERRORS
from sweeper.remote.ssh.session import Session

log = logging.getLogger("sweeper.remote.ssh")


class Tunnel:
    """Local port -> direct-tcpip channel, one pump thread per accepted connection."""

    def __init__(self, session: Session, remote_host: str, remote_port: int) -> None:
        self.session = session
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

    def _serve(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        try:
            chan = self.session.open_channel("direct-tcpip", self.remote, peer[:2])
        except Exception as exc:  # the client sees a closed connection; we log why
            log.warning("ssh %s: forward to %s:%d failed: %s", self.session.name, *self.remote, exc)
            conn.close()
            return
        pair = (conn, chan)
        with self._pairs_lock:
            self._pairs.add(pair)
        try:
            while not self._closing.is_set():
                waited: list[Any] = [conn, chan]  # a socket and a paramiko Channel
                ready, _, _ = select.select(waited, [], [], 0.2)
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
        except TRANSPORT_ERRORS:
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

