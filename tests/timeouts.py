"""Every timeout the tests wait with comes from here, scaled by one factor.

``SWEEPER_TEST_TIMEOUT_FACTOR`` (default 1; ``make test-stress`` sets 4) multiplies the
deadlines the tests poll with and the patience of the test studies' servers (start-up
deadline, hang watchdog), so a machine whose cores are busy elsewhere makes the suite slower,
not red. Deadlines only: nothing here waits; a test that passes waits for its condition,
however large the factor.
"""

from __future__ import annotations

import os

ENV = "SWEEPER_TEST_TIMEOUT_FACTOR"


def factor() -> float:
    try:
        return max(1.0, float(os.environ.get(ENV) or 1))
    except ValueError:
        return 1.0


def scaled(seconds: float) -> float:
    """``seconds`` on an idle machine, stretched by the factor."""
    return seconds * factor()


def duration(seconds: float) -> str:
    """The same, as a study file's duration (``"12s"``)."""
    return f"{scaled(seconds):g}s"
