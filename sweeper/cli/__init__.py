"""The command layer: parse, call, print. No logic of its own.

Exit codes: 0 success, 1 a sweep that stopped on failures, 2 bad input (one line on
stderr naming the file, key or host; nothing written or started), 130 interrupted.
Commands live by what they touch: sweeping.py (optimize, confirm, stop; the confirm phase
they run is confirm_phase.py's), results.py (status, export, dashboard, report), tools.py
(validate, bench, trust-host).
"""

from __future__ import annotations

import logging
import sys

import typer

from sweeper.__main__ import starting_line
from sweeper.cli import results, sweeping, tools
from sweeper.cli.common import Began, app, err

__all__ = ["app", "main", "results", "sweeping", "tools"]

# Typer 0.29 vendors click and re-exports only BadParameter; its base is click's UsageError,
# the parent of every command-line mistake (unknown option, bad choice, missing value).
UsageError: type[Exception] = typer.BadParameter.__mro__[1]


def _short_helps() -> None:
    """``sweeper --help`` lists each command with its docstring's first sentence, whole:
    click would cut it to fit one line and end it with "..."."""
    for info in app.registered_commands:
        doc = " ".join((info.callback.__doc__ or "").split()) if info.callback else ""
        if info.short_help is None and doc:
            end = doc.find(". ")
            info.short_help = doc if end < 0 else doc[:end + 1]


_short_helps()


def main() -> None:
    # retries of a dropped SSH connection and the like: one readable line each
    logging.basicConfig(level=logging.WARNING, format="sweeper: %(message)s")
    try:
        code = app(standalone_mode=False)
    except UsageError as exc:
        # bad input is one line, like every other (click would print usage and a hint)
        ctx = getattr(exc, "ctx", None)
        name = f" {ctx.info_name}" if ctx is not None and ctx.parent is not None else ""
        message = exc.format_message()  # type: ignore[attr-defined]
        err.print(f"error: {message} (see `sweeper{name} --help`)", markup=False,
                  soft_wrap=True)
        sys.exit(2)
    except typer.Abort:  # a question answered with Ctrl-D or no terminal: "no"
        err.print("aborted", markup=False)
        sys.exit(1)
    except KeyboardInterrupt:
        if not Began.body:  # parsing the options (typer builds pydantic adapters: slow)
            err.print(starting_line(), markup=False, soft_wrap=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
