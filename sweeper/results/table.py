"""The trials as one pandas table: a row per trial, a column per knob.

``sweeper status --csv/--json`` and the report's ``trials.csv`` are this table. Columns:

- ``number``, ``state`` (complete, pruned, failed, running, queued), ``role`` (baseline,
  start_from, sampler, confirm), ``confirm`` (a confirm-phase measurement), ``skipped``
  (predicted to fail, no restart spent);
- one column per knob of the study's space, with SGLang's flag names (``env.NCCL_ALGO``
  for environment variables) and the *effective* value (the derived draft tokens of a
  topk-1 trial included; empty for the baseline, which runs without speculation);
- ``failure`` (its class) and ``failure_message``;
- ``runs`` (counted runs), ``tok_s_mean``, ``tok_s_ci_low``, ``tok_s_ci_high``,
  ``accept_length``, ``startup_s``, ``duration_s``, ``host``, ``config_id``;
- a study of several concurrency levels: ``tok_s_per_request@C`` and ``tok_s_total@C``
  per level C (the tok/s columns above are then the objective's per-run series).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from optuna.trial import FrozenTrial, TrialState

from sweeper.measure.stats import summarize
from sweeper.results import attrs as A
from sweeper.results.kind import TrialKind, kind_of

if TYPE_CHECKING:
    import pandas as pd

STATES = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned",
          TrialState.FAIL: "failed", TrialState.RUNNING: "running",
          TrialState.WAITING: "queued"}
FIXED_COLUMNS = ["number", "state", "role", "confirm", "skipped"]
FIGURE_COLUMNS = ["failure", "failure_message", "runs", "tok_s_mean", "tok_s_ci_low",
                  "tok_s_ci_high", "accept_length", "startup_s", "duration_s", "host",
                  "config_id"]


def _nan(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def trial_row(t: FrozenTrial, knobs: Sequence[str]) -> dict[str, Any]:
    ua = t.user_attrs
    eff = ua.get(A.EFFECTIVE) or {}
    runs = [float(v) for v in ua.get(A.RUNS) or []]
    st = summarize(runs) if runs else None
    row: dict[str, Any] = {
        "number": t.number, "state": STATES.get(t.state, t.state.name.lower()),
        "role": ua.get(A.ROLE, A.SAMPLER), "confirm": kind_of(t) == TrialKind.CONFIRM,
        "skipped": kind_of(t) == TrialKind.SKIPPED,
    }
    for knob in knobs:
        row[knob] = eff.get(knob)
    row.update({
        "failure": ua.get(A.FAILURE), "failure_message": ua.get(A.FAILURE_MSG),
        "runs": len(runs),
        "tok_s_mean": st.mean if st else None,
        "tok_s_ci_low": _nan(st.ci_low) if st else None,
        "tok_s_ci_high": _nan(st.ci_high) if st else None,
        "accept_length": ua.get(A.ACCEPT), "startup_s": ua.get(A.STARTUP),
        "duration_s": t.duration.total_seconds() if t.duration else None,
        "host": (ua.get(A.SERVER) or {}).get("host"), "config_id": ua.get(A.CONFIG_ID),
    })
    for level in sorted(int(c) for c in ua.get(A.LEVELS) or {}):
        row[A.per_request_key(level)] = ua.get(A.per_request_key(level))
        row[A.total_key(level)] = ua.get(A.total_key(level))
    return row


def trials_frame(trials: Sequence[FrozenTrial], knobs: Sequence[str]) -> pd.DataFrame:
    """One row per trial, in trial order; ``knobs`` are the study's space's names."""
    rows = [trial_row(t, knobs) for t in trials]
    levels = sorted({int(k.rsplit("@", 1)[1]) for r in rows for k in r if "@" in k})
    columns = [*FIXED_COLUMNS, *knobs, *FIGURE_COLUMNS,
               *[key(c) for c in levels for key in (A.per_request_key, A.total_key)]]
    import pandas as pd  # here: ~0.2 s of import that a sweep, which never tabulates, spares

    frame = pd.DataFrame(rows, columns=columns)
    for col in knobs:
        values = [r[col] for r in rows if r[col] is not None]
        if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            frame[col] = frame[col].astype("Int64")  # 5, not 5.0, beside empty cells
    return frame
