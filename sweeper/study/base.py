"""The names, values and error shape every study check shares.

Every problem with a study file is a StudyError with one line:
``<file>: <key path>: <what is wrong>; <what to do>`` (``fail``).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

from pydantic import BeforeValidator

from sweeper.errors import StudyError
from sweeper.launch import SPECULATIVE_PREFIX, Scalar, render_value

__all__ = ["ALGORITHM", "DRAFT", "Duration", "ENV_PREFIX", "PLACEHOLDER_PATTERN",
           "RESERVED_FLAGS", "SPECULATIVE_PREFIX", "STEPS", "Scalar", "TOPK", "TRIPLE",
           "UNSET", "coerce_float", "fail", "suggest", "parse_duration", "render_value"]

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


def fail(path: Path | str, key: str, what: str, todo: str) -> NoReturn:
    """Raise the one-line StudyError: file, key, what is wrong, what to do."""
    raise StudyError(f"{path}: {key}: {what}; {todo}" if key else f"{path}: {what}; {todo}")


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
                raise ValueError(f"{value!r} is not a duration (write 90, \"90s\", \"20m\", "
                                 "\"1h\" or \"1m30s\")")
            seconds = (float(m["h"] or 0) * 3600 + float(m["m"] or 0) * 60
                       + float(m["s"] or 0))
    else:
        raise ValueError(f"expected a duration like \"90s\" or \"20m\", got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a duration must be positive, got {value!r}")
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

