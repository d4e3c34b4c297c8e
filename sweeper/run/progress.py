"""What a running sweep tells its user: phase, trial n of N, last and best tok/s.

A small interface so the loop does not know about terminals; the rich implementation
prints one line per finished trial and keeps a status line for the current phase.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

from rich.console import Console


class Reporter(Protocol):
    def phase(self, text: str) -> None: ...
    def line(self, text: str) -> None: ...


class ConsoleReporter:
    """Rich output: a transient status line for phases, a printed line per event."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self._status = None

    def phase(self, text: str) -> None:
        if not self.console.is_terminal:
            return  # phases are noise in a log file; finished trials are printed below
        if self._status is None:
            self._status = self.console.status(text)
            self._status.start()
        else:
            self._status.update(text)

    def line(self, text: str) -> None:
        self.console.print(text)

    def close(self) -> None:
        if self._status is not None:
            with contextlib.suppress(Exception):
                self._status.stop()
            self._status = None


class NullReporter:
    def phase(self, text: str) -> None:
        pass

    def line(self, text: str) -> None:
        pass
