"""Is the benchmark long enough for SGLang's decode log? A warning when it is not.

SGLang 0.5.23 writes its "Decode batch" line, and adds to the accept-length average that
/server_info reports, only every ``--decode-log-interval`` decode steps (default 40), and
a /flush_cache (sweeper sends one before every run) starts that count again. A run of
``max_tokens`` tokens a request makes its first token in the prefill and at most
``max_tokens - 1`` decode steps (fewer with speculative decoding, where a step makes up to
draft-tokens tokens). So a run with ``max_tokens`` at or below the interval gets no decode
line and no accept length from the server's log or its average: the figures stay empty,
silently. The check is a warning, not an error: tok/s is still measured, and /generate's
meta_info still gives a per-request accept length.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# SGLang 0.5.23's default (srt/arg_groups/fields: decode_log_interval = 40)
SGLANG_DEFAULT_INTERVAL = 40
FLAG = "decode-log-interval"


def decode_log_interval(args: Mapping[str, Any]) -> int | None:
    """The interval the server runs with: server.args' value, else SGLang's default;
    None when the value is not a positive integer (the launcher's --help refuses it)."""
    value = args.get(FLAG, SGLANG_DEFAULT_INTERVAL)
    try:
        interval = int(str(value))
    except ValueError:
        return None
    return interval if interval >= 1 and not isinstance(value, bool) else None


def decode_log_warning(max_tokens: int, args: Mapping[str, Any]) -> str | None:
    """One line when no run of ``max_tokens`` tokens can reach a decode log line."""
    interval = decode_log_interval(args)
    if interval is None or max_tokens > interval:
        return None
    set_here = "" if FLAG in args else f" (not set: SGLang's default {interval})"
    return (f"benchmark.max_tokens {max_tokens} is not above server.args {FLAG} "
            f"{interval}{set_here}: SGLang logs its \"Decode batch\" line and adds to its "
            f"accept length only every {interval} decode steps after each /flush_cache, so "
            f"no run gets an accept length from the log or /server_info; raise "
            f"benchmark.max_tokens above {interval} (more with speculative decoding, whose "
            f"steps make several tokens) "
            f"or set server.args.{FLAG} to {max(1, max_tokens - 1)} or less")
