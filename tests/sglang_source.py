"""SGLang 0.5.23's own code for tests that check exports against it, without torch.

The wheel is looked for in ``$SWEEPER_SGLANG_WHEEL``, then in ``<cache>/wheels`` (the cache
``make test-sglang`` uses: ``$XDG_CACHE_HOME/sweeper``, ``/var/cache/sweeper`` for root,
else ``~/.cache/sweeper``), and fetched there with ``pip download --no-deps`` when absent
(a package download, like any install). Only pure-Python modules are loaded from it:
``utils/server_args_config_parser.py`` imports argparse, json, logging, pathlib and yaml.
SGLang's parser itself is rebuilt from tests/fixtures/sglang-0.5.23-flags.json (recorded
from its argparse by tools/sglang_flags.py): the same option strings, actions, nargs and
choices.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

VERSION = "0.5.23"
FIXTURE = Path(__file__).parent / "fixtures" / f"sglang-{VERSION}-flags.json"


def cache_dir() -> Path:
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "sweeper"
    if os.getuid() == 0:
        return Path("/var/cache/sweeper")
    return Path.home() / ".cache" / "sweeper"


def wheel() -> Path:
    given = os.environ.get("SWEEPER_SGLANG_WHEEL")
    if given:
        return Path(given)
    where = cache_dir() / "wheels"
    found = sorted(where.glob(f"sglang-{VERSION}-*.whl"))
    if found:
        return found[0]
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                           f"sglang=={VERSION}", "-d", str(where)],
                          capture_output=True, text=True, timeout=900)
    found = sorted(where.glob(f"sglang-{VERSION}-*.whl"))
    if proc.returncode != 0 or not found:
        pytest.skip(f"sglang {VERSION} wheel not available: {proc.stderr[-300:]}")
    return found[0]


def load_module(member: str, name: str) -> ModuleType:
    """One pure-Python module of the wheel, imported from its own text."""
    with zipfile.ZipFile(wheel()) as zf:
        source = zf.read(member)
    path = cache_dir() / "modules" / VERSION / Path(member).name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def config_merger() -> Any:
    """SGLang 0.5.23's ConfigArgumentMerger class, from the wheel."""
    module = load_module("sglang/srt/utils/server_args_config_parser.py",
                         "sglang_0_5_23_config_parser")
    return module.ConfigArgumentMerger


def _action_class(name: str, nargs: Any) -> type[argparse.Action]:
    """A stand-in for one of SGLang's own action classes: same name (the merger's error
    names it), same arity; it stores what it gets."""
    def call(self: argparse.Action, parser: Any, namespace: Any, values: Any,
             option_string: Any = None) -> None:
        setattr(namespace, self.dest, True if nargs == 0 else values)

    def init(self: argparse.Action, option_strings: Any, dest: str, **kw: Any) -> None:
        kw.pop("nargs", None)
        argparse.Action.__init__(self, option_strings, dest, nargs=nargs, **kw)

    return type(name, (argparse.Action,), {"__call__": call, "__init__": init})


@functools.cache
def _table() -> list[dict[str, Any]]:
    return list(json.loads(FIXTURE.read_text()))


def sglang_parser() -> argparse.ArgumentParser:
    """SGLang 0.5.23's `sglang serve` parser, rebuilt from the recorded flag table."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    builtin = {"_StoreAction": "store", "_StoreTrueAction": "store_true",
               "_StoreFalseAction": "store_false", "_AppendAction": "append",
               "_CountAction": "count", "_StoreConstAction": "store_const"}
    for row in _table():
        opts, action = row["option_strings"], row["action"]
        if "--help" in opts:
            continue
        kw: dict[str, Any] = {"dest": row["dest"]}
        if action == "BooleanOptionalAction":
            positive = [o for o in opts if not o.startswith("--no-")]
            parser.add_argument(*positive, action=argparse.BooleanOptionalAction, **kw)
            continue
        if action in builtin:
            kw["action"] = builtin[action]
            if action in ("_StoreAction", "_AppendAction"):
                if row["nargs"] is not None:
                    kw["nargs"] = row["nargs"]
                if row["choices"] is not None:
                    kw["choices"] = row["choices"]
                    if row["choices"] and not isinstance(row["choices"][0], str):
                        kw["type"] = type(row["choices"][0])
            if action == "_StoreConstAction":
                kw["const"] = True
        else:
            kw["action"] = _action_class(action, row["nargs"])
            if row["choices"] is not None:
                kw["choices"] = row["choices"]
        parser.add_argument(*opts, **kw)
    return parser


def accepts(path: Path, extra: list[str] | None = None) -> argparse.Namespace:
    """Merge ``--config path`` with SGLang's merger and parse with SGLang's flags; raises
    ValueError (the merger) or SystemExit (argparse) as SGLang would fail."""
    parser = sglang_parser()
    argv = ["--config", str(path), *(extra or [])]
    merged = config_merger()(parser).merge_config_with_args(argv)
    return parser.parse_args(merged)


def adaptive_candidate_steps(config_path: Path) -> list[int]:
    """SGLang 0.5.23's own adaptive-config loader (speculative/adaptive_spec_params.py,
    resolve_candidate_steps_from_config) on ``config_path``, in a child process where the
    wheel's code imports with stand-ins for torch and the like (tools/sglang_flags.py)."""
    tools = Path(__file__).resolve().parent.parent / "tools"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import sglang_flags as t; "
            "t.install(sys.argv[2]); from sglang.srt.speculative.adaptive_spec_params "
            "import resolve_candidate_steps_from_config as r; "
            "print(r(cfg_path=sys.argv[3]))")
    proc = subprocess.run([sys.executable, "-c", code, str(tools), str(wheel()),
                           str(config_path)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise ValueError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip()
                         else f"exit {proc.returncode}")
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))
