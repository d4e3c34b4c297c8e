"""``sweeper`` and ``python -m sweeper``: the command line.

The entry point is here, not in ``sweeper.cli``, so that a Ctrl-C while the CLI's modules
load (typer, pydantic, the study's models: about a second on a busy machine) is said in one
line, as every later Ctrl-C is, instead of a traceback.
"""

from __future__ import annotations

import shlex
import sys


def starting_line() -> str:
    """A Ctrl-C before the command's body began: it did nothing yet."""
    return ("interrupted while starting, before the command did anything. Run the same "
            "command again: sweeper " + shlex.join(sys.argv[1:]))


def main() -> None:
    try:
        from sweeper.cli import main as cli_main
    except KeyboardInterrupt:
        print(starting_line(), file=sys.stderr)
        sys.exit(130)
    cli_main()


if __name__ == "__main__":
    main()
