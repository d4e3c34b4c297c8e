"""The one place where paramiko's and the socket layer's exceptions become sweeper's
error types (as httpx maps its transport errors in one place).

Two situations, two mappings:

* while connecting (``transient``): a refused, reset or timed-out attempt may succeed if
  tried again; it becomes ``Transient``, which the connection's retry loop catches;
* once connected (``lost``): the connection dropped under a command, a file transfer or a
  channel; it becomes ``ConnectionLost`` (an InfrastructureError: the trial is retried),
  after the caller's ``on_lost`` hook has dropped the dead connection.

For SFTP calls (``files=True``) an OSError with an errno (ENOENT, EACCES...) is the remote
file's error, not the connection's: it passes through unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import paramiko

from sweeper.errors import CommandTimeout, ConnectionLost

# What the transport layer raises when a connection or a channel fails.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, paramiko.SSHException)
# SSHException subclasses that trying again cannot fix: the caller turns them into an
# InputError (a changed host key, a refused key).
PERMANENT: tuple[type[BaseException], ...] = (paramiko.BadHostKeyException,
                                              paramiko.AuthenticationException)


class Transient(Exception):
    """A connection attempt that may succeed if tried again (refused, timed out, reset)."""


def describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


@contextlib.contextmanager
def transient(what: str) -> Iterator[None]:
    """Connection-time faults -> Transient(``what: cause``)."""
    try:
        yield
    except PERMANENT:
        raise
    except TRANSPORT_ERRORS as exc:
        raise Transient(f"{what}: {describe(exc)}") from exc


@contextlib.contextmanager
def lost(name: str, what: str, on_lost: Callable[[], None], *,
         files: bool = False) -> Iterator[None]:
    """Faults of an open connection -> ConnectionLost, after ``on_lost()`` dropped it."""
    try:
        yield
    except (CommandTimeout, FileNotFoundError):
        raise
    except TRANSPORT_ERRORS as exc:
        if files and isinstance(exc, OSError) and exc.errno is not None:
            raise  # a remote file error (EACCES...), not the connection
        on_lost()
        raise ConnectionLost(f"ssh {name}: connection lost during {what}: "
                             f"{describe(exc)}") from exc
