"""``--config FILE``: SGLang 0.5.23's merger rules (utils/server_args_config_parser.py).

Only the token ``--config`` followed by a path is merged (``--config=FILE`` parses as the
flag's value and is ignored, as in SGLang); once, with a value. The file must end in
.yaml/.yml and hold a mapping. Keys are any long spelling of a flag, dashes or underscores.
Values: a list -> ``--key v1 v2`` (empty: left out), a nested map -> ``--key '<JSON>'``, a
boolean -> the bare flag for a store_true flag (false: left out) and ``--key true|false`` for
any other flag; anything else -> ``--key value``. Flags of another action (store_false,
BooleanOptional, the deprecated ones) are refused with SGLang's ValueError. The result is the
file's tokens, then the command line without ``--config FILE``: the command line wins.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """What SGLang's ConfigArgumentMerger raises; the launch dies with a traceback."""

    def report(self) -> str:
        return ("Traceback (most recent call last):\n"
                '  File "sglang/srt/utils/server_args_config_parser.py", line 160, in '
                "_convert_config_to_args\n"
                f"ValueError: {self}")


def _keys(action: argparse.Action) -> set[str]:
    return {action.dest} | {
        opt[2:].replace("-", "_") for opt in action.option_strings if opt.startswith("--")
    }


def _one_value(action: argparse.Action) -> bool:
    return isinstance(action, argparse._StoreAction) or action.nargs is None


def _tables(parser: argparse.ArgumentParser) -> tuple[set[str], dict[str, argparse.Action]]:
    """(store_true keys, refused keys -> their action), as SGLang computes them."""
    store_true = {key for a in parser._actions if isinstance(a, argparse._StoreTrueAction)
                  for key in _keys(a)}
    supported = [a for a in parser._actions
                 if isinstance(a, argparse._StoreTrueAction) or _one_value(a)]
    supported_keys = {key for a in supported for key in _keys(a)}
    refused = {
        key: a
        for a in parser._actions
        if a.option_strings and a not in supported
        and not {"--config", "--help", "-h"} & set(a.option_strings)
        for key in _keys(a)
        if key not in supported_keys
    }
    return store_true, refused


def config_path(argv: list[str]) -> str | None:
    found = [i for i, token in enumerate(argv) if token == "--config"]
    if len(found) > 1:
        raise ConfigError("Multiple config files specified! Only one allowed.")
    if not found:
        return None
    if found[0] == len(argv) - 1:
        raise ConfigError("No config file specified after --config flag!")
    return argv[found[0] + 1]


def _read(path: str) -> dict[str, Any]:
    p = Path(path)
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise ConfigError(f"Config file must be YAML format, got: {p.suffix}")
    if not p.exists():
        raise ConfigError(f"Config file not found: {path}")
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"Failed to read config file {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("Config file must contain a dictionary at root level")
    return data


def config_tokens(parser: argparse.ArgumentParser, data: dict[str, Any]) -> list[str]:
    store_true, refused = _tables(parser)
    tokens: list[str] = []
    for key, value in data.items():
        norm = str(key).replace("-", "_")
        if norm in refused:
            raise ConfigError(f"Unsupported config option '{norm}' with action "
                              f"'{refused[norm].__class__.__name__}'")
        flag = f"--{key}"
        if isinstance(value, bool):
            if norm in store_true:
                tokens += [flag] if value else []
            else:
                tokens += [flag, str(value).lower()]
        elif isinstance(value, list):
            tokens += [flag, *(str(v) for v in value)] if value else []
        elif isinstance(value, dict):
            tokens += [flag, json.dumps(value)]
        else:
            tokens += [flag, str(value)]
    return tokens


def merge_config(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """argv with a ``--config FILE`` replaced by the file's flags (placed first)."""
    if "--config" not in argv:
        return argv
    path = config_path(argv)
    assert path is not None
    at = argv.index("--config")
    return config_tokens(parser, _read(path)) + argv[:at] + argv[at + 2:]
