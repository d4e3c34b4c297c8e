"""What a running sweep tells its user: a progress bar with the current phase, and one
line per finished trial.

A small interface so the loop does not know about terminals. On a terminal: a live bar
(finished/total, elapsed, ETA from the mean trial time so far) under the printed lines,
each line cut to the terminal's width. In a log file or a pipe: plain, whole lines only.
"""

from __future__ import annotations

import contextlib
import time
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text


class Reporter(Protocol):
    def phase(self, text: str) -> None: ...
    def line(self, text: str) -> None: ...
    def progress(self, done: int, total: int, note: str = "") -> None: ...


class _MeanTrialEta(ProgressColumn):
    """Remaining trials x the mean time of the trials finished so far (rich's own estimate
    follows the recent rate, which one slow restart throws off)."""

    def __init__(self, started: float) -> None:
        super().__init__()
        self.started = started

    def render(self, task: Task) -> Text:
        done, total = task.completed, task.total or 0
        if not done or done >= total:
            return Text("ETA -", style="progress.remaining")
        left = (time.monotonic() - self.started) / done * (total - done)
        minutes, seconds = divmod(int(left), 60)
        hours, minutes = divmod(minutes, 60)
        text = f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
        return Text(f"ETA {text}", style="progress.remaining")


class ConsoleReporter:
    """Rich output: a live progress bar on a terminal, printed lines for events."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._phase = ""

    @property
    def live(self) -> bool:
        return self.console.is_terminal

    def progress(self, done: int, total: int, note: str = "") -> None:
        """``note``: what the sweep has spent so far (node-hours), after the bar."""
        if not self.live:
            return
        if self._progress is None:
            self._progress = Progress(
                SpinnerColumn(), TextColumn("{task.description}", style="dim"),
                BarColumn(bar_width=20), MofNCompleteColumn(), TimeElapsedColumn(),
                _MeanTrialEta(time.monotonic()), TextColumn("{task.fields[note]}"),
                console=self.console, transient=True,
                redirect_stdout=False, redirect_stderr=False)
            self._task = self._progress.add_task(self._cut(self._phase), total=total, note=note)
            self._progress.start()
        assert self._task is not None
        self._progress.update(self._task, completed=done, total=total, note=note)

    def phase(self, text: str) -> None:
        self._phase = text
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=self._cut(text))

    def line(self, text: str) -> None:
        if self.live:
            self.console.print(text, overflow="ellipsis", no_wrap=True, crop=True)
        else:
            self.console.print(text, soft_wrap=True)

    def _cut(self, text: str) -> str:
        # the bar's own columns take ~45 characters; the phase gets the rest
        room = max(10, self.console.width - 50)
        return text if len(text) <= room else text[: room - 1] + "…"

    def close(self) -> None:
        if self._progress is not None:
            with contextlib.suppress(Exception):
                self._progress.stop()
            self._progress = None
            self._task = None


class NullReporter:
    def phase(self, text: str) -> None:
        pass

    def line(self, text: str) -> None:
        pass

    def progress(self, done: int, total: int, note: str = "") -> None:
        pass
