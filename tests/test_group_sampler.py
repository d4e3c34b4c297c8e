"""GroupSampler: Optuna's TPE fitted on one group of hardware's trials alone (results are
compared only within a group). Unit tests on an in-memory study."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import BaseDistribution, IntDistribution
from optuna.samplers import RandomSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState, create_trial

from sweeper.results import attrs as A
from sweeper.search.grouped import GroupSampler
from sweeper.search.sampler import make_sampler

DIST = {"x": IntDistribution(0, 9)}


class Seen(RandomSampler):
    """Records the trials each call was shown (what a sampler learns from)."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.seen: list[list[int]] = []

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        done = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))  # noqa: SLF001
        self.seen.append(sorted(t.number for t in done))
        return super().sample_independent(study, trial, param_name, param_distribution)


def _study(sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for i, group in enumerate(["h200", "a100", "h200", None, "a100"]):
        attrs = {A.GROUP: group} if group else {}
        study.add_trial(create_trial(params={"x": i}, distributions=DIST, value=float(i),
                                     user_attrs=attrs))
    return study


def test_the_sampler_learns_from_its_groups_trials_and_those_from_before_groups() -> None:
    inner = Seen()
    sampler = GroupSampler(inner)
    study = _study(sampler)
    sampler.group = "a100"
    study.ask(DIST)
    sampler.group = "h200"
    study.ask(DIST)
    sampler.group = None  # not known yet: every trial
    study.ask(DIST)
    assert inner.seen == [[1, 3, 4], [0, 2, 3], [0, 1, 2, 3, 4]]


def test_tpe_is_in_its_start_up_on_a_group_that_measured_less_than_it_needs() -> None:
    """The shipped TPE (multivariate, grouped, constant liar) through the view: with its
    start-up at 3 trials, it models a group with 3 finished trials of its own and is still
    in its random start-up on a group with 2, though the study holds 5."""
    sampler = make_sampler("tpe", 1, 3)
    assert isinstance(sampler, GroupSampler) and isinstance(sampler.inner, TPESampler)
    space = {"x": IntDistribution(0, 9), "y": IntDistribution(0, 9)}
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for i, group in enumerate(["h200", "a100", "h200", "a100", "h200"]):
        study.add_trial(create_trial(params={"x": i, "y": 9 - i}, distributions=space,
                                     value=float(i), user_attrs={A.GROUP: group}))
    modelled = {}
    for group in ("h200", "a100"):
        sampler.group = group
        trial = study.ask()
        frozen = study._storage.get_trial(trial._trial_id)  # noqa: SLF001
        inferred = sampler.infer_relative_search_space(study, frozen)
        assert set(inferred) == {"x", "y"}
        modelled[group] = sampler.sample_relative(study, frozen, inferred) != {}
    assert modelled == {"h200": True, "a100": False}
