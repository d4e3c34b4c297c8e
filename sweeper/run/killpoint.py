"""Test-only kill points: ``SWEEPER_KILLPOINT=<name>`` makes the sweeper SIGKILL itself
when it reaches that point, so tests and bench/fault_injection.py can kill it at exactly
the moments that matter (not "some time during the benchmark"):

* ``startup``: the study opened and locked, the budget saved, before the first trial;
* ``asked``: a trial asked of the study, before anything (its owner) is written on it;
* ``started``: a trial's server started, before it is recorded in the study;
* ``benchmark``: a trial's first benchmark run done, the next one not started;
* ``confirm-started`` / ``confirm-benchmark``: the same two moments in the confirm phase.

* ``claimed``: a trial asked and its owner written, the pool's lock released, before the
  worker marks it busy (the window a Ctrl-C must not leave a trial RUNNING in).

``<name>:<n>`` kills at the n-th time the point is reached (1 by default).
``<name>:<n>:int`` sends a Ctrl-C (SIGINT) there instead, then holds the thread that
reached the point for PAUSE seconds, as a slow storage would: what the rest of the
sweeper does meanwhile is what is tested. Unset, it costs one dictionary lookup; nothing
else reads the variable.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

ENV = "SWEEPER_KILLPOINT"
_seen: Counter[str] = Counter()
PAUSE = 3.0


def killpoint(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    point, _, rest = wanted.partition(":")
    if point != name:
        return
    nth, _, how = rest.partition(":")
    _seen[name] += 1
    if _seen[name] != (int(nth) if nth.isdigit() else 1):
        return
    if how == "int":
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(PAUSE)  # test-only: the slow storage the rest of the sweeper must wait for
        return
    os.kill(os.getpid(), signal.SIGKILL)
