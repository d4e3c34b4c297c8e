"""How a configuration is named for people, in one place: the long label of tables and
the live output, the compact one of narrow terminals, and what changed between two.

One table of knob names serves all three, and the baseline has one name.
"""

from __future__ import annotations

from typing import Any

BASELINE_LABEL = "baseline (no speculation)"

# knob -> (table name, compact prefix, words in a sentence), speculative numbers first
KNOBS: dict[str, tuple[str, str, str]] = {
    "speculative-num-steps": ("steps", "s", "steps"),
    "speculative-eagle-topk": ("topk", "k", "topk"),
    "speculative-num-draft-tokens": ("draft", "d", "draft tokens"),
    "speculative-draft-tp-size": ("draft-tp", "tp", "draft TP"),
    "attn-dp-size": ("attn-dp", "dp", "attention DP"),
}


def _order(key: str) -> tuple[bool, int, str]:
    return key not in KNOBS, list(KNOBS).index(key) if key in KNOBS else 0, key


def short_params(effective: dict[str, Any]) -> str:
    """``steps=3 topk=2 draft=7 draft-tp=4 NCCL_ALGO=Tree``: speculative numbers first."""
    if not effective:
        return BASELINE_LABEL
    return " ".join(f"{KNOBS[k][0] if k in KNOBS else k.removeprefix('env.')}={effective[k]}"
                    for k in sorted(effective, key=_order))


def compact_params(effective: dict[str, Any], same: frozenset[str] = frozenset()) -> str:
    """``s3 k2 d7 tp4 ALGO=Tree PROTO=LL``: short names, NCCL_ prefixes and unset values
    left out (unset is NCCL's own default); ``same``: knobs every row shown shares, left
    out too (a line above the table names them once)."""
    if not effective:
        return "baseline (no spec.)"
    return " ".join(compact_parts({k: v for k, v in effective.items() if k not in same}))


def compact_parts(effective: dict[str, Any]) -> list[str]:
    """The compact label's words, one per knob set."""
    parts = [f"{KNOBS[k][1]}{effective[k]}" for k in KNOBS if k in effective]
    for key, value in effective.items():
        if key in KNOBS or value == "unset":
            continue
        parts.append(f"{key.removeprefix('env.').removeprefix('NCCL_')}={value}")
    return parts


def changes(a: dict[str, Any], b: dict[str, Any]) -> str:
    """``steps 2 instead of 5, draft TP 1 instead of 8``"""
    parts = []
    for key in dict.fromkeys([*a, *b]):
        if a.get(key) != b.get(key):
            name = KNOBS[key][2] if key in KNOBS else key.removeprefix("env.")
            parts.append(f"{name} {a.get(key, 'unset')} instead of {b.get(key, 'unset')}")
    return ", ".join(parts) or "the same configuration"
