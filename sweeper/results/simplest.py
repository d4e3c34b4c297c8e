"""When the leaders tie within the noise, the simplest of them: fewest settings away from
SGLang's defaults.

A configuration that sets fewer knobs is easier to keep (nothing to carry into the next
SGLang or NCCL version, less to explain), so between two that measure the same the
simpler one is the better recommendation. The rule, stated wherever it is applied:

- *tied*: the winner's speedup over it has a 95% interval that includes no difference,
  and its mean is within ``TIE_TOL`` of the winner's (noise alone could have ranked them
  either way, and it costs at most that much);
- *settings away from the defaults*: an ``env.*`` knob set to anything but ``unset`` (NCCL
  decides), a flag switched on, and a speculative number other than the study's first
  ``start_from`` entry (the study's statement of SGLang's usual default; without one, every
  speculative number counts).

This module only recommends; the winner stays the verdict's (results/verdict.py), which
is what `export` writes; `export --simplest` writes this one instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sweeper.results.verdict as R
from sweeper.measure.stats import Ratio

TIE_TOL = 0.01
RULE = (f"tied: the difference's 95% interval includes 0 and the means are within "
        f"{TIE_TOL:.0%}; simplest: the fewest settings away from SGLang's defaults (env "
        "unset, flags off, the study's start_from speculative numbers)")


@dataclass(frozen=True)
class Simplest:
    result: R.ConfigResult  # the simplest of those tied with the winner
    settings: int  # its settings away from the defaults
    winner_settings: int
    vs_winner: Ratio  # its mean over the winner's, with the interval


def away_from_defaults(effective: dict[str, Any], defaults: dict[str, Any]) -> int:
    """How many settings of ``effective`` differ from SGLang's defaults."""
    n = 0
    for key, value in effective.items():
        if key.startswith("env."):
            n += value != "unset"
        elif isinstance(value, bool):
            n += value
        elif key in defaults:
            n += value != defaults[key]
        else:
            n += 1
    return n


def simplest_tied(best: R.ConfigResult | None, candidates: Sequence[R.ConfigResult],
                  defaults: dict[str, Any]) -> Simplest | None:
    """The simplest configuration tied with ``best``, when it is simpler than ``best``
    (None otherwise: the winner is already the simplest of its ties)."""
    if best is None or best.is_baseline or len(best.runs) < 2:
        return None
    mine = away_from_defaults(best.effective, defaults)
    found: Simplest | None = None
    for r in candidates:
        if r.config_id == best.config_id or r.is_baseline or len(r.runs) < 2:
            continue
        ratio = R.speedup_over(r, best)  # two levels, as the winner was ranked
        if ratio is None:
            continue
        if math.isnan(ratio.low) or not (ratio.low <= 1.0 <= ratio.high) \
                or ratio.ratio < 1.0 - TIE_TOL:
            continue
        n = away_from_defaults(r.effective, defaults)
        if n < mine and (found is None or (n, -ratio.ratio) < (found.settings,
                                                               -found.vs_winner.ratio)):
            found = Simplest(r, n, mine, ratio)
    return found


def describe(s: Simplest) -> str:
    """One line for status, the summary, the report and the dashboard note."""
    pct = (s.vs_winner.ratio - 1) * 100
    lo, hi = (s.vs_winner.low - 1) * 100, (s.vs_winner.high - 1) * 100
    # the winner is the verdict's (a confirm phase decides on its own starts), so a tie can
    # read a little above it: then nothing is given up for the fewer settings
    why = "recommended if fewer settings matter more than that difference" if pct < 0 else \
        "recommended: as fast within the noise, with fewer settings"
    return (f"Simplest within the noise: {R.short_params(s.result.effective)} — "
            f"{s.settings} setting{'' if s.settings == 1 else 's'} away from SGLang's "
            f"defaults against the winner's {s.winner_settings}, {pct:+.1f}% [{lo:+.1f}, "
            f"{hi:+.1f}] against it: {why}; the export command with --simplest writes it "
            f"(rule — {RULE})")
