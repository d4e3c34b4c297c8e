"""The seam between the trial loop and whatever measures a configuration.

The loop (run/workers.py) and the confirm phase (run/confirm.py) measure through this
interface only. The real implementation is run/trial.py's ``TrialRunner`` (the host, the
server's lifecycle, the HTTP benchmark, the server's log lines); bench/ and tests/ have an
emulated one that draws runs from the simulator's ground truth on a simulated clock, so
the bench's figures come from the loop ``optimize`` runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sweeper.launch import LaunchConfig
from sweeper.remote.server import ServerHandle
from sweeper.run.trial import Measurement
from sweeper.study import BenchSpec


class Measurer(Protocol):
    """Serves one configuration at a time and benchmarks it."""

    @property
    def current(self) -> ServerHandle | None:
        """The server it started last and has not stopped (None: none)."""
        ...

    def measure(self, config: LaunchConfig, tag: str, bench: BenchSpec, *, label: str = "",
                on_start: Callable[[ServerHandle], None] | None = None,
                phase: str = "", primary: int | None = None,
                more: Callable[[list[float]], int] | None = None,
                first_round: int = 0) -> Measurement:
        """Serve ``config`` and benchmark it: one Measurement, a ConfigurationFailure (the
        configuration's fault) or an InfrastructureError (not its fault). ``on_start``
        sees the server before anything waits on it; ``more`` says how many runs past
        ``bench.runs`` to make on the same start; ``first_round`` where in the study's one
        prompt order its runs start (measure/prompts.py)."""
        ...

    def stop(self, best_effort: bool = False, label: str = "") -> None:
        """Stop the server it started, if any."""
        ...

    def log_text(self, handle: ServerHandle) -> str | None:
        """The server's log, for the trial's artifacts."""
        ...
