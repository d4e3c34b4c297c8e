"""`sweeper status` piped at 80 columns: what tells two configurations apart and what
explains a row (the note: start_from, a failure class, why a trial was handed back) wraps
at spaces, never cut inside a word nor ellipsized. Real parts: the CLI, SQLite."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import IntDistribution
from optuna.trial import TrialState

from sweeper.results import attrs as A
from sweeper.study import load_study

from .conftest import run_cli

STEPS, TOPK, DRAFT = ("speculative-num-steps", "speculative-eagle-topk",
                      "speculative-num-draft-tokens")


def _config(steps: int, algo: str, proto: str) -> dict[str, Any]:
    return {STEPS: steps, TOPK: 4, DRAFT: 2 * steps + 1, "env.NCCL_ALGO": algo,
            "env.NCCL_PROTO": proto}


# (state, effective configuration, attributes, the words its note must show whole)
ROWS: list[tuple[TrialState, dict[str, Any] | None, dict[str, Any], list[str]]] = [
    (TrialState.COMPLETE, {}, {A.ROLE: A.BASELINE}, []),
    (TrialState.COMPLETE, _config(3, "Ring", "LL128"), {A.ROLE: A.START_FROM}, ["start_from"]),
    (TrialState.FAIL, _config(5, "CollNetDirect", "Simple"), {A.FAILURE: "interrupted"},
     ["interrupted"]),
    (TrialState.PRUNED, _config(6, "CollNetDirect", "LL128"),
     {A.FAILURE: "invalid_args", A.SKIPPED: True}, ["invalid_args", "(skipped:", "known)"]),
    (TrialState.COMPLETE, _config(3, "Ring", "LL128"), {A.REPEAT_OF: [1]},
     ["repeat", "of", "1,", "no", "restart"]),
    (TrialState.FAIL, _config(4, "Tree", "LL"),
     {A.BACKED_OFF: "trial 3 is measuring the same configuration"},
     ["handed", "back:", "trial", "3", "is", "measuring", "the", "same", "configuration"]),
    (TrialState.PRUNED, _config(2, "Tree", "Simple"), {A.FAILURE: "server_error"},
     ["server_error"]),
]


def test_status_at_80_columns_cuts_no_word(make_study, tmp_path: Path) -> None:  # noqa: ANN001
    spec = load_study(str(make_study()))
    study = optuna.create_study(study_name="t", storage=spec.storage, direction="maximize")
    for i, (state, eff, attrs, _) in enumerate(ROWS):
        runs = [500.0 + i, 502.0 + i] if state == TrialState.COMPLETE else []
        study.add_trial(optuna.trial.create_trial(
            state=state, params={"x": i}, distributions={"x": IntDistribution(0, 9)},
            value=runs[0] if runs else None,
            user_attrs={A.CONFIG_ID: f"c{i}", A.EFFECTIVE: eff, A.RUNS: runs, **attrs}))
    proc = run_cli("status", "--study", str(spec.path), env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) <= 80, proc.stdout
    assert "…" not in proc.stdout, proc.stdout
    # a row and its continuation lines: the table's lines after its rule, up to the counts
    body = lines[next(i for i, ln in enumerate(lines) if ln.startswith("─")) + 1:]
    blocks: dict[int, list[str]] = {}
    for line in body[:next(i for i, ln in enumerate(body) if "; storage " in ln)]:
        row = re.match(r"\s*(\d+)   ", line)  # the trial number, then the column gap
        if row:
            blocks[int(row.group(1))] = [line]
        else:
            blocks[max(blocks)].append(line)
    for i, (_, eff, _, note) in enumerate(ROWS):
        words = " ".join(blocks[i]).split()
        for word in note:
            assert word in words, f"row {i}: {word!r} cut\n{proc.stdout}"
        if eff:
            for knob in (f"ALGO={eff['env.NCCL_ALGO']}", f"PROTO={eff['env.NCCL_PROTO']}"):
                assert knob in words, f"row {i}: {knob!r} cut\n{proc.stdout}"
