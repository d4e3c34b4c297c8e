"""The server log's cap, on the Python side: its size from the study, and the artifact.

On the host the detached wrapper caps each start's log (envfile.DETACH_WRAPPER): the first
``keep`` bytes, one ``[sweeper: N MB cut here]`` line, and at most the last ``2 * keep``
bytes (the wrapper rewrites the file only once the rest has doubled, to copy less). The
stored artifact is cut to exactly the head and the last ``keep`` bytes, its line counting
everything cut on both sides.
"""

from __future__ import annotations

import re

MB = 1_000_000
# SGLang prints a few kB per second at debug level; 4 MB each end keeps its start-up (the
# server args, the memory pool, the graph capture) and the last minutes before an end.
DEFAULT_KEEP_MB = 4.0
CUT_LINE = re.compile(r"\n\[sweeper: ([0-9.]+) MB cut here\]\n")


def keep_bytes(keep_mb: float) -> int:
    """``server.log_keep_mb`` in bytes; 0 keeps the whole log."""
    return int(keep_mb * MB)


def cut_line(cut_bytes: int) -> str:
    return f"\n[sweeper: {cut_bytes / MB:.1f} MB cut here]\n"


def cap_text(text: str, keep: int) -> str:
    """``text`` (a capped log as the host holds it) as its first ``keep`` characters, one
    cut line with the total cut, and its last ``keep`` characters. ``keep`` 0: unchanged."""
    if keep <= 0:
        return text
    found = CUT_LINE.search(text)
    if found is None:
        if len(text) <= 2 * keep:
            return text
        return text[:keep] + cut_line(len(text) - 2 * keep) + text[-keep:]
    head, tail = text[:found.start()], text[found.end():]
    cut = round(float(found.group(1)) * MB)
    if len(tail) > keep:
        cut, tail = cut + len(tail) - keep, tail[-keep:]
    return head + cut_line(cut) + tail
