"""The command layer: parse, call, print. No logic of its own.

Exit codes: 0 success, 1 a sweep that stopped on failures, 2 bad input (one line on
stderr naming the file, key or host; nothing written or started), 130 interrupted.
Commands live by what they touch: sweeping.py (optimize, confirm, stop), results.py
(status, export, dashboard, report), tools.py (validate, bench, trust-host).
"""

from __future__ import annotations

import logging
import sys

from sweeper.cli import results, sweeping, tools
from sweeper.cli.common import app

__all__ = ["app", "main", "results", "sweeping", "tools"]


def main() -> None:
    # retries of a dropped SSH connection and the like: one readable line each
    logging.basicConfig(level=logging.WARNING, format="sweeper: %(message)s")
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
