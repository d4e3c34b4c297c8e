"""What a Ctrl-C keeps of the trial it interrupts: the measured runs it completed.

They are written on the interrupted trial (FAIL, ``interrupted``) and on the retry queued for
it, as ``interrupted_runs`` ({"<concurrency>": [per-request tok/s, ...]}), so the resume
(and a reader of the study) has them; and the sweeper says so in one line. Too few to stand
for a measurement of their own (a benchmark's runs are the unit the statistics compare),
they are not told as the trial's value.
"""

from __future__ import annotations

from collections.abc import Mapping

from sweeper.results import attrs as A


def kept_runs(levels: Mapping[int, list[float]]) -> dict[str, list[float]]:
    """JSON-ready, levels without a completed run left out."""
    return {str(level): list(runs) for level, runs in sorted(levels.items()) if runs}


def kept_line(number: int, kept: Mapping[str, list[float]]) -> str:
    runs = [v for level in kept.values() for v in level]
    values = ", ".join(f"{v:.1f}" for v in runs)
    return (f"trial {number} interrupted: kept its {len(runs)} completed measured run(s) "
            f"({values} tok/s) in its attribute {A.INTERRUPTED_RUNS} and in its queued retry")
