"""Reading a study file within limits, before anything is expanded, validated or printed.

A study file is a few kilobytes (the shipped ones are ~3 KB). Anything far larger is a
mistake or an attack, and PyYAML alone would take it down: an alias bomb is a few lines
that ``safe_load`` turns into shared objects cheaply, but validating or printing them walks
the expanded tree (2 GB of stderr, 21 GB of memory); a merge-key bomb (``<<: [*a, *a]``)
expands while it is *constructed*; a deep nesting overflows the composer's recursion.
So the file is read as a YAML *node graph* first and checked against these limits, each
violation one StudyError naming the key (its value shortened):

- ``MAX_FILE_BYTES`` (256 KiB): checked on the file's size, before it is read;
- ``MAX_DEPTH`` (40 levels of nesting; a study needs 5);
- ``MAX_NODES`` (20,000 values once every alias and merge is expanded; a study has a few
  hundred): what pydantic, the checks and any error message may walk, so it bounds their
  time and memory. Counted on the graph with memoisation, so a bomb is refused without
  ever being expanded; an alias that refers to itself (``&a [*a]``) is refused too;
- ``MAX_STRING`` (16 KiB per string, keys included; a path is at most 4 KiB) and no NUL
  character (no argv word or environment value can hold one);
- ``MAX_INT_DIGITS`` (30 digits): Python refuses to read integers of more than 4300 digits
  with a ValueError, and no setting needs more than 20;

A key written twice in one mapping is refused, naming both lines (PyYAML would keep the
last without a word). Then constructed into plain Python data. A value PyYAML cannot
construct (a timestamp such as 2024-13-45) is one line naming its key too. The length of
the server's command line, which depends on the whole study, is bounded by load.py
(``MAX_COMMAND``, 64 KiB).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from sweeper.study.base import fail, shorten, show

MAX_FILE_BYTES = 256 * 1024
MAX_DEPTH = 40
MAX_NODES = 20_000
MAX_STRING = 16 * 1024
MAX_INT_DIGITS = 30
# The server's longest command line (launcher, flags, environment), checked by load.py:
# Linux passes at most 128 KiB in one argument (MAX_ARG_STRLEN) and 2 MiB in all, and
# over SSH the whole command is one argument of `bash -c`, quoted; half that leaves room.
MAX_COMMAND = 64 * 1024

_INT_TAG = "tag:yaml.org,2002:int"
# Built as the graph is walked: all but strings and the merge key's own tags (``<<``).
_LATE_TAGS = ("tag:yaml.org,2002:str", "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value")


def _kib(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KiB"


def read_study_text(path: Path) -> str:
    """The file's text, refused before reading when it is larger than MAX_FILE_BYTES."""
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_FILE_BYTES:
                fail(path, "", f"the file is {_kib(size)}, more than the {_kib(MAX_FILE_BYTES)} "
                     "a study file may be", "is it the right file? a study is a few KB")
            raw = f.read(MAX_FILE_BYTES + 1)  # a file that grows while read stays bounded
        if len(raw) > MAX_FILE_BYTES:
            fail(path, "", f"the file is more than {_kib(MAX_FILE_BYTES)}",
                 "is it the right file? a study is a few KB")
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(path, "", f"cannot read it ({exc.__class__.__name__}: {exc})",
             "check the file's permissions and encoding (UTF-8)")


class _Refused(Exception):
    """A limit found while composing: the key path and what is wrong."""

    def __init__(self, key: str, what: str, todo: str) -> None:
        super().__init__(what)
        self.key, self.what, self.todo = key, what, todo


def _part(node: Node | int | None) -> str:
    if isinstance(node, int):
        return f"[{node}]"
    if isinstance(node, ScalarNode):
        text = str(node.value)
        return text if len(text) <= 40 else text[:40] + "…"
    return "?"  # a key that is itself a list or a mapping


_KEY = "\0key"  # in a path: a mapping's key is being read (the path names its mapping)


def _join(parts: list[str]) -> str:
    out = ""
    for p in parts:
        if p == _KEY:
            continue
        out += p if p.startswith("[") else (f".{p}" if out else p)
    return out


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts what it composes and knows the key path it is at."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.path: list[str] = []
        self.composed = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if parent is not None:
            key = isinstance(parent, MappingNode) and index is None
            self.path.append(_KEY if key else _part(index))
        try:
            depth = len(self.path)
            if depth > MAX_DEPTH:
                raise _Refused(_join(self.path[:MAX_DEPTH]), f"nested more than {MAX_DEPTH} "
                               "levels deep", "a study is a few levels deep: flatten it")
            self.composed += 1
            if self.composed > MAX_NODES:
                raise _Refused(_join(self.path), f"the file holds more than {MAX_NODES} "
                               "values", "a study is a few hundred values: is it the right file?")
            node = super().compose_node(parent, index)
            if isinstance(node, ScalarNode):
                self._check_scalar(node)
            return node
        finally:
            if parent is not None:
                self.path.pop()

    def _check_scalar(self, node: ScalarNode) -> None:
        text, key = node.value, _join(self.path)
        what = "a key" if self.path and self.path[-1] == _KEY else "a value"
        if len(text) > MAX_STRING:
            shown = show(text, "" if what == "a key" else key)  # names are not secrets
            raise _Refused(key, f"{what} of {len(text)} characters ({shown}), more "
                           f"than the {MAX_STRING} one may have", "shorten it")
        if "\0" in text:
            raise _Refused(key, f"{show(text, key)} holds a NUL character, which no "
                           "command-line argument or environment value can hold", "remove it")
        if node.tag == _INT_TAG and sum(c.isdigit() for c in text) > MAX_INT_DIGITS:
            raise _Refused(key, f"a number of {len(text)} digits ({show(text, key)})",
                           f"write a number of at most {MAX_INT_DIGITS} digits")


