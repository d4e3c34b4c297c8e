"""The study as ``sweeper dashboard`` shows it: the user's knobs, and the winner first.

Optuna stores what the sampler asked for: draft tokens as their *position* in the range a
(topk, steps) pair allows (``speculative-num-draft-tokens|position 0.92``, one parameter
across every branch: search/space.py). A user tuned draft tokens, not a position; the
dashboard's parameter tables, its slice and importance plots should speak of draft
tokens, as the report and ``status`` do. And its "Best Trial" card is Optuna's single
highest measurement, which one lucky run can win, where the sweeper's verdict pools every
run of a configuration (results/verdict.py).

So the dashboard reads the storage through this view: each trial's parameters are its
*effective* configuration (results/attrs.EFFECTIVE: the knobs as SGLang runs them, the
derived draft tokens of a topk-1 trial included), each knob a categorical over the values
measured; the best trial is the winner's best-measured trial. Nothing is written
differently: every write, and every read but those, goes to the storage unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Container
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from sweeper.results import attrs as A


def _natural(value: Any) -> tuple[int, float, str]:
    if isinstance(value, bool):
        return (1, 0.0, str(value))
    if isinstance(value, int | float):
        return (0, float(value), "")
    return (1, 0.0, str(value))


class KnobView(BaseStorage):
    """A read view of ``inner`` with the user's knobs as parameters (see the module)."""

    def __init__(self, inner: BaseStorage, objective: str = "mean") -> None:
        self._inner = inner
        self._objective = objective
        self._lock = threading.Lock()
        self._choices: dict[int, dict[str, tuple[Any, ...]]] = {}

    def __getattr__(self, name: str) -> Any:  # anything not overridden below
        return getattr(self._inner, name)

    # --- the knobs ------------------------------------------------------------------
    def _knob_choices(self, study_id: int, trials: list[FrozenTrial]) -> dict[str, tuple]:
        values: dict[str, set[Any]] = {}
        for t in trials:
            for k, v in (t.user_attrs.get(A.EFFECTIVE) or {}).items():
                values.setdefault(k, set()).add(v)
        choices = {k: tuple(sorted(vs, key=_natural)) for k, vs in values.items()}
        with self._lock:
            self._choices[study_id] = choices
        return choices

    def _as_knobs(self, t: FrozenTrial, choices: dict[str, tuple]) -> FrozenTrial:
        eff = t.user_attrs.get(A.EFFECTIVE)
        if not eff or any(k not in choices or v not in choices[k] for k, v in eff.items()):
            return t  # not begun yet, or the baseline (no knobs): as stored
        dists: dict[str, BaseDistribution] = {k: CategoricalDistribution(choices[k])
                                              for k in eff}
        return FrozenTrial(
            number=t.number, state=t.state, value=None, values=t.values,
            datetime_start=t.datetime_start, datetime_complete=t.datetime_complete,
            params=dict(eff), distributions=dists, user_attrs=t.user_attrs,
            system_attrs=t.system_attrs, intermediate_values=t.intermediate_values,
            trial_id=t._trial_id)  # noqa: SLF001 - Optuna's FrozenTrial has no public id

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        every = self._inner.get_all_trials(study_id, deepcopy=False)
        choices = self._knob_choices(study_id, every)
        shown = every if states is None else [t for t in every if t.state in states]
        return [self._as_knobs(t, choices) for t in shown]

    def get_trial(self, trial_id: int) -> FrozenTrial:
        # a trial does not name its study: the knob values of every study read so far (the
        # dashboard reads a study's trials before any of one trial's)
        with self._lock:
            merged: dict[str, tuple] = {}
            for choices in self._choices.values():
                for k, vs in choices.items():
                    merged[k] = tuple(sorted({*merged.get(k, ()), *vs}, key=_natural))
        return self._as_knobs(self._inner.get_trial(trial_id), merged)

    def get_trial_params(self, trial_id: int) -> dict[str, Any]:
        return self.get_trial(trial_id).params

    def get_trial_param(self, trial_id: int, param_name: str) -> float:
        t = self.get_trial(trial_id)
        return t.distributions[param_name].to_internal_repr(t.params[param_name])

    # --- the winner first ---------------------------------------------------------------
    def get_best_trial(self, study_id: int) -> FrozenTrial:
        """The verdict's winner, by its best-measured trial (the card's figure is that
        trial's; the study note and ``sweeper:winner`` give the pooled figure)."""
        from sweeper.results.verdict import verdict

        name = self._inner.get_study_name_from_id(study_id)
        study = optuna.load_study(study_name=name, storage=self._inner)
        trials = self.get_all_trials(study_id, deepcopy=False)
        best = verdict(study, self._objective, trials).best
        if best is not None:
            mine = [t for t in trials if t.number in best.trials and t.values]
            if mine:
                return max(mine, key=lambda t: t.values[0])
        return self._as_knobs(self._inner.get_best_trial(study_id),
                              self._choices.get(study_id, {}))

    # --- everything else: the storage itself ------------------------------------------
    def create_new_study(self, *a: Any, **k: Any) -> Any:
        return self._inner.create_new_study(*a, **k)

    def create_new_trial(self, *a: Any, **k: Any) -> Any:
        return self._inner.create_new_trial(*a, **k)

    def delete_study(self, *a: Any, **k: Any) -> Any:
        return self._inner.delete_study(*a, **k)

    def get_all_studies(self) -> Any:
        return self._inner.get_all_studies()

    def get_study_directions(self, *a: Any, **k: Any) -> Any:
        return self._inner.get_study_directions(*a, **k)

    def get_study_id_from_name(self, *a: Any, **k: Any) -> Any:
        return self._inner.get_study_id_from_name(*a, **k)

    def get_study_name_from_id(self, *a: Any, **k: Any) -> Any:
        return self._inner.get_study_name_from_id(*a, **k)

    def get_study_system_attrs(self, *a: Any, **k: Any) -> Any:
        return self._inner.get_study_system_attrs(*a, **k)

    def get_study_user_attrs(self, *a: Any, **k: Any) -> Any:
        return self._inner.get_study_user_attrs(*a, **k)

    def set_study_system_attr(self, *a: Any, **k: Any) -> Any:
        return self._inner.set_study_system_attr(*a, **k)

    def set_study_user_attr(self, *a: Any, **k: Any) -> Any:
        return self._inner.set_study_user_attr(*a, **k)

    def set_trial_intermediate_value(self, *a: Any, **k: Any) -> Any:
        return self._inner.set_trial_intermediate_value(*a, **k)

    def set_trial_param(self, *a: Any, **k: Any) -> Any:
        return self._inner.set_trial_param(*a, **k)

    def set_trial_state_values(self, *a: Any, **k: Any) -> Any:
        return self._inner.set_trial_state_values(*a, **k)

    def set_trial_system_attr(self, *a: Any, **k: Any) -> Any:
        return self._inner.set_trial_system_attr(*a, **k)

    def set_trial_user_attr(self, *a: Any, **k: Any) -> Any:
        return self._inner.set_trial_user_attr(*a, **k)

    def get_trial_id_from_study_id_trial_number(self, *a: Any, **k: Any) -> Any:
        return self._inner.get_trial_id_from_study_id_trial_number(*a, **k)

    def get_trial_number_from_id(self, *a: Any, **k: Any) -> Any:
        return self._inner.get_trial_number_from_id(*a, **k)

    def get_trial_system_attrs(self, *a: Any, **k: Any) -> Any:
        return self._inner.get_trial_system_attrs(*a, **k)

    def get_trial_user_attrs(self, *a: Any, **k: Any) -> Any:
        return self._inner.get_trial_user_attrs(*a, **k)

    def get_n_trials(self, *a: Any, **k: Any) -> Any:
        return self._inner.get_n_trials(*a, **k)

    def check_trial_is_updatable(self, *a: Any, **k: Any) -> Any:
        return self._inner.check_trial_is_updatable(*a, **k)

    def remove_session(self) -> None:
        self._inner.remove_session()
