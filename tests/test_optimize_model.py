"""`sweeper optimize --sampler model` end to end on the simulator (a real process over real
HTTP, a real SQLite file): the model proposes after start-up and the summary says how
sure the pick is."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from sweeper.results import attrs as A

from .conftest import run_cli


def test_optimize_with_the_model_sampler(make_study, tmp_path: Path) -> None:
    study_file = make_study(sweep={"seed": 3, "n_startup_trials": 3})
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "6",
                   "--sampler", "model", "--no-confirm")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "How sure:" in proc.stdout
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}")
    done = [t for t in study.get_trials() if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(done) == 6
    seen: set[str] = set()
    for t in sorted(done, key=lambda t: t.number):
        cid = t.user_attrs[A.CONFIG_ID]
        assert cid not in seen or t.user_attrs.get(A.REPLICATE), "an unmarked repeat"
        seen.add(cid)
