"""A sampler that learns from one group of hardware's trials only.

Optuna's samplers read the whole study. On a study swept on several kinds of hardware (a
group each), a TPE fitted on every group's trials would propose on an A100 what was fast
on an H200: results are compared only within a group. ``GroupSampler`` hands its inner
sampler a view of the study whose trials are its group's (and those from before groups
existed); everything else (storage, directions, attributes) is the study's own. Optuna
has no hook for this (a sampler receives the study, not a trial list), hence the view.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from sweeper.results.groups import in_group


class _GroupView:
    """``study`` as one group sees it: its trials that group's, all else the study's."""

    def __init__(self, study: optuna.Study, group: str) -> None:
        self._study = study
        self._group = group

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        trials = self._study._get_trials(deepcopy=deepcopy, states=states,  # noqa: SLF001
                                         use_cache=use_cache)
        return in_group(trials, self._group)

    def get_trials(self, deepcopy: bool = True,
                   states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return in_group(self._study.get_trials(deepcopy=deepcopy, states=states), self._group)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


class GroupSampler(BaseSampler):
    def __init__(self, inner: BaseSampler) -> None:
        self.inner = inner
        self.group: str | None = None  # set once the host's group is known; None: all

    def _view(self, study: optuna.Study) -> Any:
        return study if not self.group else _GroupView(study, self.group)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.inner.infer_relative_search_space(self._view(study), trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self.inner.sample_relative(self._view(study), trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.inner.sample_independent(self._view(study), trial, param_name,
                                             param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(self._view(study), trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.inner.after_trial(self._view(study), trial, state, values)
