"""The names, values and error shape every study check shares.

Every problem with a study file is a StudyError with one line:
``<file>: <key path>: <what is wrong>; <what to do>`` (``fail``). A value quoted in it goes
through ``show``: shortened, escaped to one line, and hidden when its key names a secret
(an env name such as HF_TOKEN, a flag such as api-key: ``sweeper.launch`` decides which).
"""

from __future__ import annotations

import difflib
import hashlib
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

from pydantic import BeforeValidator

from sweeper.errors import StudyError
from sweeper.launch import SPECULATIVE_PREFIX, Scalar, is_secret, is_secret_flag, render_value

__all__ = ["ALGORITHM", "DRAFT", "Duration", "ENV_PREFIX", "PLACEHOLDER_PATTERN",
           "RESERVED_FLAGS", "SPECULATIVE_PREFIX", "STEPS", "Scalar", "TOPK", "TRIPLE",
           "UNSET", "coerce_float", "fail", "suggest", "parse_duration", "render_value",
           "secret_key", "shorten", "show"]

STEPS = "speculative-num-steps"
TOPK = "speculative-eagle-topk"
DRAFT = "speculative-num-draft-tokens"
ALGORITHM = "speculative-algorithm"
TRIPLE = (STEPS, TOPK, DRAFT)

ENV_PREFIX = "env."
UNSET = "unset"  # an env choice that leaves the variable out of the server's environment

# Flags the sweeper sets itself from server.port / server.host.
RESERVED_FLAGS = {"port": "server.port", "host": "server.host"}

PLACEHOLDER_PATTERN = "CHANGE-ME*"

_NUMBER_RE = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")
_DURATION_RE = re.compile(
    r"^(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?$"
)


MESSAGE_CHARS = 600  # an error line, whatever the file holds
_SHOWN_CHARS = 40  # of one string quoted in a message
# Sections whose whole value is never quoted when it has the wrong shape: a list or a
# string given for server.env may hold "HF_TOKEN=hf_..." under no secret name.
_WHOLE = ("server", "server.env", "server.args")


def shorten(text: str, limit: int = 120) -> str:
    """``text`` on one line (control characters escaped) and at most ``limit`` characters."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit + 1])
    return out if len(text) <= limit and len(out) <= limit else out[:limit] + "…"


_URL_PASSWORD = re.compile(r"(://[^/@:]*:)[^/@]*@")


def public_url(url: str) -> str:
    """A storage URL fit to show: its password, if any, replaced by ``***``."""
    return _URL_PASSWORD.sub(r"\1***@", url)


def fail(path: Path | str, key: str, what: str, todo: str) -> NoReturn:
    """Raise the one-line StudyError: file, key, what is wrong, what to do. The line is
    kept short and printable whatever the file holds (a key may be 16 KiB of escapes)."""
    where, key = shorten(str(path), 200), shorten(key, 120)
    text = f"{where}: {key}: {what}; {todo}" if key else f"{where}: {what}; {todo}"
    raise StudyError(shorten(text, MESSAGE_CHARS))


def secret_key(key: str) -> bool:
    """Whether the value at ``key`` (a key path: server.env.HF_TOKEN, space.api-key.choices[0],
    start_from[0].env.HF_TOKEN) is a secret: its env name or flag name says so."""
    parts = re.sub(r"\[[^\]]*\]", "", key).split(".")
    for prev, part in zip(["", *parts[:-1]], parts, strict=True):
        if is_secret(part) if prev == "env" else is_secret_flag(part):
            return True
    return False


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return f"a mapping of {len(value)} key(s)"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} item(s)"
    return {str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), f"a {type(value).__name__}")


def _brief(value: Any, depth: int) -> str:
    """A bounded repr: looks at a few items and a few levels only, whatever the size."""
    if isinstance(value, str):
        return repr(value) if len(value) <= _SHOWN_CHARS else \
            f"{repr(value[:_SHOWN_CHARS])[:-1]}…' ({len(value)} characters)"
    if isinstance(value, list | tuple):
        if depth >= 2:
            return "[…]"
        items = [_brief(v, depth + 1) for v in value[:3]]
        more = f", … ({len(value)} items)" if len(value) > 3 else ""
        return f"[{', '.join(items)}{more}]"
    if isinstance(value, dict):
        if depth >= 2:
            return "{…}"
        items = [f"{_brief(k, 2)}: "
                 + ("<hidden>" if isinstance(k, str) and (is_secret(k) or is_secret_flag(k))
                    else _brief(v, depth + 1)) for k, v in list(value.items())[:3]]
        more = f", … ({len(value)} keys)" if len(value) > 3 else ""
        return "{" + ", ".join(items) + more + "}"
    return repr(value)[:_SHOWN_CHARS]


def show(value: Any, key: str = "") -> str:
    """``value`` for an error message about ``key``: shortened, one line, and hidden when the
    key names a secret (a wrongly typed HF_TOKEN is still a secret)."""
    if secret_key(key):
        return f"<{_kind(value)}, hidden: a secret>"
    if key in _WHOLE and not isinstance(value, dict):
        return _kind(value)
    return shorten(_brief(value, 0), 160)


def parse_duration(value: Any) -> float:
    """Seconds from ``90``, ``2.5``, ``"90"``, ``"90s"``, ``"20m"``, ``"1h"``, ``"1m30s"``."""
    if isinstance(value, bool):
        raise ValueError("expected a duration, got a boolean")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        if _NUMBER_RE.match(text):
            seconds = float(text)
        else:
            m = _DURATION_RE.match(text)
            if not text or not m or not any(m.groupdict().values()):
                raise ValueError(f"{show(value)} is not a duration (write 90, \"90s\", \"20m\", "
                                 "\"1h\" or \"1m30s\")")
            seconds = (float(m["h"] or 0) * 3600 + float(m["m"] or 0) * 60
                       + float(m["s"] or 0))
    else:
        raise ValueError(f"expected a duration like \"90s\" or \"20m\", got {show(value)}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a duration must be positive, got {show(value)}")
    return seconds


def coerce_float(value: Any) -> Any:
    """Numbers, and numeric strings such as PyYAML's '1e-3', become floats."""
    if isinstance(value, str) and _NUMBER_RE.match(value.strip()):
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


Duration = Annotated[float, BeforeValidator(parse_duration)]


def suggest(word: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"valid keys: {', '.join(options)}" if options else "remove it"


def canonical_url(url: str) -> str:
    """The storage URL that names one storage wherever the command runs: a SQLite or
    journal file by its absolute path (two checkouts both saying ``sqlite:///studies/x.db``
    are two storages), without its password (the URL ends up in file names' hashes)."""
    for prefix in ("sqlite:///", "journal://"):
        if url.startswith(prefix):
            return prefix + str(Path(url[len(prefix):]).expanduser().resolve())
    return public_url(url)


def storage_key(url: str, study_name: str) -> str:
    """``<study>-<10 hex>``: one study in one storage, for directory names (its artifacts,
    its servers' workdir on a host, its lock). Study names are free text: only safe
    characters are kept, the hash tells apart what that folds together."""
    digest = hashlib.sha256(f"{canonical_url(url)}\n{study_name}".encode()).hexdigest()[:10]
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", study_name)[:40].lstrip(".") or "study"
    return f"{safe}-{digest}"
