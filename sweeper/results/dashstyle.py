"""One stylesheet rule added to optuna-dashboard's page, so that its tables fit their card.

optuna-dashboard draws the study's attribute table (and others) with a minimum width of
650 px, wider than the card it sits in on a 1400-px window: the table scrolls sideways and
its value column, ``sweeper:winner`` included, is cut at the card's edge until the reader
scrolls. The values wrap at spaces, so the table fits once that minimum is lifted. The
page is the dashboard's own HTML (one file for every route); this middleware adds a
``<style>`` before its ``</head>`` and changes nothing else it serves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

STYLE = b"<style>.MuiTableContainer-root > table.MuiTable-root { min-width: 0 !important; }</style>"

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def with_style(app: WSGIApp) -> WSGIApp:
    """``app``, its HTML pages carrying STYLE."""
    def styled(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        seen: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            seen.update(status=status, headers=headers, exc_info=exc_info)
            return lambda data: None  # nothing writes through it: bottle returns its body

        body = app(environ, capture)
        headers = seen["headers"]
        html = any(k.lower() == "content-type" and v.startswith("text/html") for k, v in headers)
        if not (html and seen["status"].startswith("200")):
            start_response(seen["status"], headers, seen["exc_info"])
            return body
        try:
            page = b"".join(body).replace(b"</head>", STYLE + b"</head>", 1)
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(seen["status"], [*headers, ("Content-Length", str(len(page)))],
                       seen["exc_info"])
        return [page]
    return styled
