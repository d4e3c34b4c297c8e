"""SGLang's HTTP API over the simulated engine (stdlib http.server, one thread per request).

Endpoints and JSON shapes follow SGLang (docs/SGLANG.md, "HTTP endpoints"): /health,
/health_generate,
/get_model_info, /v1/models, /get_server_info (+ /server_info), /flush_cache,
/v1/chat/completions (streaming SSE with a final usage chunk) and /generate (meta_info with
spec_verify_ct and spec_accept_histogram). Every JSON answer that describes the server says
``"simulated": true``: this is a test double. With --api-key, every endpoint but /health*
and /metrics needs ``Authorization: Bearer KEY`` (SGLang's middleware: 401 otherwise).
"""

from __future__ import annotations

import itertools
import queue
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from sweeper.sim.engine import Engine, Finish, Request
from sweeper.sim.faults import ActiveFaults
from sweeper.sim.log import SimLog
from sweeper.sim.profiles import Profile
from sweeper.sim.text import count_tokens, natural_length, prompt_seed
from sweeper.sim.wire import ClientGone, WireMixin

SIM_VERSION = "0.5.3-sim"
FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)


@dataclass
class AppState:
    """What the handlers read; `engine` is set and `ready` once start-up finished."""

    profile: Profile
    model_path: str
    served_model_name: str
    server_args: dict[str, Any]
    log: SimLog
    engine: Engine | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    api_key: str | None = None
    faults: ActiveFaults = field(default_factory=ActiveFaults)
    sample_counter: itertools.count[int] = field(default_factory=itertools.count)


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client must never keep the process alive
    block_on_close = False
    allow_reuse_address = True
    # listen backlog: the stdlib's 5 resets connections when a benchmark opens 16 at once
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], state: AppState) -> None:
        self.state = state
        super().__init__(address, SimHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return  # a client that disconnects mid-stream is normal, not worth a traceback
        self.state.log.raw("Exception in the simulated HTTP server:\n" + traceback.format_exc())


class SimHandler(WireMixin):
    protocol_version = "HTTP/1.1"
    server: SimHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        # no access log: /health polls must not look like progress to a hang watchdog
        pass

    # ------------------------------------------------------------ routing

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        routes = {
            "/health": self._health,
            "/health_generate": self._health,
            "/get_model_info": self._model_info,
            "/model_info": self._model_info,
            "/v1/models": self._models,
            "/get_server_info": self._server_info,
            "/server_info": self._server_info,
            "/flush_cache": self._flush_cache,
        }
        post_routes = {"/v1/chat/completions": self._chat, "/generate": self._generate}
        try:
            if not self._authorized(path):
                return
            if path in routes:
                routes[path]()
            elif path in post_routes and method == "POST":
                post_routes[path]()
            elif path in post_routes:
                self._error(405, "Method Not Allowed")
            else:
                self._json(404, {"detail": "Not Found"})
        except ClientGone:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    @property
    def state(self) -> AppState:
        return self.server.state

    def _authorized(self, path: str) -> bool:
        """SGLang's add_api_key_middleware: health and metrics stay open."""
        key = self.state.api_key
        if not key or path.startswith(("/health", "/metrics")):
            return True
        if self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._read_body()  # keep the connection usable for the client's next request
        self._json(401, {"error": "Unauthorized"})
        return False

    # ------------------------------------------------------------ plain endpoints

    def _health(self) -> None:
        if self.state.ready.is_set():
            self._send(200, b"", "text/plain")
        else:
            self._send(503, b"", "text/plain")

    def _model_info(self) -> None:
        s = self.state
        self._json(200, {
            "model_path": s.model_path,
            "tokenizer_path": s.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "simulated": True,
            "sim_profile": s.profile.name,
            "note": "sweeper.sim test double, not a real SGLang server",
        })

    def _models(self) -> None:
        s = self.state
        self._json(200, {
            "object": "list",
            "data": [{
                "id": s.served_model_name,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "sglang",
                "root": s.model_path,
                "max_model_len": s.profile.defaults.context_length,
            }],
            "simulated": True,
        })

    def _server_info(self) -> None:
        s = self.state
        internal: dict[str, Any] = {"last_gen_throughput": 0.0}
        if s.engine is not None:
            internal["last_gen_throughput"] = round(s.engine.last_gen_throughput, 2)
            if s.engine.cfg.speculative:
                internal["avg_spec_accept_length"] = round(s.engine.avg_accept_length(), 4)
        body = dict(s.server_args)
        hardware = s.profile.hardware
        body.update({
            "internal_states": [internal],
            "version": SIM_VERSION,
            "simulated": True,
            "sim_profile": s.profile.name,
            "gpu_name": hardware.gpu_name,
            "num_gpus": hardware.num_gpus,
            "max_total_num_tokens": s.engine.max_total_tokens if s.engine else None,
        })
        if s.engine is not None and s.engine.cfg.adaptive is not None:
            internal["speculative_num_steps"] = s.engine.current_steps
        self._json(200, body)

    def _flush_cache(self) -> None:
        self._read_body()
        engine = self.state.engine
        busy = engine is not None and engine.busy()
        if not busy:  # SGLang's scheduler logs the same line when it flushes
            self.state.log.info("Cache flushed successfully!")
        self._send(400 if busy else 200, FLUSH_TEXT.encode(), "text/plain; charset=utf-8")

    # ------------------------------------------------------------ generation

    def _submit(
        self, prompt: str, max_new: int, temperature: float, ignore_eos: bool, extra: int = 0
    ) -> Request:
        engine = self.state.engine
        assert engine is not None
        seed = prompt_seed(prompt)
        if temperature > 0:
            # sampling: a different (still seeded) continuation per request
            seed += (next(self.state.sample_counter) + 1) * 1_000_003
        return engine.submit(
            prompt_seed=seed,
            prompt_tokens=count_tokens(prompt) + extra,
            max_new=max_new,
            natural=None if ignore_eos else natural_length(prompt),
            prompt=prompt,
        )

    def _events(self, req: Request) -> Iterator[tuple[str, Any]]:
        engine = self.state.engine
        while True:
            try:
                kind, payload = req.events.get(timeout=0.25)
            except queue.Empty:
                if engine is None or engine.stopped:
                    yield "abort", None
                    return
                continue
            yield kind, payload
            if kind in ("done", "abort"):
                return

    def _not_ready(self) -> bool:
        if self.state.engine is None:
            self._error(503, "The server is not ready yet.")
            return True
        return False

    def _fault_500(self, openai: bool) -> bool:
        """http_500: the request fails inside the server, like an unhandled exception."""
        if not self.state.faults.http_500:
            return False
        error = ("CUDA error: an illegal memory access was encountered "
                 "(simulated fault: http_500)")
        if openai:
            # OpenAIServingBase.handle_request's catch-all
            self.state.log.info(f"Error in request: {error}")
            self._json(500, {"object": "error", "message": f"Internal server error: {error}",
                             "type": "InternalServerError", "param": None, "code": 500})
        else:
            self.state.log.info(f"[http_server] Error: {error}")
            self._json(500, {"error": {"message": error}})
        return True

    def _chat(self) -> None:
        body = self._read_json()
        if body is None or self._not_ready() or self._fault_500(openai=True):
            return
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self._error(400, "messages must be a non-empty list")
            return
        prompt = "\n".join(_message_text(m) for m in messages)
        try:
            max_new = int(body.get("max_completion_tokens") or body.get("max_tokens") or 128)
            temperature = float(body.get("temperature", 1.0) or 0.0)
        except (TypeError, ValueError):
            self._error(400, "max_tokens and temperature must be numbers")
            return
        ignore_eos = bool(body.get("ignore_eos", False))
        # + 2 per message: the chat template's role markers
        req = self._submit(prompt, max_new, temperature, ignore_eos, 2 * len(messages))
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        model_name = str(body.get("model") or self.state.served_model_name)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage", False))
        if body.get("stream"):
            self._chat_stream(req, rid, created, model_name, include_usage)
        else:
            self._chat_full(req, rid, created, model_name)

    def _chat_stream(
        self, req: Request, rid: str, created: int, model_name: str, include_usage: bool
    ) -> None:
        def chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> None:
            payload: dict[str, Any] = {
                "id": rid, "object": "chat.completion.chunk", "created": created,
                "model": model_name, "choices": choices,
            }
            if usage is not None:
                payload["usage"] = usage
            self._sse(payload, req)

        self._start_stream(req)
        first = True
        for kind, payload in self._events(req):
            if kind == "tokens":
                delta = {"content": "".join(payload)}
                if first:
                    delta = {"role": "assistant", **delta}
                    first = False
                chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])
            else:
                finish: Finish | None = payload
                reason = finish.reason if finish else "abort"
                chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason,
                        "matched_stop": None}])
                if include_usage and finish:
                    chunk([], _usage(req.prompt_tokens, finish.completion_tokens))
        self._sse_raw(b"data: [DONE]\n\n", req)
        self._end_stream(req)

    def _chat_full(self, req: Request, rid: str, created: int, model_name: str) -> None:
        tokens, finish = self._collect(req)
        if finish is None:
            self._error(503, "The server is shutting down.")
            return
        self._json(200, {
            "id": rid, "object": "chat.completion", "created": created, "model": model_name,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": "".join(tokens),
                            "reasoning_content": None, "tool_calls": None},
                "logprobs": None, "finish_reason": finish.reason, "matched_stop": None,
            }],
            "usage": _usage(req.prompt_tokens, finish.completion_tokens),
            "metadata": {"weight_version": "default"},
        })

    def _generate(self) -> None:
        body = self._read_json()
        if body is None or self._not_ready() or self._fault_500(openai=False):
            return
        text = body.get("text")
        if not isinstance(text, str):
            self._error(400, "text must be a string (batched /generate is not simulated)")
            return
        params = body.get("sampling_params") or {}
        try:
            max_new = int(params.get("max_new_tokens", 128))
            temperature = float(params.get("temperature", 1.0))
        except (TypeError, ValueError):
            self._error(400, "max_new_tokens and temperature must be numbers")
            return
        req = self._submit(text, max_new, temperature, bool(params.get("ignore_eos", False)))
        rid = uuid.uuid4().hex
        if not body.get("stream"):
            tokens, finish = self._collect(req)
            if finish is None:
                self._error(503, "The server is shutting down.")
                return
            self._json(200, {"text": "".join(tokens), "meta_info": self._meta(rid, finish),
                             "index": 0})
            return
        self._start_stream(req)
        text_so_far: list[str] = []
        for kind, payload in self._events(req):
            if kind == "tokens":
                text_so_far.extend(payload)
                meta = {"id": rid, "finish_reason": None, "prompt_tokens": req.prompt_tokens,
                        "completion_tokens": len(text_so_far)}
                # SGLang's /generate streams the whole text so far in every event
                self._sse({"text": "".join(text_so_far), "meta_info": meta, "index": 0}, req)
            elif payload is not None:
                self._sse({"text": "".join(text_so_far), "meta_info": self._meta(rid, payload),
                           "index": 0}, req)
        self._sse_raw(b"data: [DONE]\n\n", req)
        self._end_stream(req)

    def _meta(self, rid: str, finish: Finish) -> dict[str, Any]:
        if finish.reason == "length":
            reason: dict[str, Any] = {"type": "length", "length": finish.completion_tokens}
        else:
            reason = {"type": "stop", "matched": 2}
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": reason,
            "prompt_tokens": finish.prompt_tokens,
            "completion_tokens": finish.completion_tokens,
            "cached_tokens": 0,
            "e2e_latency": round(finish.e2e_latency, 6),
        }
        engine = self.state.engine
        if engine is not None and engine.cfg.speculative:
            meta["spec_verify_ct"] = finish.verify_ct
            meta["spec_accept_histogram"] = finish.histogram
        return meta

    def _collect(self, req: Request) -> tuple[list[str], Finish | None]:
        tokens: list[str] = []
        for kind, payload in self._events(req):
            if kind == "tokens":
                tokens.extend(payload)
            elif kind == "done":
                return tokens, payload
        return tokens, None


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        return str(message)
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
