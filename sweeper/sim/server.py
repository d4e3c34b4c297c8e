"""SGLang's HTTP API over the simulated engine (stdlib http.server, one thread per request).

Endpoints and JSON shapes follow SGLang 0.5.23: /health, /health_generate, /ready,
/model_info, /v1/models, /server_info (internal_states[] per DP rank with world_size,
effective_max_running_requests_per_dp, memory_usage, and avg_spec_accept_length once a
decode log line counted a verify), /get_server_info and /get_model_info (deprecated: a
warning in the log on every call), /v1/chat/completions (streaming SSE with a final usage
chunk), and sweeper.sim.native's /generate, /v1/completions, /flush_cache, /metrics. Every
JSON answer that describes the server says ``"simulated": true``: this is a test double.
With --api-key, every endpoint but /health* and /metrics needs ``Authorization: Bearer KEY``
(SGLang's middleware: 401 otherwise).
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
from sweeper.sim.hardware import memory_plan
from sweeper.sim.log import SimLog
from sweeper.sim.native import NativeRoutes
from sweeper.sim.profiles import Profile
from sweeper.sim.text import count_tokens, natural_length, prompt_seed
from sweeper.sim.wire import ClientGone

SIM_VERSION = "0.5.23-sim"


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
    startup_time: float = 0.0
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


class SimHandler(NativeRoutes):
    protocol_version = "HTTP/1.1"
    server: SimHTTPServer
    # TCP_NODELAY, as SGLang's uvicorn (uvloop/asyncio transports) sets on every connection.
    # With Nagle on, a response's headers and its first body write are two small segments:
    # the second waits for the client's ACK, which a kept-alive connection delays 40 ms, so
    # a pooled client saw every first token 40 ms after the prefill and a fresh one did not.
    disable_nagle_algorithm = True

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
            "/ready": self._ready,
            "/metrics": self._metrics,
            "/get_model_info": self._deprecated("/get_model_info", "/model_info",
                                                self._model_info),
            "/model_info": self._model_info,
            "/v1/models": self._models,
            "/get_server_info": self._deprecated("/get_server_info", "/server_info",
                                                 self._server_info),
            "/server_info": self._server_info,
            "/flush_cache": self._flush_cache,
        }
        post_routes = {"/v1/chat/completions": self._chat, "/generate": self._generate,
                       "/v1/completions": self._completions}
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

    def _deprecated(self, old: str, new: str, handler: Any) -> Any:
        def answer() -> None:
            # SGLang 0.5.23 logs this on every call of the old name
            self.state.log.warning(
                f"Endpoint '{old}' is deprecated and will be removed in a future version. "
                f"Please use '{new}' instead.")
            handler()
        return answer

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
        hardware = s.profile.hardware
        body = dict(s.server_args)
        internal: dict[str, Any] = {**s.server_args, "last_gen_throughput": 0.0}
        engine = s.engine
        attn_dp = int(s.server_args.get("attn_dp_size") or 1)
        if engine is not None:
            internal.update(
                world_size=engine.cfg.tp,
                startup_time=s.startup_time,
                effective_max_running_requests_per_dp=max(engine.cfg.max_running // attn_dp, 1),
                last_gen_throughput=round(engine.last_gen_throughput, 2),
                memory_usage=_memory_usage(s.profile, engine),
            )
            accept = engine.avg_accept_length() if engine.cfg.speculative else None
            if accept is not None:  # absent until a decode log line counted a verify
                internal["avg_spec_accept_length"] = round(accept, 4)
        body.update({
            "startup_time": s.startup_time,
            # one entry per DP rank (attention-DP groups here), like SGLang's
            "internal_states": [dict(internal) for _ in range(attn_dp)],
            "version": SIM_VERSION,
            "simulated": True,
            "sim_profile": s.profile.name,
            "gpu_name": hardware.gpu_name,
            "num_gpus": hardware.num_gpus,
            "max_total_num_tokens": s.engine.max_total_tokens if s.engine else None,
        })
        if engine is not None and engine.cfg.adaptive is not None:
            for state in body["internal_states"]:
                state["speculative_num_steps"] = engine.current_steps
        self._json(200, body)

    # ------------------------------------------------------------ generation

    def _submit(
        self, prompt: str, max_new: int, temperature: float, ignore_eos: bool, extra: int = 0,
        tokens: int | None = None,
    ) -> Request:
        engine = self.state.engine
        assert engine is not None
        seed = prompt_seed(prompt)
        if temperature > 0:
            # sampling: a different (still seeded) continuation per request
            seed += (next(self.state.sample_counter) + 1) * 1_000_003
        return engine.submit(
            prompt_seed=seed,
            prompt_tokens=(count_tokens(prompt) if tokens is None else tokens) + extra,
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

    def _collect(self, req: Request) -> tuple[list[str], Finish | None]:
        tokens: list[str] = []
        for kind, payload in self._events(req):
            if kind == "tokens":
                tokens.extend(payload)
            elif kind == "done":
                return tokens, payload
        return tokens, None


def _memory_usage(profile: Profile, engine: Engine) -> dict[str, Any]:
    """internal_states[].memory_usage (scheduler_components/memory_usage.py), in GB."""
    plan = memory_plan(profile, engine.cfg)
    graph = {"decode": round(plan.graph_gb, 3)} if engine.cfg.cuda_graph else {}
    if engine.cfg.cuda_graph and engine.cfg.speculative:
        graph = {"target_verify": round(plan.graph_gb * 2 / 3, 3),
                 "draft_decode": round(plan.graph_gb / 3, 3)}
    return {"weight": round(plan.weights_gb, 3), "kvcache": round(max(plan.kv_gb, 0.0), 3),
            "startup_available": round(plan.total_gb * 0.99, 3),
            "token_capacity": engine.max_total_tokens, "token_capacity_swa": None,
            "graph": graph}


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
