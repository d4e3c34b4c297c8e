"""SGLang log parsing: the periodic "Decode batch" statistics and the failure a log ends in.

Both read the line body, never the prefix before it: ``[2025-10-22 10:27:57 TP0] ``,
``[2026-05-07 13:40:42 DP0 TP0 EP0] ``, ``[04:40:55 TP0] `` (0.3.x), or a deployment's own
logging format. The prefix changes between versions, ranks and launchers; the body does not.

Decode lines: 0.2-0.5 write ``Decode batch.``, newer builds ``Decode batch,``. Fields are
read by name, so reordered, added (``largest-len``, ``#retracted-req``, ``cap len``...) or
missing fields (no ``accept len`` without speculation, no ``cuda graph`` before 0.4.x) parse.
Real excerpts of every variant are the fixtures in ``tests/fixtures/sglang_logs/``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# A leading "[...]" holding a clock time ("[2025-10-22 10:27:57 DP0 TP0]", "[04:40:55 TP0]",
# "[2024-07-10 14:49:44,231]"), 0.2.x's "[gpu_id=0]", or torchrun's "[rank1]: ".
_PREFIX = re.compile(r"^(?:\[(?:[^\]]*\d\d:\d\d:\d\d[^\]]*|gpu(?:_id)?=\d+)\]|\[rank\d+\]:)\s?")

# "[12]" is the forward-iteration counter SGLang adds with SGLANG_LOG_FORWARD_ITERS.
_DECODE = re.compile(r"\bDecode batch(?: \[\d+\])?[.,]\s*(?P<body>.*)$")
# "key: value" pairs separated by ", "; keys may contain spaces, '#' and "(token/s)".
_FIELD = re.compile(r"\s*(?P<key>[^:,]+?)\s*:\s*(?P<value>[^,]*)")
# Where the KV token count lives: plain models, hybrid SWA/Mamba models, HiSparse.
_TOKEN_KEYS = ("#token", "#full token", "#gpu-token")


def strip_prefix(line: str) -> str:
    """The line without SGLang's ``[time rank] `` prefix and surrounding blanks."""
    return _PREFIX.sub("", line.strip(), count=1).strip()


@dataclass(frozen=True)
class DecodeStat:
    """One "Decode batch" line. ``accept_len``/``accept_rate`` are None without speculation.

    ``cuda_graph`` is the line's graph flag whatever the device calls it ("cuda graph",
    "npu graph", "cpu graph"), None when the version does not print one.
    """

    running_req: int
    accept_len: float | None
    accept_rate: float | None
    gen_throughput: float
    cuda_graph: bool | None
    token: int | None = None
    queue_req: int | None = None


def _num(fields: dict[str, str], key: str) -> float | None:
    # "nan"/"inf" read as missing: a window without a verify step has no accept length, and
    # one non-finite sample would poison every mean taken over it.
    raw = fields.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _int(fields: dict[str, str], *keys: str) -> int | None:
    for key in keys:
        value = _num(fields, key)
        if value is not None:
            return int(value)
    return None


def _graph(fields: dict[str, str]) -> bool | None:
    for key, value in fields.items():
        if key.endswith(" graph") and value in ("True", "False"):
            return value == "True"
    return None


def _parse_fields(body: str) -> dict[str, str]:
    return {m["key"].strip(): m["value"].strip() for m in _FIELD.finditer(body)}


def parse_decode_lines(text: str) -> list[DecodeStat]:
    """Every "Decode batch" line of a log, in order.

    Lines without a running-request count or a finite throughput are skipped (a line cut
    short by a terminal or a truncated tail must not count as a zero-throughput sample).
    """
    out: list[DecodeStat] = []
    for line in text.splitlines():
        m = _DECODE.search(line)
        if not m:
            continue
        f = _parse_fields(m["body"])
        running = _int(f, "#running-req")
        thr = _num(f, "gen throughput (token/s)")
        if running is None or thr is None:
            continue
        out.append(
            DecodeStat(
                running_req=running,
                accept_len=_num(f, "accept len"),
                accept_rate=_num(f, "accept rate"),
                gen_throughput=thr,
                cuda_graph=_graph(f),
                token=_int(f, *_TOKEN_KEYS),
                queue_req=_int(f, "#queue-req"),
            )
        )
    return out


# Most specific first: an OOM or a bad flag also prints a Traceback, so "crash" comes last;
# an NCCL failure can surface as a scheduler exception, so NCCL precedes "crash".
_FAILURE_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "oom",
        (
            "torch.OutOfMemoryError",
            "CUDA out of memory",
            "Capture cuda graph failed",
            "Not enough memory",
        ),
    ),
    (
        "invalid_args",
        ("unrecognized arguments", "ambiguous option", "AssertionError", "error: argument"),
    ),
    ("nccl", ("NCCL error", "NCCL WARN")),
    ("crash", ("Initialization failed", "Scheduler hit an exception", "Traceback")),
)


def classify_failure(log_text: str) -> str | None:
    """The failure class of a server log ("oom", "invalid_args", "nccl", "crash"), or None.

    The classes are ``sweeper.errors.CONFIG_FAILURE_KINDS`` names; "hang" and
    "startup_timeout" are decided by the server watchdog, not by the log text.
    """
    for kind, markers in _FAILURE_MARKERS:
        if any(marker in log_text for marker in markers):
            return kind
    return None


@dataclass(frozen=True)
class DecodeSummary:
    """Aggregate of "Decode batch" lines over a window of the log (e.g. one benchmark)."""

    n_lines: int
    accept_len: float | None  # mean over lines that report it; None without speculation
    accept_rate: float | None
    gen_throughput: float | None
    eager_lines: int  # lines with "cuda graph: False": batches that ran without CUDA graphs

    def to_dict(self) -> dict[str, float | int | None]:
        return dict(self.__dict__)


def summarize_decode(stats: list[DecodeStat]) -> DecodeSummary:
    """Mean accept length / rate / throughput over decode lines.

    A plain mean per line: each line covers the same number of decode iterations
    (--decode-log-interval), so lines are equally weighted samples of the window.
    """

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    return DecodeSummary(
        n_lines=len(stats),
        accept_len=mean([s.accept_len for s in stats if s.accept_len is not None]),
        accept_rate=mean([s.accept_rate for s in stats if s.accept_rate is not None]),
        gen_throughput=mean([s.gen_throughput for s in stats]),
        eager_lines=sum(1 for s in stats if s.cuda_graph is False),
    )
