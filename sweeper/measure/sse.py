"""Server-sent events as SGLang streams them: ``data: {json}`` lines, keep-alive
comments, ``data: [DONE]``, and error events. A pure parser, tested on its own."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class SSEEvent:
    """One server-sent event: ``data`` (a JSON object), ``done`` ([DONE]) or ``error``."""

    kind: Literal["data", "done", "error"]
    data: dict[str, Any] | None = None
    message: str | None = None


def error_text(obj: dict[str, Any]) -> str | None:
    """The message of an error payload (OpenAI ``{"object": "error", "message"}`` or SGLang's
    ``{"error": {"message"}}`` / ``{"error": "..."}``); None for a normal chunk."""
    if obj.get("object") == "error":
        return str(obj.get("message") or obj.get("detail") or "error")
    err = obj.get("error")
    if err:
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return None


def _to_event(payload: str, event_name: str | None) -> SSEEvent:
    if payload.strip() == "[DONE]":
        return SSEEvent("done")
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError:
        return SSEEvent("error", message=f"malformed event data: {payload[:120]!r}")
    if not isinstance(obj, dict):
        return SSEEvent("error", message=f"unexpected event data: {payload[:120]!r}")
    msg = error_text(obj)
    if msg is not None or event_name == "error":
        return SSEEvent("error", data=obj, message=msg or json.dumps(obj)[:200])
    return SSEEvent("data", data=obj)


def iter_sse_events(lines: Iterable[str]) -> Iterator[SSEEvent]:
    """Parse server-sent-event lines (without their newlines) into events.

    Follows the SSE rules that matter here: ``:`` lines are keep-alive comments, a blank line
    ends an event, several ``data:`` lines of one event join with a newline, ``event: error``
    marks an error. Some servers omit the blank line between events, so a ``data:`` line that
    arrives while the pending data is already a complete JSON value starts a new event.
    """
    buf: list[str] = []
    event_name: str | None = None

    def complete(pending: list[str]) -> bool:
        text = "\n".join(pending)
        if text.strip() == "[DONE]":
            return True
        try:
            json.loads(text)
        except json.JSONDecodeError:
            return False
        return True

    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if buf:
                yield _to_event("\n".join(buf), event_name)
            buf, event_name = [], None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            if buf and complete(buf):
                yield _to_event("\n".join(buf), event_name)
                buf, event_name = [], None
            buf.append(value)
        elif name == "event":
            event_name = value.strip()
        # id:, retry: and unknown fields carry nothing we use
    if buf:
        yield _to_event("\n".join(buf), event_name)
