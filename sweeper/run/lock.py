"""One sweeper per study and host at a time.

Two ``sweeper optimize`` on one study and one host would restart servers on the same port
under each other: bind errors recorded as failures of good configurations, trials of one
counted by the other. The first takes an exclusive ``flock`` on a file named after the
storage, the study and the host; the second says in one line who holds it and exits 2.

``flock`` belongs to the open file: the kernel releases it when the holder exits, however
it exits (kill -9 included), so a lock left by a dead process is simply taken over; the
file's text (pid, start time) only serves the message.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from sweeper.errors import SweepLocked
from sweeper.remote.local import pid_alive
from sweeper.study.base import public_url, storage_key

ENV_DIR = "SWEEPER_LOCK_DIR"
# Locks this process holds: released at exit whatever path led there (Ctrl-C, an abort, a
# storage fault), so no lock file is left behind for the next run to take over.
_HELD: set[StudyLock] = set()


@atexit.register
def _release_all() -> None:
    for lock in list(_HELD):
        lock.release()


def lock_dir() -> Path:
    return Path(os.environ.get(ENV_DIR) or Path.home() / ".sweeper" / "locks")


class StudyLock:
    """The lock of one study (in one storage) on one host. ``acquire`` raises SweepLocked;
    ``previous`` then holds what the file said of a dead holder that was taken over."""

    def __init__(self, storage_url: str, study: str, host: str) -> None:
        self.study, self.host, self.storage_url = study, host, storage_url
        safe_host = re.sub(r"[^A-Za-z0-9._-]", "_", host)[:60]
        self.path = lock_dir() / f"{storage_key(storage_url, study)}@{safe_host}.lock"
        self._fh: IO[str] | None = None
        self.previous: dict[str, object] = {}

    def acquire(self) -> StudyLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fh = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._holder(fh)
                fh.close()
                raise SweepLocked(self._refusal(holder)) from None
            # The holder deletes the file when it releases: a lock taken on a file that was
            # deleted (or replaced) meanwhile locks nothing; take the one at the path now.
            with contextlib.suppress(FileNotFoundError):
                if os.stat(self.path).st_ino == os.fstat(fh.fileno()).st_ino:
                    break
            fh.close()
        old = self._holder(fh, wait=0)
        if old.get("pid") and old.get("machine") == socket.gethostname() and \
                not pid_alive(int(str(old["pid"]))):
            self.previous = old  # a holder killed without releasing it: taken over
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"pid": os.getpid(), "started": time.time(),
                             "machine": socket.gethostname(), "study": self.study,
                             "host": self.host, "storage": public_url(self.storage_url)}))
        fh.flush()
        self._fh = fh
        _HELD.add(self)
        return self

    def release(self) -> None:
        """Delete the file, then unlock: no lock files pile up, and one that a kill -9 left
        behind is reused by the next holder."""
        _HELD.discard(self)
        if self._fh is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            with contextlib.suppress(OSError):
                fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    @property
    def held(self) -> bool:
        return self._fh is not None

    @staticmethod
    def _holder(fh: IO[str], wait: float = 1.0) -> dict[str, object]:
        """What the holder wrote; it writes right after locking, so wait a moment for it."""
        deadline = time.monotonic() + wait
        while True:
            fh.seek(0)
            with contextlib.suppress(ValueError):
                data = json.loads(fh.read() or "null")
                if isinstance(data, dict):
                    return data
            if time.monotonic() >= deadline:
                return {}
            time.sleep(0.05)

    def _refusal(self, holder: dict[str, object]) -> str:
        where = f"study {self.study!r} in {public_url(self.storage_url)} on host {self.host}"
        if not holder:
            return (f"{where} is already being swept by another process (lock {self.path}); "
                    "wait for it to finish or stop it")
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                time.gmtime(float(str(holder.get("started", 0)))))
        machine = holder.get("machine")
        on = f" on {machine}" if machine and machine != socket.gethostname() else ""
        return (f"{where} is already being swept by PID {holder.get('pid')}{on}, started "
                f"{started}; wait for it to finish or stop it (Ctrl-C in its terminal, or "
                f"kill {holder.get('pid')})")


def claim(storage_url: str, study: str, host: str,
          line: Callable[[str], None] = lambda _: None) -> StudyLock:
    """Take the study's lock on ``host`` or raise SweepLocked (exit 2, one line)."""
    lock = StudyLock(storage_url, study, host).acquire()
    if lock.previous:
        line(f"taking over the lock of study {study!r} on {host} from PID "
             f"{lock.previous.get('pid')}, which is no longer running")
    return lock
