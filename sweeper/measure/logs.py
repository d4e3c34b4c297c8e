"""SGLang log parsing: the periodic "Decode batch" statistics and fatal-error markers.

Matches the line body, never the ``[2025-10-22 10:27:57 TP0] `` prefix (it changes between
versions and ranks). Both the 0.5.x ``Decode batch.`` and newer ``Decode batch,`` spellings
are accepted, and fields are read by name so a reordered or extended line still parses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DECODE = re.compile(r"Decode batch[.,]\s*(?P<body>.*)$")
# "key: value" pairs separated by ", "; keys may contain spaces, '#' and "(token/s)".
_FIELD = re.compile(r"\s*(?P<key>[^:,]+?)\s*:\s*(?P<value>[^,]*)")


@dataclass(frozen=True)
class DecodeStat:
    """One "Decode batch" line. ``accept_len``/``accept_rate`` are None without speculation."""

    running_req: int
    accept_len: float | None
    accept_rate: float | None
    gen_throughput: float
    cuda_graph: bool | None
    token: int | None = None
    queue_req: int | None = None


def _num(fields: dict[str, str], key: str) -> float | None:
    raw = fields.get(key)
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


def _parse_fields(body: str) -> dict[str, str]:
    return {m["key"].strip(): m["value"].strip() for m in _FIELD.finditer(body)}


def parse_decode_lines(text: str) -> list[DecodeStat]:
    """Every "Decode batch" line of a log, in order. Lines missing the throughput are skipped."""
    out: list[DecodeStat] = []
    for line in text.splitlines():
        m = _DECODE.search(line)
        if not m:
            continue
        f = _parse_fields(m["body"])
        running = _num(f, "#running-req")
        thr = _num(f, "gen throughput (token/s)")
        if running is None or thr is None:
            continue
        cg = f.get("cuda graph")
        tok, queue = _num(f, "#token"), _num(f, "#queue-req")
        out.append(
            DecodeStat(
                running_req=int(running),
                accept_len=_num(f, "accept len"),
                accept_rate=_num(f, "accept rate"),
                gen_throughput=thr,
                cuda_graph=None if cg is None else cg == "True",
                token=None if tok is None else int(tok),
                queue_req=None if queue is None else int(queue),
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
