"""Test-only kill points: ``SWEEPER_KILLPOINT=<name>`` makes the sweeper SIGKILL itself
when it reaches that point, so tests and bench/fault_injection.py can kill it at exactly
the moments that matter (not "some time during the benchmark"):

* ``startup``: the study opened and locked, the budget saved, before the first trial;
* ``asked``: a trial asked of the study, before anything (its owner) is written on it;
* ``started``: a trial's server started, before it is recorded in the study;
* ``benchmark``: a trial's first benchmark run done, the next one not started;
* ``confirm-started`` / ``confirm-benchmark``: the same two moments in the confirm phase.

``<name>:<n>`` kills at the n-th time the point is reached (1 by default). Unset, it costs
one dictionary lookup; nothing else reads the variable.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

ENV = "SWEEPER_KILLPOINT"
_seen: Counter[str] = Counter()


def killpoint(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    point, _, nth = wanted.partition(":")
    if point != name:
        return
    _seen[name] += 1
    if _seen[name] == (int(nth) if nth.isdigit() else 1):
        os.kill(os.getpid(), signal.SIGKILL)
