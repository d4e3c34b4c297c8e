"""Record SGLang's launch flags from SGLang's own argparse, without torch or a GPU.

    pip download --no-deps sglang==0.5.23 -d /tmp/sgl
    python tools/sglang_flags.py /tmp/sgl/sglang-0.5.23-*.whl \
        > tests/fixtures/sglang-0.5.23-flags.json

or, with no argument, by the python of a venv where SGLang is installed (`make
test-sglang`'s): SGLang's own modules, nothing stood in for; tests/sglang checks the two
give the same table.

The wheel (or an unpacked tree holding ``sglang/``) is put first on ``sys.path``; every
third-party module SGLang imports at the top of server_args.py (torch, numpy, ...) that is
not installed is replaced by an inert stand-in, so only SGLang's own code builds the
parser (``ServerArgs.add_cli_args``, as ``prepare_server_args`` does). Needs msgspec and
pyyaml. Output: a JSON list, one object per action: option_strings, dest, action (the
action's class name), nargs, choices, deprecated, default, type (the converter's name).
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

# dunders Python and typing probe for: a stand-in must say it has none
_PROBED = frozenset({
    "__wrapped__", "__signature__", "__origin__", "__args__", "__parameters__",
    "__dataclass_fields__", "__annotations__", "__func__", "__self__", "__set_name__",
    "__get__", "__set__", "__delete__", "__init_subclass__", "__class_getitem__",
    "__instancecheck__", "__subclasscheck__", "__fspath__", "__index__", "__len__",
    "__enter__", "__exit__", "__await__", "__aiter__", "__slots__", "__path__", "__file__",
    "__spec__", "__loader__", "__all__", "__abstractmethods__", "__supertype__",
    "npu", "xpu", "musa", "mlu", "hpu",  # hasattr(torch, ...) picks a device platform
})


class _StubBase:
    """What a class deriving from a stand-in (msgspec.Struct, nn.Module...) derives from."""

    def __init_subclass__(cls, **kwargs: Any) -> None:  # Struct(frozen=True) and the like
        super().__init_subclass__()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class _Stub:
    """An inert stand-in: any attribute, call, subscript or base-class use works."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> Any:
        if name in _PROBED:
            raise AttributeError(name)
        return _Stub(name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _Stub(self._name)

    def __getitem__(self, item: Any) -> Any:
        return self

    def __or__(self, other: Any) -> Any:
        return self

    __ror__ = __or__

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __int__(self) -> int:
        return 0

    def __float__(self) -> float:
        return 0.0

    def __add__(self, other: Any) -> Any:
        return self

    __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __add__

    def __mro_entries__(self, bases: Any) -> tuple[type, ...]:
        return (_StubBase,)


def _stub(name: str) -> Any:
    return _Stub(name)


class _StubModule(types.ModuleType):
    __version__ = "2.9.0"  # version checks at import time (torch, transformers) pass

    def __getattr__(self, name: str) -> Any:
        if name in _PROBED:
            raise AttributeError(name)
        return _stub(name)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: whatever is not installed becomes a stand-in module."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] == "sglang":
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _source(path: Path) -> Path:
    if path.is_dir():
        return path
    out = Path("/tmp") / f"sglang-flags-{path.stem}"
    if not (out / "sglang").is_dir():
        with zipfile.ZipFile(path) as wheel:
            wheel.extractall(out)
    return out


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple | set | frozenset):
        items = [_plain(v) for v in value]
        return sorted(items, key=str) if isinstance(value, set | frozenset) else items
    return repr(value) if not isinstance(value, type) else value.__name__


def _type_name(converter: Any) -> str | None:
    if converter is None:
        return None
    return getattr(converter, "__name__", None) or type(converter).__name__


def flag_table(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    rows = []
    for action in parser._actions:
        if not action.option_strings:
            continue
        name = type(action).__name__
        rows.append({
            "option_strings": list(action.option_strings),
            "dest": action.dest,
            "action": name,
            "nargs": _plain(action.nargs),
            "choices": _plain(action.choices),
            "deprecated": name.startswith("Deprecated")
            or (action.help or "").lstrip("(").lower().startswith("deprecated"),
            "default": _plain(action.default),
            # the converter argparse calls on the value (int, float, str, a function of
            # SGLang's): what sweeper validate checks a study's values against
            "type": _type_name(action.type),
        })
    return rows


def install(wheel_or_tree: str) -> None:
    """Make ``import sglang...`` work here: the wheel's code first on sys.path, stand-ins
    for whatever third-party module is not installed (also used by tests that run SGLang's
    own pure-Python checks, e.g. its adaptive-config loader)."""
    # no GPU here: SGLang's platform probe takes its CPU defaults instead of a stand-in torch
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    sys.path.insert(0, str(_source(Path(wheel_or_tree))))
    sys.meta_path.append(_StubFinder())


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(__doc__, file=sys.stderr)
        return 2
    if argv:
        install(argv[0])
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415 (after the stand-ins)

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    json.dump(flag_table(parser), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
