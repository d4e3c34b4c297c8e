"""Accept-length algebra: the measured window's accept length from the server's
cumulative-since-boot average, and per-position acceptance from an accept histogram."""

from __future__ import annotations

from collections.abc import Sequence


def window_accept_length(
    a_start: float | None,
    a_before: float | None,
    a_after: float | None,
    warmup_tokens: int,
    window_tokens: int,
) -> tuple[float | None, str]:
    """Estimate the measured window's accept length from a cumulative-since-boot average.

    The server reports A = tokens / verify steps since boot. We read it before the warm-up
    (``a_start``), before the window (``a_before``) and after it (``a_after``), and we know the
    tokens our warm-up and window generated. Unknowns: the tokens served before us (u) and the
    window's rate x, assumed also to be the warm-up's (same prompts, same server). Two
    readings give two linear equations in (u, 1/x). Returns (value, source) where source is
    "window" (estimated), "cumulative" (only the raw after-value was usable) or "none".
    """
    if a_after is None or a_after <= 0 or window_tokens <= 0:
        return None, "none"
    if a_before is None or a_before <= 0:
        return a_after, "window"  # nothing verified before the window: the average is ours
    if warmup_tokens <= 0:
        return a_after, "cumulative"
    tw, t1 = float(warmup_tokens), float(warmup_tokens + window_tokens)
    inv_start = 0.0 if a_start is None or a_start <= 0 else 1.0 / a_start
    # u * (1/a_before - 1/a_start) - tw * y = -tw / a_before
    # u * (1/a_after  - 1/a_start) - t1 * y = -t1 / a_after
    a11, a12, b1 = 1.0 / a_before - inv_start, -tw, -tw / a_before
    a21, a22, b2 = 1.0 / a_after - inv_start, -t1, -t1 / a_after
    if inv_start == 0.0:
        # no tokens before the warm-up: u = 0, and y follows from the two readings directly
        dv = t1 / a_after - tw / a_before
        return (window_tokens / dv, "window") if dv > 0 else (a_after, "cumulative")
    det = a11 * a22 - a12 * a21
    if abs(det) < 1e-12 * max(1.0, t1):
        return a_after, "cumulative"  # readings too close to tell history from window
    u = (b1 * a22 - a12 * b2) / det
    y = (a11 * b2 - a21 * b1) / det
    if u < 0 or y <= 0 or not 1.0 <= 1.0 / y <= 64.0:
        return a_after, "cumulative"
    return 1.0 / y, "window"


def acceptance_per_position(histogram: Sequence[int]) -> list[float | None]:
    """p_k = P(accepted >= k | accepted >= k - 1) for k = 1..len(H)-1.

    ``histogram[n]`` counts verify steps that accepted exactly n draft tokens. p_k is the
    chance the k-th draft token is accepted given the k-1 before it were: the per-depth
    acceptance a cost model of speculation needs. None where no step reached position k.
    """
    out: list[float | None] = []
    for k in range(1, len(histogram)):
        reached = sum(histogram[k - 1 :])
        out.append(sum(histogram[k:]) / reached if reached else None)
    return out

