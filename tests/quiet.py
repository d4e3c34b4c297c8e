"""Whether the machine is quiet enough to measure the simulator's wall-clock physics.

The tests marked ``timing`` compare tok/s measured by the wall clock with the simulator's
model; when other processes keep the cores busy (another job, a CPU burner, a parallel
test run that is still ending) every sleep overshoots and those figures are the load's, not
the simulator's. Such a test waits a bounded while for the machine to quieten, and when it
does not, is skipped with the reason printed (``make test`` runs them with ``-rs``): it
runs, or says why not. Measured from /proc/stat rather than the load average, which lags a
minute behind (the parallel part just before would count against the quiet machine).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

STAT = Path("/proc/stat")
BUSY_LIMIT = 0.4  # share of all cores busy with other work above which wall clocks lie
WINDOW = 0.5  # seconds per sample


def _times() -> tuple[int, int] | None:
    """(idle, total) jiffies of all cores, or None without /proc (not Linux)."""
    try:
        fields = STAT.read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return idle, sum(values[:8])  # guest time is counted in user already


def busy_share(window: float = WINDOW) -> float | None:
    """The share of the machine's CPU time spent by anything over ``window`` seconds."""
    first = _times()
    time.sleep(window)  # the sample's window itself, not a wait for a condition
    second = _times()
    if first is None or second is None or second[1] <= first[1]:
        return None
    return 1.0 - (second[0] - first[0]) / (second[1] - first[1])


def wait_quiet(patience: float) -> str | None:
    """None once the machine is quiet (within ``patience`` seconds), else why it is not."""
    deadline = time.monotonic() + patience
    while True:
        share = busy_share()
        if share is None or share <= BUSY_LIMIT:
            return None
        if time.monotonic() >= deadline:
            return (f"the machine is busy ({share:.0%} of {os.cpu_count()} cores in use by other "
                    f"processes for {patience:.0f}+ s): the simulator's wall-clock figures "
                    "would be the load's; run `make test` on a quiet machine to check them")
