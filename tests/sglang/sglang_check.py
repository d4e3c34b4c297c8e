"""Run files through SGLang's own loaders, in the SGLang venv; print one JSON line each.

    <sglang venv>/bin/python tests/sglang/sglang_check.py config A.yaml [B.yaml ...]
    <sglang venv>/bin/python tests/sglang/sglang_check.py adaptive A.json [B.json ...]

``config``: what ``sglang serve --config FILE`` does before it starts anything: the parser
of ``prepare_server_args`` (ServerArgs.add_cli_args), SGLang's ConfigArgumentMerger
(srt/utils/server_args_config_parser.py) and argparse. Prints ok, the error SGLang gave
(argparse's message or the merger's exception), and each YAML key's parsed value.
``adaptive``: SGLang's adaptive-config loader (srt/speculative/adaptive_spec_params.py):
ok, the error, and the candidate steps it resolves.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import Any


class _ArgparseError(Exception):
    pass


_PARSERS: list[argparse.ArgumentParser] = []


def _parser() -> argparse.ArgumentParser:
    """SGLang's parser, built once per process: building it is ~80% of a file's check
    (5,617 exports of the Kimi study), and neither the merger nor parse_args changes it."""
    if not _PARSERS:
        _PARSERS.append(_new_parser())
    return _PARSERS[0]


def _new_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)

    def error(message: str) -> None:  # argparse would print and exit(2)
        raise _ArgparseError(message)

    parser.error = error  # type: ignore[method-assign]
    return parser


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return repr(value)


def check_config(path: str) -> dict[str, Any]:
    import yaml
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

    parser = _parser()
    out: dict[str, Any] = {"file": path, "ok": False, "error": None, "parsed": {}}
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            argv = ConfigArgumentMerger(parser).merge_config_with_args(["--config", path])
            out["argv"] = argv
            ns = parser.parse_args(argv)
    except _ArgparseError as exc:
        out["error"] = f"argparse: {exc}"
        return out
    except Exception as exc:  # the merger's ValueError, a YAML error: SGLang's own words
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    with open(path) as fh:
        keys = yaml.safe_load(fh) or {}
    for key in keys:
        dest = key.replace("-", "_")
        out["parsed"][key] = _plain(getattr(ns, dest, "<missing>"))
    out["ok"] = True
    return out


def check_adaptive(path: str) -> dict[str, Any]:
    from sglang.srt.speculative.adaptive_spec_params import (
        _load_adaptive_config,
        resolve_candidate_steps_from_config,
    )

    out: dict[str, Any] = {"file": path, "ok": False, "error": None}
    try:
        _cfg, slots = _load_adaptive_config(path)
        out["slots"] = {str(k): v["candidate_steps"] for k, v in sorted(slots.items())}
        out["candidate_steps"] = resolve_candidate_steps_from_config(path)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["ok"] = True
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("config", "adaptive"):
        print(__doc__, file=sys.stderr)
        return 2
    check = check_config if argv[0] == "config" else check_adaptive
    for path in argv[1:]:
        print(json.dumps(check(path)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
