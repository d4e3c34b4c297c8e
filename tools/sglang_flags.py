"""Record SGLang's launch flags from SGLang's own argparse, in the venv that has SGLang.

    make test-sglang   # once: installs SGLang 0.5.23 into its cached venv
    SGLANG_USE_CPU_ENGINE=1 /var/cache/sweeper/sglang-0.5.23/bin/python tools/sglang_flags.py \
        > tests/fixtures/sglang-0.5.23-flags.json

(the venv is ``$XDG_CACHE_HOME/sweeper/sglang-0.5.23`` when XDG_CACHE_HOME is set, or
``~/.cache/sweeper/...`` for a user who is not root: see the Makefile's SGLANG_VENV).

The parser is built exactly as ``sglang.srt.server_args.prepare_server_args`` builds it
(``argparse.ArgumentParser(prog="sglang serve")`` + ``ServerArgs.add_cli_args``); nothing
is stubbed. ``SGLANG_USE_CPU_ENGINE=1`` makes SGLang's platform probe take its CPU
defaults on a machine without a GPU; a default that depends on the platform is recorded
as that probe gave it. Output: a JSON list, one object per option, in the parser's
order: option_strings, dest, action (the action's class name), nargs, choices,
deprecated (SGLang's ``Deprecated*`` actions, and options whose help starts with
"(Deprecated"/"Deprecated"), default.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _plain(value: Any) -> Any:
    """A JSON value for a default or choices (sets sorted, anything else repr'd)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple | set | frozenset):
        items = [_plain(v) for v in value]
        return sorted(items, key=str) if isinstance(value, set | frozenset) else items
    return value.__name__ if isinstance(value, type) else repr(value)


def is_deprecated(action: argparse.Action) -> bool:
    name = type(action).__name__
    return name.startswith("Deprecated") or \
        (action.help or "").lstrip("(").lower().startswith("deprecated")


def flag_table(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    return [{
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "action": type(action).__name__,
        "nargs": _plain(action.nargs),
        "choices": _plain(action.choices),
        "deprecated": is_deprecated(action),
        "default": _plain(action.default),
    } for action in parser._actions if action.option_strings]


def server_parser() -> argparse.ArgumentParser:
    """SGLang's own launch parser (needs the installed sglang)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def main(argv: list[str]) -> int:
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    json.dump(flag_table(server_parser()), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
