"""Why the winner wins: tok/s = tokens per verify cycle / cycle time.

From what was measured (accept length = tokens per verify cycle, and tok/s), the cycle
time follows: cycle = accept length / tok/s. Comparing the winner with the study's
start_from default and with no speculation shows whether it wins by accepting more
tokens per cycle or by spending less time per cycle — the reasoning the seed campaign did
by hand ("2 steps instead of 5: accept length 2.3 -> 2.0, cycle 28 ms -> 21 ms").
"""

from __future__ import annotations

from typing import Any

import sweeper.results.verdict as R
from sweeper.results.labels import changes


def _row(name: str, r: R.ConfigResult) -> dict[str, Any]:
    tok_s = r.stats.mean
    accept = 1.0 if r.is_baseline else r.accept_length
    cycle = accept / tok_s * 1000.0 if accept and tok_s else None
    return {"": name, "configuration": R.short_params(r.effective), "tok/s": round(tok_s, 1),
            "tokens per verify cycle": round(accept, 2) if accept else None,
            "cycle ms": round(cycle, 1) if cycle else None}




def why_it_wins(best: R.ConfigResult | None, default: R.ConfigResult | None,
                base: R.ConfigResult | None) -> dict[str, Any] | None:
    """One table (winner, default, baseline) and one sentence; None without a winner."""
    if best is None:
        return None
    rows = [_row("winner", best)]
    if default is not None and default.config_id != best.config_id:
        rows.append(_row("start_from default", default))
    if base is not None and base.config_id != best.config_id:
        rows.append(_row("no speculation", base))
    w = rows[0]
    if best.is_baseline:
        sentence = "No speculative configuration beat the server without speculation."
    elif len(rows) > 1 and w["cycle ms"] and rows[1]["cycle ms"]:
        other = rows[1]
        ref = default if other[""] == "start_from default" else base
        assert ref is not None
        gain = (w["tok/s"] / other["tok/s"] - 1) * 100 if other["tok/s"] else 0.0
        sentence = (f"{changes(best.effective, ref.effective)}: tokens per verify cycle "
                    f"{other['tokens per verify cycle']} -> {w['tokens per verify cycle']}, "
                    f"cycle {other['cycle ms']} ms -> {w['cycle ms']} ms, so "
                    f"{other['tok/s']} -> {w['tok/s']} tok/s ({gain:+.1f}%) against the "
                    f"{other[''].replace('start_from ', '')}.")
    else:
        sentence = (f"The winner verifies {w['tokens per verify cycle']} tokens per cycle in "
                    f"{w['cycle ms']} ms.")
    return {"sentence": sentence + " Cycle time = accept length / tok/s (prefill included).",
            "rows": rows}
