"""What a sweep did, in figures: what the loop counts and ``print_summary`` shows."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import sweeper.results.verdict as R
from sweeper.remote.server import ServerHandle


@dataclass
class SweepSummary:
    study: str
    storage: str
    finished: int = 0
    complete: int = 0
    pruned: Counter[str] = field(default_factory=Counter)
    skipped: int = 0
    repeats: int = 0  # accidental repeats resolved without a restart
    reused: int = 0  # measured on the server already running (a replicate): no restart
    failed: int = 0
    retried: int = 0
    reconciled: int = 0
    stopped_because: str = "budget"
    best: R.ConfigResult | None = None
    baseline: R.ConfigResult | None = None
    kept_server: ServerHandle | None = None
    simulated: bool = False
    resumed_from: int = 0
    stop_reason: str | None = None  # why the stop rule ended the sweep early (one line)
    node_seconds: float | None = None  # node time the sweep's trials took
    node_source: str = ""  # what node_seconds rests on (measured, the study's costs)

    def add_counts(self, other: SweepSummary) -> None:
        """Add one host's counts (a pool's summary is the sum of its workers')."""
        self.finished += other.finished
        self.reused += other.reused
        self.complete += other.complete
        self.pruned.update(other.pruned)
        self.skipped += other.skipped
        self.repeats += other.repeats
        self.failed += other.failed
        self.retried += other.retried
