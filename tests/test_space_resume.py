"""A study made with the per-branch draft-token parameters (before the shared position):
resuming it is refused with one clear line, reading its trials still works."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from sweeper.errors import InputError
from sweeper.results import attrs as A
from sweeper.results.storage import check_space, space_signature
from sweeper.search.space import SearchSpace
from sweeper.study import DRAFT, STEPS, TOPK, load_study

REPO = Path(__file__).resolve().parent.parent


def test_old_space_is_refused_with_a_clear_line(tmp_path: Path) -> None:
    sp = SearchSpace(load_study("demo", root=REPO / "studies"))
    url = f"sqlite:///{tmp_path / 'old.db'}"
    study = optuna.create_study(storage=url, study_name="demo", direction="maximize")
    new = json.loads(space_signature(sp.distributions()))
    old = {k: v for k, v in new.items() if not k.startswith(f"{DRAFT}|")}
    old[f"{DRAFT}|topk=2,steps=3"] = {"IntDistribution": [2, 7]}
    study.set_user_attr(A.SPACE, json.dumps(old, sort_keys=True))
    # its trials: per-branch names, still read as the configuration they ran
    study.add_trial(optuna.trial.create_trial(
        params={TOPK: 2, STEPS: 3, f"{DRAFT}|topk=2,steps=3": 6,
                "attn-dp-size": 4, "env.NCCL_ALGO": "Tree",
                "env.NCCL_PROTO": "LL"},
        distributions={TOPK: optuna.distributions.CategoricalDistribution([1, 2, 4]),
                       STEPS: optuna.distributions.IntDistribution(1, 6),
                       f"{DRAFT}|topk=2,steps=3": optuna.distributions.IntDistribution(2, 7),
                       "attn-dp-size":
                           optuna.distributions.CategoricalDistribution([1, 4]),
                       "env.NCCL_ALGO": optuna.distributions.CategoricalDistribution(
                           ["unset", "Ring", "Tree", "CollNetDirect"]),
                       "env.NCCL_PROTO": optuna.distributions.CategoricalDistribution(
                           ["unset", "LL", "LL128", "Simple"])},
        value=500.0))
    loaded = optuna.load_study(study_name="demo", storage=url)
    with pytest.raises(InputError) as err:
        check_space(loaded, space_signature(sp.distributions()), "studies/demo.yaml", url)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("studies/demo.yaml: ")
    assert "older sweeper" in msg and "--fresh" in msg and "new name" in msg
    assert sp.effective(loaded.trials[0].params)[DRAFT] == 6


def test_same_space_is_accepted(tmp_path: Path) -> None:
    sp = SearchSpace(load_study("demo", root=REPO / "studies"))
    url = f"sqlite:///{tmp_path / 'new.db'}"
    study = optuna.create_study(storage=url, study_name="demo", direction="maximize")
    sig = space_signature(sp.distributions())
    study.set_user_attr(A.SPACE, sig)
    check_space(study, sig, "studies/demo.yaml", url)
