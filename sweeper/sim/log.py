"""SGLang-style log lines: ``[YYYY-mm-dd HH:MM:SS TP0] message``, flushed at once.

The sweeper tails the log file to read accept lengths and to detect hangs, so every line
is written and flushed immediately, from any thread.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class SimLog:
    """Thread-safe line logger with SGLang's prefix."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr  # SGLang logs through `logging`: stderr
        self._lock = threading.Lock()

    def info(self, message: str) -> None:
        prefix = time.strftime("[%Y-%m-%d %H:%M:%S TP0] ")
        text = "".join(prefix + line + "\n" for line in message.splitlines() or [""])
        self.raw(text)

    def warning(self, message: str) -> None:
        self.info(f"WARNING: {message}")

    def raw(self, text: str) -> None:
        """Unprefixed text, e.g. a traceback, as Python prints it."""
        with self._lock:
            try:
                self._stream.write(text)
                self._stream.flush()
            except (OSError, ValueError):
                pass  # the log went away (closed pipe): keep serving
