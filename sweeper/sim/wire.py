"""HTTP wire helpers of the simulated SGLang server: JSON bodies, errors, chunked SSE.

A mixin for sweeper.sim.server's handler (split out to keep that module readable).
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from sweeper.sim.engine import Request


class ClientGone(Exception):
    """The client closed the connection mid-response."""


class WireMixin(BaseHTTPRequestHandler):
    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _read_json(self) -> dict[str, Any] | None:
        try:
            body = json.loads(self._read_body() or b"{}")
        except (ValueError, UnicodeDecodeError) as exc:
            self._error(400, f"invalid JSON body: {exc}")
            return None
        if not isinstance(body, dict):
            self._error(400, "the JSON body must be an object")
            return None
        return body

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"object": "error", "message": message, "type": "BadRequestError",
                            "param": None, "code": status})

    def _start_stream(self, req: Request) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
        except OSError as exc:
            req.cancel()
            raise ClientGone from exc

    def _sse(self, payload: dict[str, Any], req: Request) -> None:
        self._sse_raw(b"data: " + json.dumps(payload).encode() + b"\n\n", req)

    def _sse_raw(self, data: bytes, req: Request) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except OSError as exc:
            req.cancel()  # the client went away: stop generating for it
            raise ClientGone from exc

    def _end_stream(self, req: Request) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError as exc:
            req.cancel()
            raise ClientGone from exc
