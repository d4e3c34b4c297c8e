"""Checks of single values of a study file: flag and environment variable names, flag
values, programs (argv words, never shell syntax), host folders, addresses and URLs, the
storage URL and the artifact store. Each fails with the study's one error line
(``study/base.fail``: file, key, what is wrong, what to do); study/load.py applies them
to every key that holds such a value.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import shlex
import urllib.parse
from pathlib import Path
from typing import Any

from sweeper.study.base import RESERVED_FLAGS, fail, public_url, show

_FLAG_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A launcher word a shell would read as syntax: the launcher is run as argv, never by a
# shell, so `...; touch X` would only hand SGLang the words ';', 'touch', 'X'.
_SHELL_WORD = re.compile(r"[;`]|&&|\|\||\$\(|^\d*[<>|&]")
_STORAGE_SCHEMES = ("sqlite:///", "postgresql://", "postgresql+", "mysql://", "mysql+",
                    "journal://")


def _as_shell_reads(text: str) -> list[str]:
    """``text``'s words as a shell would read their syntax: a character inside quotes is
    data (masked as ``_``), except that a shell still expands `...` and $( in double
    quotes. shlex.split drops the quotes, which are what tell an operator (``a; b``) from
    a character of an argument (``-c "a; b"``), hence this scan of our own."""
    words: list[str] = []
    word: list[str] | None = None
    quote = ""
    chars = iter(text)
    for c in chars:
        if word is None:
            if c.isspace() and not quote:
                continue
            word = []
        if quote == "'":
            quote, c = ("", "") if c == "'" else (quote, "_")
        elif quote == '"':
            if c == "\\":
                next(chars, "")
                c = "_"
            elif c == '"':
                quote, c = "", ""
            elif c not in "`$(":
                c = "_"
        elif c in "'\"":
            quote, c = c, ""
        elif c == "\\":
            next(chars, "")
            c = "_"
        elif c.isspace():
            words.append("".join(word))
            word = None
            continue
        word.append(c)
    if word is not None:
        words.append("".join(word))
    return words


def check_program(path: Path, key: str, text: str) -> None:
    """A launcher or python: argv words, never shell syntax (outside quotes)."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        fail(path, key, f"cannot split it into words ({exc})", "fix the quotes")
    read = _as_shell_reads(text)
    if len(read) != len(words):  # not split alike: judge the words themselves
        read = words
    for word, syntax in zip(words, read, strict=True):
        if _SHELL_WORD.search(syntax):
            fail(path, key, f"{show(word)} is shell syntax, but the server is started as a "
                 "program with arguments, never by a shell",
                 "remove it (put shell commands in a script and launch that)")


# Bind addresses meaning "every interface" (remote/host.py's WILDCARDS, less the empty one)
_WILDCARDS = frozenset({"0.0.0.0", "::", "*"})
_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def is_address(text: str) -> bool:
    """An IP address (v4, v6, or a wildcard) or a DNS host name: what a socket can bind or
    resolve. Anything else (``127.0.0.1;touch x``) would reach a resolver or a remote
    command and fail there with a traceback."""
    if text in _WILDCARDS:
        return True
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(text.strip("[]"))
        return True
    name = text.removesuffix(".")
    return 0 < len(name) <= 253 and all(_HOST_LABEL.match(p) for p in name.split("."))


def http_url(url: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # ValueError when out of range or not a number
    except ValueError:
        return False
    host = parts.hostname
    return parts.scheme in ("http", "https") and host is not None and is_address(host) \
        and (port is None or 1 <= port <= 65535)


def check_path(path: Path, key: str, value: str) -> None:
    """A folder on the host: a path, never a control character (a newline would end the
    remote command that creates it)."""
    if not value.strip():
        fail(path, key, "empty", "give a folder on the host, e.g. ~/.sweeper/NAME")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        fail(path, key, f"{show(value, key)} holds a control character",
             "write the folder's path on one line, without control characters")


def check_storage(path: Path | str, url: str, key: str = "storage") -> str:
    """A storage URL's form: a scheme sweeper opens, and a file or database named. ``key``:
    where it was given (the study file's ``storage``; ``--storage`` with no file key)."""
    if not url.startswith(_STORAGE_SCHEMES):
        fail(path, key, f"unsupported storage URL {show(public_url(url))}",
              "use sqlite:///path.db, postgresql://user@host/db, mysql://... or "
              "journal:///path/file.log")
    if url.startswith(("postgresql+", "mysql+")) and "://" not in url:
        fail(path, key, f"malformed storage URL {show(public_url(url))}",
              "write it like postgresql+psycopg2://user@host/db")
    rest = url.split("://", 1)[1]
    if url.startswith("sqlite:///") and not url[len("sqlite:///"):]:
        fail(path, key, "the sqlite URL names no file", "write sqlite:///studies/NAME.db")
    if not rest.strip("/"):
        fail(path, key, f"the storage URL {show(public_url(url))} names no database "
             "or file",
              "complete it")
    return url


def check_flag_name(path: Path, key: str, name: str) -> None:
    if name.startswith("-"):
        fail(path, key, f"flag {show(name)} starts with a dash",
              f"write SGLang's flag name without dashes: {name.lstrip('-')}")
    if "_" in name:
        fail(path, key, f"flag {show(name)} uses underscores",
              f"use SGLang's dashed name {name.replace('_', '-')}")
    if not _FLAG_RE.match(name):
        fail(path, key, f"{show(name)} is not an SGLang flag name",
              "use SGLang's lowercase dashed flag names, e.g. tp-size")
    if name in RESERVED_FLAGS:
        fail(path, key, f"the {name} flag is set by the sweeper",
              f"set {RESERVED_FLAGS[name]} instead")


def check_env_name(path: Path, key: str, name: str) -> None:
    if not _ENV_RE.match(name):
        fail(path, key, f"{show(name)} is not a valid environment variable name",
              "use letters, digits and underscores, not starting with a digit")


def check_arg_value(path: Path, key: str, value: Any) -> None:
    if value is None:
        fail(path, key, "null is not a flag value", "remove the key to leave the flag out")
    if isinstance(value, dict):
        fail(path, key, "nested maps are not flag values (SGLang's --config has none)",
              "give a scalar or a list")
    if isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, dict | list) or v is None:
                fail(path, f"{key}[{i}]", f"expected a scalar, got {show(v, key)}",
                      "a list flag holds strings or numbers")
        return
    if not isinstance(value, str | int | float | bool):
        fail(path, key, f"unsupported value {show(value, key)}",
             "give a string, number or boolean")


def check_artifacts(path: Path, value: str) -> str:
    """``artifacts:``: an s3:// URL (boto3 installed), or a folder, relative to the study
    file (so every machine and working folder reading the file finds the same one)."""
    if not value.strip():
        fail(path, "artifacts", "empty", "write a folder every machine reaches, or remove it")
    if value.startswith("s3://"):
        if not value[len("s3://"):].split("/", 1)[0]:
            fail(path, "artifacts", f"{show(value)} names no bucket", "write s3://BUCKET/PREFIX")
        try:
            import boto3  # noqa: F401 - Optuna's Boto3ArtifactStore needs it
        except ImportError:
            fail(path, "artifacts", "an s3:// artifact store needs boto3",
                 "pip install boto3, or write a shared folder")
        return value
    if "://" in value:
        fail(path, "artifacts", f"{show(value)} is neither a folder nor an s3:// URL",
             "write a folder every machine sharing the storage reaches")
    folder = Path(value).expanduser()
    return str(folder if folder.is_absolute() else (path.parent / folder).resolve())
