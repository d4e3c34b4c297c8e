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
from collections.abc import Iterator
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


# --- failures -------------------------------------------------------------------------------

# Precedence, most specific first. The first kind with a deciding line wins; within a kind
# the earliest line wins, because later lines are consequences: other ranks' NCCL errors
# after one rank's OOM, "Scheduler hit an exception" wrappers, "Capture cuda graph failed"
# re-raising the OutOfMemoryError printed above it.
# - invalid_args: argparse errors and exceptions raised by SGLang's argument checks happen
#   before any GPU work, so nothing printed with them can be the cause instead.
# - oom: memory is the most specific resource failure, and the one the search must learn.
#   NCCL failing to allocate ("Cuda failure 'out of memory'") is an OOM too, and so is a
#   "Capture cuda graph failed" naming no cause: SGLang's own advice for it is memory
#   (--mem-fraction-static, --cuda-graph-max-bs). One naming another cause ("CUDA error: an
#   illegal memory access") is a crash.
# - port_in_use: a bind failure (HTTP port, torch.distributed's TCPStore, ZMQ); it surfaces
#   inside distributed init, so it must beat the NCCL/crash lines it drags along.
# - nccl: communicator errors; the generic scheduler traceback that follows is a wrapper.
# - crash: anything else that killed the server; decided by the first exception line.
FAILURE_KINDS = ("invalid_args", "oom", "port_in_use", "nccl", "crash")
# Not the configuration's fault: the caller retries the same parameters rather than
# teaching the search to avoid them (sweeper.errors.InfrastructureError, e.g. PortBusy).
INFRASTRUCTURE_KINDS = frozenset({"port_in_use"})

_ARGPARSE = re.compile(
    r"error: (?:unrecognized arguments|ambiguous option|argument -"
    r"|the following arguments are required)"
)
_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("invalid_args", _ARGPARSE),
    (
        "oom",
        re.compile(
            r"OutOfMemoryError|\b(?:CUDA|HIP|NPU|XPU) out of memory|CUDA error: out of memory"
            r"|Cuda failure 'out of memory'|Capture cuda graph failed[\s:.]*$"
            r"|Not enough memory\. Please try to increase --mem-fraction-static"
        ),
    ),
    ("port_in_use", re.compile(r"address already in use|EADDRINUSE|\[Errno 98\]", re.I)),
    (
        "nccl",
        re.compile(
            r"NCCL error|NCCL WARN|DistBackendError"
            r"|\bnccl(?:UnhandledCuda|System|Internal|Remote)Error\b|\bncclInvalid(?:Usage|Argument)\b"
        ),
    ),
    (
        "crash",
        re.compile(
            r"Scheduler hit an exception|Initialization failed|Capture cuda graph failed"
            r"|Traceback \(most recent call last\)|Received sigquit|scheduler is dead"
        ),
    ),
)
# The line Python prints for a raised exception: "RuntimeError: ...", "torch.OutOfMemoryError:
# ...", "Exception: Capture cuda graph failed: ...", a bare "AssertionError".
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt)(?::|$)"
)
_FRAME = re.compile(r'File "(?P<file>[^"]*)", line \d+')


@dataclass(frozen=True)
class Classified:
    """A failed server log's class and the line that decided it.

    ``kind`` is one of FAILURE_KINDS; ``line`` is that log line without its ``[time rank]``
    prefix, for error messages ("CUDA out of memory. Tried to allocate 2.00 GiB ...") instead
    of the log's last line ("Open an issue on GitHub ...").
    """

    kind: str
    line: str


def _statements(text: str) -> Iterator[tuple[str, str | None]]:
    """(line, file of the innermost traceback frame above it) for every line worth reading.

    Traceback frames and the source line Python prints under each are skipped: the source
    ``raise RuntimeError(f"NCCL error: {error_str}")`` is not the error, the line after it is.
    Frames are recognised by content, not indentation: issue pastes often lose the indent.
    """
    frame: str | None = None
    after_frame = False
    for raw in text.splitlines():
        line = strip_prefix(raw)
        if not line or not line.strip("^~ "):
            continue  # blank, or the ^^^^ markers under a source line
        m = _FRAME.search(line)
        if m:
            frame, after_frame = m["file"], True
            continue
        if after_frame:
            after_frame = False
            if not _EXCEPTION.match(line):  # a frame without source is followed by the error
                continue
        yield line, frame
        if _EXCEPTION.match(line) or "Traceback (most recent call last)" in line:
            frame = None  # the next traceback starts from scratch


def _from_arg_check(line: str, frame: str | None) -> bool:
    """An exception raised by SGLang's own argument validation (server_args.py, or the
    arg_groups/ hooks it was split into). A bare AssertionError with no frame in sight is
    taken as one too: SGLang validates speculative flags with asserts, and a log tail can
    start below the traceback's frames."""
    if frame is not None:
        # also the --config merger (utils/server_args_config_parser.py: "Unsupported config
        # option ...") and the algorithm name check (speculative/spec_info.py: "Unknown
        # speculative algorithm name: ..."), both raised while the arguments are read
        return (frame.endswith(("server_args.py", "server_args_config_parser.py",
                                "speculative/spec_info.py")) or "/arg_groups/" in frame)
    return line.startswith("AssertionError")


def classify_failure_line(log_text: str) -> Classified | None:
    """The failure class of a dead server's log and the line that decided it, or None.

    Kinds, in precedence order: "invalid_args", "oom", "port_in_use", "nccl", "crash"
    (see FAILURE_KINDS for why that order). All but "port_in_use" are
    ``sweeper.errors.CONFIG_FAILURE_KINDS`` names; "port_in_use" is in INFRASTRUCTURE_KINDS:
    another process holds a port, which says nothing about the configuration, so the caller
    raises an InfrastructureError (PortBusy) and retries rather than pruning the trial.
    "hang" and "startup_timeout" are decided by the server watchdog, not by the log text.
    """
    first: dict[str, str] = {}
    first_exception: str | None = None
    for line, frame in _statements(log_text):
        is_exception = bool(_EXCEPTION.match(line))
        if is_exception and "invalid_args" not in first and _from_arg_check(line, frame):
            first["invalid_args"] = line
        for kind, marker in _MARKERS:
            if kind not in first and marker.search(line):
                first[kind] = line
        if is_exception and first_exception is None:
            first_exception = line
    for kind in FAILURE_KINDS[:-1]:
        if kind in first:
            return Classified(kind, first[kind])
    # A crash is told by its root exception, not by the wrapper announcing it.
    root = first_exception or first.get("crash")
    return Classified("crash", root) if root else None


def classify_failure(log_text: str) -> str | None:
    """The failure class of a dead server's log, or None: ``classify_failure_line(...).kind``."""
    found = classify_failure_line(log_text)
    return found.kind if found else None


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