def _expansion(root: Node, loader: yaml.SafeLoader) -> tuple[dict[int, int], dict[int, int]]:
    """Expanded size of every node (aliases and merges counted as often as they are
    used, each node walked once) and how many times each node is referred to. Each
    scalar that is not a plain string is built here, so one PyYAML cannot build (a
    timestamp 2024-13-45) is named by its key."""
    sizes: dict[int, int] = {}
    refs: dict[int, int] = {}
    active: set[int] = set()

    def walk(node: Node, path: list[str]) -> int:
        key = id(node)
        refs[key] = refs.get(key, 0) + 1
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _Refused(_join(path), "an alias refers to the value that contains it "
                           "(a recursive alias)", "write the value out")
        active.add(key)
        n = 1
        _build_scalar(loader, node, path)
        if isinstance(node, SequenceNode):
            for i, child in enumerate(node.value):
                n += walk(child, [*path, f"[{i}]"])
        elif isinstance(node, MappingNode):
            _no_duplicate_keys(node, path)
            for k, v in node.value:
                n += walk(k, [*path, _KEY]) + walk(v, [*path, _part(k)])
        active.discard(key)
        sizes[key] = n
        return n

    walk(root, [])
    return sizes, refs


def _no_duplicate_keys(node: MappingNode, path: list[str]) -> None:
    """PyYAML keeps the last of two equal keys without a word: two ``name:`` lines would
    sweep into the second study. Refused, naming the key and both lines. (A merge key
    ``<<`` is YAML's own way of overriding and is left to it.)"""
    seen: dict[str, int] = {}
    for k, _ in node.value:
        if not isinstance(k, ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
            continue
        line = k.start_mark.line + 1
        if k.value in seen:
            key = _join([*path, _part(k)])
            raise _Refused(key, f"the key is written twice (lines {seen[k.value]} and {line}); "
                           "YAML would silently keep the second", "keep one of them")
        seen[k.value] = line


def _build_scalar(loader: yaml.SafeLoader, node: Node, path: list[str]) -> None:
    """Build a scalar that is not a plain string now, so one PyYAML cannot build (a
    timestamp 2024-13-45, an unknown tag) is named by its key; refuse unknown tags on lists
    and mappings the same way."""
    key = _join(path)
    if not isinstance(node, ScalarNode):
        if node.tag not in type(loader).yaml_constructors:
            raise _Refused(key, f"the tag {shorten(node.tag, 80)} is not a YAML type a study "
                           "can use", "remove the tag (a study holds plain lists, mappings "
                           "and scalars)")
        return
    if node.tag in _LATE_TAGS:
        return  # strings were checked as they were composed; the merge key builds nothing
    try:
        loader.construct_object(node)
    except Exception as exc:  # noqa: BLE001 - PyYAML's constructors fail in many ways
        # (ValueError, AttributeError on `!!timestamp ''`, ...): all the value's fault
        reason = getattr(exc, "problem", None) or str(exc)
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise _Refused(key, f"{show(node.value, key)} cannot be read as {shorten(tag, 60)} "
                       f"({shorten(reason)})", "quote it to keep it a string, or fix it"
                       ) from None


def _bomb_key(root: Node, sizes: dict[int, int], refs: dict[int, int]) -> str:
    """The deepest key whose own value is too large: descend into the largest child while
    it is too large and written there (not shared through an alias)."""
    path: list[str] = []
    node = root
    while True:
        if isinstance(node, SequenceNode):
            children = [(f"[{i}]", c) for i, c in enumerate(node.value)]
        elif isinstance(node, MappingNode):
            children = [(_part(k), v) for k, v in node.value]
        else:
            return _join(path)
        if not children:
            return _join(path)
        where, child = max(children, key=lambda item: sizes[id(item[1])])
        if sizes[id(child)] <= MAX_NODES or refs[id(child)] > 1:
            return _join(path)
        path.append(where)
        node = child


def _refuse(path: Path, exc: _Refused) -> NoReturn:
    fail(path, exc.key, exc.what, exc.todo)


def parse_yaml(text: str, path: Path) -> Any:
    """YAML text -> Python data, within the limits above; StudyError otherwise."""
    loader = _BoundedLoader(text)
    try:
        try:
            root = loader.get_single_node()
        except _Refused as exc:
            _refuse(path, exc)
        if root is None:
            return None
        try:
            sizes, refs = _expansion(root, loader)
        except _Refused as exc:
            _refuse(path, exc)
        if sizes[id(root)] > MAX_NODES:
            fail(path, _bomb_key(root, sizes, refs),
                 f"YAML aliases expand to {sizes[id(root)]:,} values, more than the "
                 f"{MAX_NODES:,} a study may hold (an alias bomb?)",
                 "write the values out, or use fewer aliases")
        try:
            return loader.construct_document(root)
        except yaml.YAMLError:
            raise  # load.py names its line and column
        except Exception as exc:  # noqa: BLE001 - as in _build_scalar: the document's fault
            fail(path, "", f"the YAML cannot be read into values ({exc.__class__.__name__}: "
                 f"{shorten(str(exc))})", "fix the value (quote strings)")
    finally:
        loader.dispose()
