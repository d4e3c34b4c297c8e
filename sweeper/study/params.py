"""One ``space:`` entry of a study file -> ParamSpec, checked key by key."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from sweeper.study.base import ENV_PREFIX, UNSET, coerce_float, fail, render_value, show, suggest
from sweeper.study.rules import ParamSpec

# The keys a parameter accepts, for "did you mean" suggestions.
PARAM_KEYS = ("int", "float", "choices", "step", "log")


def env_value(path: Path, key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        fail(path, key, f"expected a string or a number, got {show(value, key)}",
              "write the value NCCL or the server expects, e.g. 1 or \"Ring\" (quote it)")
    return render_value(value)



def _number(path: Path, key: str, v: Any, integer: bool) -> int | float:
    if integer:
        if isinstance(v, bool) or not isinstance(v, int):
            hint = f"write {int(v)}" if isinstance(v, float) and v.is_integer() else \
                "int bounds must be whole numbers"
            fail(path, key, f"int bound {show(v, key)} is not an integer", hint)
        return v
    c = coerce_float(v)
    if isinstance(c, bool) or not isinstance(c, float) or not math.isfinite(c):
        fail(path, key, f"float bound {show(v, key)} is not a number", "write e.g. 0.85 or 1.0e-3")
    return c


def parse_param(path: Path, name: str, raw: Any) -> ParamSpec:
    key = f"space.{name}"
    is_env = name.startswith(ENV_PREFIX)
    if not isinstance(raw, dict):
        fail(path, key, f"expected a mapping like {{int: [1, 6]}}, got {show(raw, key)}",
              "give one of {int: [lo, hi]}, {float: [lo, hi]} or {choices: [...]}")
    for k in raw:
        if k not in PARAM_KEYS:
            fail(path, f"{key}.{k}", f"unknown key {show(k)}", suggest(str(k), PARAM_KEYS))
    kinds: list[Literal["int", "float", "choices"]] = [
        k for k in ("int", "float", "choices") if k in raw]
    if len(kinds) != 1:
        fail(path, key, "give exactly one of int, float, choices" +
              (f" (got {', '.join(kinds)})" if kinds else ""),
              "e.g. {int: [1, 6]} or {choices: [1, 2, 4]}")
    kind = kinds[0]
    body = raw[kind]
    log = raw.get("log", False)
    if not isinstance(log, bool):
        fail(path, f"{key}.log", f"expected true or false, got {show(log)}", "fix the value")
    step = raw.get("step")

    if kind == "choices":
        if "step" in raw or "log" in raw:
            fail(path, f"{key}.{'step' if 'step' in raw else 'log'}",
                  "applies to int/float ranges only", "remove it")
        if not isinstance(body, list):
            fail(path, f"{key}.choices", f"expected a list, got {show(body, key)}",
                  "write choices: [a, b, c]")
        if not body:
            fail(path, f"{key}.choices", "empty choices", "list at least one value")
        seen: dict[str, Any] = {}
        for i, c in enumerate(body):
            ck = f"{key}.choices[{i}]"
            if isinstance(c, dict | list):
                fail(path, ck, f"a choice must be a scalar, got {show(c, ck)}",
                      "give strings, numbers, booleans or null")
            if is_env:
                if c is None:
                    fail(path, ck, "null is not an env value",
                          f"use {UNSET!r} to leave the variable out")
                if c != UNSET:
                    env_value(path, ck, c)
            elif c == UNSET:
                fail(path, ck, f"{UNSET!r} is only for env.* parameters",
                      "use null to leave a flag out")
            # Two choices that reach the server the same way would be silent duplicates.
            canon = _choice_canon(c, is_env)
            if canon in seen:
                same = "" if repr(seen[canon]) == repr(c) else f" (same as {show(seen[canon], ck)})"
                fail(path, ck, f"duplicate choice {show(c, ck)}{same}", "list each value once")
            seen[canon] = c
        return ParamSpec("choices", choices=tuple(body))

    if not isinstance(body, list) or len(body) != 2:
        fail(path, f"{key}.{kind}", f"expected [low, high], got {show(body, key)}",
              f"write {kind}: [low, high]")
    integer = kind == "int"
    lo = _number(path, f"{key}.{kind}[0]", body[0], integer)
    hi = _number(path, f"{key}.{kind}[1]", body[1], integer)
    if lo > hi:
        fail(path, f"{key}.{kind}", f"low {body[0]} > high {body[1]}", "swap them")
    if log and lo <= 0:
        fail(path, f"{key}.log", f"a log scale needs low > 0, got {body[0]}",
              "raise low or drop log")
    if kind == "float" and step is not None:
        fail(path, f"{key}.step", "float ranges take no step", "remove it or use choices")
    if integer and step is not None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            fail(path, f"{key}.step", f"step must be a positive integer, got {show(step)}",
                  "fix the value")
        if log and step != 1:
            fail(path, f"{key}.step", "a log scale takes no step (Optuna refuses it)",
                  "remove step or log")
        if (hi - lo) % step:
            fail(path, f"{key}.step", f"high - low = {hi - lo} is not a multiple of {step}",
                  f"set high to {lo + (hi - lo) // step * step}")
    return ParamSpec(kind, low=lo, high=hi, step=step if integer else None, log=log)


def _choice_canon(value: Any, is_env: bool) -> str:
    if is_env:
        return "<unset>" if value == UNSET else render_value(value)
    if value is None or value is False:
        return "<absent>"
    if value is True:
        return "<present>"
    return render_value(value)

