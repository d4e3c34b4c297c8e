"""A Ctrl-C is never lost.

Python raises KeyboardInterrupt wherever the main thread happens to be when SIGINT
arrives. When that is a finalizer or a weakref callback (SQLAlchemy's result objects have
them: reading the study's trials runs one every few milliseconds), the exception is
printed as "Exception ignored" and dropped, and the sweep goes on as if nothing was
pressed. ``kept`` installs a handler that also notes the Ctrl-C; ``raise_pending`` raises
it again at the loop's next check, so a dropped one costs at most one poll, and keeps
the "Exception ignored" traceback of the dropped one off the user's screen.

A Ctrl-C pressed again while the first one's clean-up runs (``cleaning_up``: servers
being stopped, trials recorded) would cut that short and leave a server holding the
node's GPUs: the first such press is said and absorbed; one more abandons the clean-up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import threading
from collections.abc import Iterator
from types import FrameType

_pending = threading.Event()
_cleanup = 0  # clean-ups running (nested)
_absorbed = False  # a press during the clean-up was said and absorbed
_abandoned = False  # one more press cut a clean-up short
AGAIN = ("still stopping cleanly: the server is being stopped so that it does not hold the "
         "node; press Ctrl-C once more to abandon that (the server may be left running)")


def note_and_raise(signum: int, frame: FrameType | None) -> None:
    """The SIGINT handler (SIGTERM's and SIGHUP's raise through here too)."""
    global _absorbed, _abandoned
    if _cleanup:
        if not _absorbed:
            _absorbed = True
            with contextlib.suppress(Exception):  # a write it interrupted; a closed terminal
                sys.stderr.write(f"\n{AGAIN}\n")
                sys.stderr.flush()
            return
        _abandoned = True
    _pending.set()
    raise KeyboardInterrupt


def abandoned() -> bool:
    """Whether a clean-up after a Ctrl-C was cut short by pressing it twice more."""
    return _abandoned


@contextlib.contextmanager
def cleaning_up() -> Iterator[None]:
    """The clean-up after a Ctrl-C: one more press is absorbed (said once), a second
    abandons it. Only around code that runs because the sweep is stopping."""
    global _cleanup, _absorbed
    _cleanup += 1
    try:
        yield
    finally:
        _cleanup -= 1
        if not _cleanup:
            _absorbed = False


def raise_pending() -> None:
    """Raise a Ctrl-C that was noted but dropped; called where the main thread polls (a
    no-op on any other thread: a Ctrl-C is the main thread's to act on)."""
    if _pending.is_set() and threading.current_thread() is threading.main_thread():
        _pending.clear()
        raise KeyboardInterrupt


def handled() -> None:
    """The KeyboardInterrupt was caught and acted on: nothing pending any more."""
    _pending.clear()


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """While inside, SIGINT goes through ``note_and_raise`` (main thread only: elsewhere a
    handler cannot be set, and Python's own stays)."""
    quiet = sys.unraisablehook

    def unraisable(info: sys.UnraisableHookArgs) -> None:
        # the dropped Ctrl-C is noted and raised again: no "Exception ignored" traceback
        if not isinstance(info.exc_value, KeyboardInterrupt):
            quiet(info)

    sys.unraisablehook = unraisable
    try:
        previous = signal.getsignal(signal.SIGINT)
        # ignored (nohup, a background job without job control): it stays ignored
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, note_and_raise)
    except ValueError:
        previous = signal.SIG_IGN  # not the main thread: nothing installed to restore
    try:
        yield
    finally:
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = quiet
        _pending.clear()


# Here, not in run/common.py: optimize installs it from its first second, before the study
# file is read, and this module imports nothing heavy (a bad study is refused lightly).
@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (the terminal closed) take the Ctrl-C path: the trial is recorded
    and queued again, the server stopped. After a hang-up the terminal is gone: output goes
    to /dev/null from then on, so writing a line cannot stop the clean-up half-way."""
    def handler(signum: int, frame: object) -> None:
        if signum == signal.SIGHUP:
            _detach_from_terminal()
        note_and_raise(signum, None)  # noted: raised again if a finalizer drops it

    # under nohup a hang-up is ignored on purpose: leave it so
    signals = [signal.SIGTERM] + ([signal.SIGHUP] if signal.getsignal(signal.SIGHUP)
                                  is not signal.SIG_IGN else [])
    try:
        previous = {sig: signal.signal(sig, handler) for sig in signals}
    except ValueError:  # not the main thread (tests may drive a sweep from a thread)
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _detach_from_terminal() -> None:
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            # a terminal (isatty may already fail on a hung-up one: a character device)
            with contextlib.suppress(OSError):
                if stat.S_ISCHR(os.fstat(fd).st_mode):
                    os.dup2(null, fd)
        os.close(null)
