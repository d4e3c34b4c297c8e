"""SGLang 0.5.23's native and completion endpoints of the simulated server (a mixin).

- POST /generate: ``text`` or ``input_ids``, one request or a batch (a list of either); a
  batch answers a list, or streams events tagged with ``index``. ``meta_info`` carries
  tokenizer_manager's speculative fields: spec_accept_rate (correct / proposed drafts),
  spec_accept_length (completion tokens / verify count), spec_num_correct_drafts,
  spec_num_proposed_drafts (verify count x (draft tokens - 1)), spec_verify_ct,
  spec_correct_drafts_histogram (H[n] = verifies that accepted n drafts).
- POST /v1/completions: OpenAI completions, streaming with an optional usage chunk.
- GET|POST /flush_cache[?timeout=T]: flushes when idle (the scheduler resets its metrics,
  avg_spec_accept_length included); with a timeout, waits that long for idle first.
- GET /ready: 200 once ready. GET /metrics: Prometheus text with --enable-metrics, else 404.
"""

from __future__ import annotations

import queue
import time
import urllib.parse
import uuid
from typing import Any

from sweeper.sim.engine import Finish, Request
from sweeper.sim.wire import WireMixin

FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)


class NativeRoutes(WireMixin):
    state: Any  # AppState, from the server module (kept apart: no import cycle)

    # the handler provides these
    def _submit(self, prompt: str, max_new: int, temperature: float, ignore_eos: bool,
                extra: int = 0, tokens: int | None = None) -> Request:
        raise NotImplementedError

    def _not_ready(self) -> bool:
        raise NotImplementedError

    def _fault_500(self, openai: bool) -> bool:
        raise NotImplementedError

    def _collect(self, req: Request) -> tuple[list[str], Finish | None]:
        raise NotImplementedError

    def _events(self, req: Request) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------ small endpoints

    def _ready(self) -> None:
        self._send(200 if self.state.ready.is_set() else 503, b"", "text/plain")

    def _metrics(self) -> None:
        s = self.state
        if not s.server_args.get("enable_metrics"):
            self._json(404, {"detail": "Not Found"})
            return
        engine = s.engine
        running = 0 if engine is None else int(engine.busy())
        accept = engine.avg_accept_length() if engine is not None else None
        name = s.served_model_name
        lines = [
            "# simulated: sweeper.sim test double, not a measurement",
            "# TYPE sglang:num_running_reqs gauge",
            f'sglang:num_running_reqs{{model_name="{name}"}} {running}',
            "# TYPE sglang:gen_throughput gauge",
            f'sglang:gen_throughput{{model_name="{name}"}} '
            f"{engine.last_gen_throughput if engine else 0.0:.2f}",
        ]
        if accept is not None:
            lines += ["# TYPE sglang:spec_accept_length gauge",
                      f'sglang:spec_accept_length{{model_name="{name}"}} {accept:.4f}']
        self._send(200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4")

    def _flush_cache(self) -> None:
        self._read_body()
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        try:
            timeout = float((query.get("timeout") or ["0"])[0])
        except ValueError:
            timeout = -1.0
        if timeout < 0:
            self._json(422, {"detail": [{"loc": ["query", "timeout"], "type": "greater_than_equal",
                                         "msg": "Input should be greater than or equal to 0"}]})
            return
        engine = self.state.engine
        deadline = time.monotonic() + timeout
        ok = engine is not None and engine.flush()
        while engine is not None and not ok and time.monotonic() < deadline:
            time.sleep(0.01)  # the scheduler re-checks for idle every iteration
            ok = engine.flush()
        if ok:  # SGLang's scheduler logs the same line when it flushes
            self.state.log.info("Cache flushed successfully!")
            self._send(200, FLUSH_TEXT.encode(), "text/plain; charset=utf-8")
            return
        text = "Timed out waiting for idle state." if timeout > 0 else "Flush cache failed.\n"
        self._send(400, text.encode(), "text/plain; charset=utf-8")

    # ------------------------------------------------------------ /generate

    def _generate(self) -> None:
        body = self._read_json()
        if body is None or self._not_ready() or self._fault_500(openai=False):
            return
        text, ids = body.get("text"), body.get("input_ids")
        if (text is None) == (ids is None):
            self._error(400, "Either text or input_ids should be provided.")
            return
        batched = isinstance(text, list) or bool(isinstance(ids, list) and ids
                                                 and isinstance(ids[0], list))
        items: list[Any] = list(text) if isinstance(text, list) else [text] \
            if text is not None else list(ids or []) if batched else [ids]
        if not items or not all(isinstance(t, str) for t in items) and not all(
                isinstance(t, list) and all(isinstance(x, int) for x in t) for t in items):
            self._error(400, "text must be a string or a list of strings; input_ids a list "
                             "of token ids or a list of such lists")
            return
        params = body.get("sampling_params") or {}
        if isinstance(params, list):
            params = params[0] if params else {}
        try:
            max_new = int(params.get("max_new_tokens", 128))
            temperature = float(params.get("temperature", 1.0))
        except (TypeError, ValueError):
            self._error(400, "max_new_tokens and temperature must be numbers")
            return
        ignore_eos = bool(params.get("ignore_eos", False))
        reqs = [self._submit(item if isinstance(item, str) else " ".join(map(str, item)),
                             max_new, temperature, ignore_eos,
                             tokens=None if isinstance(item, str) else len(item))
                for item in items]
        rids = [uuid.uuid4().hex for _ in reqs]
        if body.get("stream"):
            self._generate_stream(reqs, rids, batched)
            return
        out = []
        for i, (req, rid) in enumerate(zip(reqs, rids, strict=True)):
            tokens, finish = self._collect(req)
            if finish is None:
                self._error(503, "The server is shutting down.")
                return
            out.append({"text": "".join(tokens), "meta_info": self._meta(rid, finish),
                        "index": i})
        self._json(200, out if batched else out[0])

    def _generate_stream(self, reqs: list[Request], rids: list[str], batched: bool) -> None:
        """Every request's events as they come, tagged with its index (the whole text so far
        in every event, as SGLang streams /generate)."""
        self._start_stream(reqs[0])
        texts: list[list[str]] = [[] for _ in reqs]
        open_ = set(range(len(reqs)))
        while open_:
            moved = False
            for i in sorted(open_):
                req = reqs[i]
                try:
                    kind, payload = req.events.get_nowait()
                except queue.Empty:
                    engine = self.state.engine
                    if engine is None or engine.stopped:
                        open_.discard(i)
                    continue
                moved = True
                if kind == "tokens":
                    texts[i].extend(payload)
                    meta = {"id": rids[i], "finish_reason": None,
                            "prompt_tokens": req.prompt_tokens,
                            "completion_tokens": len(texts[i])}
                    self._sse({"text": "".join(texts[i]), "meta_info": meta, "index": i}, req)
                else:
                    open_.discard(i)
                    if kind == "done" and payload is not None:
                        self._sse({"text": "".join(texts[i]),
                                   "meta_info": self._meta(rids[i], payload), "index": i}, req)
            if not moved:
                time.sleep(0.001)
        self._sse_raw(b"data: [DONE]\n\n", reqs[0])
        self._end_stream(reqs[0])

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
        if engine is not None and engine.cfg.speculative and finish.verify_ct > 0:
            proposed = finish.verify_ct * (engine.cfg.draft_tokens - 1)
            correct = sum(n * count for n, count in enumerate(finish.histogram))
            if proposed > 0:
                meta.update(
                    spec_accept_rate=correct / proposed,
                    spec_accept_length=finish.completion_tokens / finish.verify_ct,
                    spec_num_correct_drafts=correct,
                    spec_num_proposed_drafts=proposed,
                    spec_verify_ct=finish.verify_ct,
                )
            if any(finish.histogram):
                meta["spec_correct_drafts_histogram"] = list(finish.histogram)
        return meta

    # ------------------------------------------------------------ /v1/completions

    def _completions(self) -> None:
        body = self._read_json()
        if body is None or self._not_ready() or self._fault_500(openai=True):
            return
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
            text, tokens = " ".join(map(str, prompt)), len(prompt)
        elif isinstance(prompt, str):
            text, tokens = prompt, None
        else:
            self._error(400, "prompt must be a string or a list of token ids (one prompt "
                             "per request in this simulator)")
            return
        try:
            max_new = int(body.get("max_tokens") or 16)
            temperature = float(body.get("temperature", 1.0) or 0.0)
        except (TypeError, ValueError):
            self._error(400, "max_tokens and temperature must be numbers")
            return
        req = self._submit(text, max_new, temperature, bool(body.get("ignore_eos", False)),
                           tokens=tokens)
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        model_name = str(body.get("model") or self.state.served_model_name)
        head = {"id": rid, "object": "text_completion", "created": created,
                "model": model_name}
        if not body.get("stream"):
            tokens_out, finish = self._collect(req)
            if finish is None:
                self._error(503, "The server is shutting down.")
                return
            self._json(200, {**head, "choices": [{
                "index": 0, "text": "".join(tokens_out), "logprobs": None,
                "finish_reason": finish.reason, "matched_stop": None}],
                "usage": _usage(req.prompt_tokens, finish.completion_tokens)})
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage", False))
        self._start_stream(req)
        for kind, payload in self._events(req):
            if kind == "tokens":
                self._sse({**head, "choices": [{"index": 0, "text": "".join(payload),
                                                "logprobs": None, "finish_reason": None}]}, req)
                continue
            end: Finish | None = payload
            self._sse({**head, "choices": [{"index": 0, "text": "", "logprobs": None,
                                            "finish_reason": end.reason if end
                                            else "abort", "matched_stop": None}]}, req)
            if include_usage and end:
                self._sse({**head, "choices": [],
                           "usage": _usage(req.prompt_tokens, end.completion_tokens)}, req)
        self._sse_raw(b"data: [DONE]\n\n", req)
        self._end_stream(req)


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
