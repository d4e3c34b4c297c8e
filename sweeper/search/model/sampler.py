"""``ModelSampler``: an Optuna sampler that proposes where predicted tok/s is best.

It is a plain ``BaseSampler``: storage, resume, the dashboard and constraints work as
with TPE, and everything it knows it reads from the study's trials at each proposal
(nothing is kept between processes; a resumed sweep predicts the same).

Per trial (``_plan``, once, on the first parameter asked):

1. start-up (fewer finished trials than ``n_startup``) or nothing measured yet: the inner
   TPE decides, as the ``tpe`` sampler would;
2. fit the model (fit.Predictor: acceptance, cycle time, factors, GP residual) and the
   feasibility classifier (feasible.Feasibility) on the trials;
3. score every candidate configuration of the space never measured, never failed and not
   skipped: expected improvement over the best predicted measured configuration, times
   the probability it serves (squared); a configuration likely to fail is never
   proposed; exploring is worth less as the budget runs out (a find at the very end
   cannot be checked);
4. racing (racing.py): when the leaders' intervals overlap by more than exploring is
   expected to gain, propose a measured configuration again, as a deliberate replicate.

The plan's parameters are handed out by ``sample_independent``; a parameter the plan
does not fix (outside the walk, or a value its distribution does not hold) goes to the
inner TPE.
``deliberate(number)`` tells the sweep that a trial is a racing replicate so it can mark
it (results/attrs.REPLICATE).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from sweeper.measure.dists import norm_cdf, norm_pdf
from sweeper.results import attrs as A
from sweeper.results.hosts import in_group
from sweeper.results.kind import ran_on_server
from sweeper.search.model.candidates import Candidate, enumerate_candidates
from sweeper.search.model.data import History, read_history
from sweeper.search.model.encode import Batch, Encoder
from sweeper.search.model.feasible import Feasibility
from sweeper.search.model.fit import Predictor
from sweeper.search.model.racing import Arm, RaceCall, race, study_spread
from sweeper.search.space import SearchSpace

MAX_P_FAIL = 0.35  # a restart on a failure is lost: propose only what likely serves
ENDGAME = 0.25  # the last quarter of the budget: exploring pays less and less


@dataclass(frozen=True)
class Plan:
    params: dict[str, Any]
    replicate_of: list[int] | None = None  # the trials of the configuration raced
    reason: str = ""


def _fits(dist: BaseDistribution, value: Any) -> bool:
    if isinstance(dist, CategoricalDistribution):
        return value in dist.choices
    if isinstance(dist, IntDistribution):
        return isinstance(value, int) and dist.low <= value <= dist.high
    if isinstance(dist, FloatDistribution):
        return isinstance(value, float) and dist.low <= value <= dist.high
    return False


def _finished(t: FrozenTrial) -> bool:
    """A trial that cost a restart (results/kind.py)."""
    return ran_on_server(t)


class ModelSampler(BaseSampler):
    def __init__(self, space: SearchSpace, inner: BaseSampler, n_startup: int,
                 seed: int | None = None) -> None:
        self._space = space
        self._inner = inner
        self._n_startup = n_startup
        self._rng = np.random.default_rng(seed)
        self._candidates: list[Candidate] | None = None
        self._batch: Batch | None = None
        self._enc: Encoder | None = None
        self._plans: dict[int, Plan | None] = {}
        self._sources: dict[int, str] = {}
        self._gains: dict[str, float] | None = None
        # the group of hosts (one kind of hardware) this sampler plans for, once known: its
        # model is fitted on that group's trials alone (speed is that hardware's physics;
        # results are compared only within a group). None: every trial.
        self._group: str | None = None

    @property
    def group(self) -> str | None:
        return self._group

    @group.setter
    def group(self, group: str | None) -> None:
        self._group = group
        if hasattr(self._inner, "group"):  # its start-up TPE learns from that group too
            self._inner.group = group

    # --- Optuna's interface -------------------------------------------------------------
    def reseed_rng(self) -> None:
        self._rng = np.random.default_rng()
        self._inner.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self._plan(study, trial) is None:
            return self._inner.infer_relative_search_space(study, trial)
        return {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        plan = self._plan(study, trial)
        if plan is not None and param_name in plan.params and \
                _fits(param_distribution, plan.params[param_name]):
            return plan.params[param_name]
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._inner.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._plans.pop(trial.number, None)
        self._inner.after_trial(study, trial, state, values)

    # --- what the sweep may ask -----------------------------------------------------------
    def deliberate(self, number: int) -> dict[str, Any] | None:
        """For a racing replicate: ``{"of": [trials], "reason": ...}``; else None."""
        plan = self._plans.get(number)
        if plan is None or plan.replicate_of is None:
            return None
        return {"of": plan.replicate_of, "reason": plan.reason}

    # --- the plan ---------------------------------------------------------------------------
    def _space_batch(self) -> tuple[list[Candidate], Batch, Encoder] | None:
        if self._candidates is None:
            cands = enumerate_candidates(self._space) or []
            enc = Encoder([c.effective for c in cands], self._space.spec.server.args)
            cands = [c for c in cands if enc.shape(c.effective) is not None]
            self._candidates, self._enc = cands, enc
            self._batch = Batch(enc, [c.effective for c in cands]) if cands else None
        if not self._candidates or self._batch is None or self._enc is None:
            return None
        return self._candidates, self._batch, self._enc

    def _plan(self, study: optuna.Study, trial: FrozenTrial) -> Plan | None:
        if trial.number not in self._plans:
            self._gains = None
            plan = self._make_plan(study)
            self._plans[trial.number] = plan
            if self._gains is not None:
                # what another restart is expected to buy, for the stop rule
                # (run/decide.stop_state reads it back from the study; Optuna's own
                # samplers keep their state in system attrs the same way)
                storage = study._storage  # noqa: SLF001
                storage.set_trial_system_attr(trial._trial_id, A.GAINS,  # noqa: SLF001
                                              self._gains)
            self._sources[trial.number] = "tpe" if plan is None else \
                "racing" if plan.replicate_of is not None else "model"
        return self._plans[trial.number]

    def proposed_by(self, number: int) -> str | None:
        """Who planned trial ``number``'s parameters in this process: "model", "racing",
        "tpe" (start-up or nothing to model), or None (not asked here). An enqueued trial
        (baseline, start_from, a retry) keeps its own parameters whatever the plan."""
        return self._sources.get(number)

    def _make_plan(self, study: optuna.Study) -> Plan | None:
        trials = in_group(study.get_trials(deepcopy=False), self.group)
        finished = sum(_finished(t) for t in trials)
        if finished < self._n_startup:
            return None
        space = self._space_batch()
        if space is None:
            return None
        cands, batch, enc = space
        history = read_history(trials)
        model = Predictor(enc, history)
        if not model.ready:
            return None
        feas = Feasibility(enc, history)
        ids = [c.config_id for c in cands]
        mean, sd = model.predict(batch)
        p_fail = feas.p_fail(batch, ids)
        measured = {o.config_id for o in model.obs}
        busy = {t.user_attrs.get(A.CONFIG_ID) for t in trials if t.state == TrialState.RUNNING}
        open_ = np.array([c not in measured and c not in history.skipped and c not in busy
                          for c in ids]) & (p_fail < MAX_P_FAIL)
        at_measured = np.array([c in measured for c in ids])
        incumbent = float(mean[at_measured].max()) if at_measured.any() else float(mean.max())
        z = (mean - incumbent) / np.maximum(sd, 1e-9)
        # squared: a failure costs a restart and teaches little about speed
        ei = sd * (z * norm_cdf(z) + norm_pdf(z)) * (1.0 - p_fail) ** 2
        ei = np.where(open_, ei, -1.0)
        explore = float(ei.max()) * self._endgame(study, finished) ** 2
        call = self._race(history, model)
        self._gains = {"new": max(float(ei.max()), 0.0),
                       "replicate": call.value if call is not None else 0.0}
        if call is not None and (call.value > explore or not open_.any()):
            obs = next(o for o in model.obs if o.config_id == call.key)
            params = dict(next(t for t in trials if t.number == obs.trials[0]).params)
            return Plan(params, list(obs.trials),
                        f"racing: intervals overlap with {call.against[:8]}, expected "
                        f"loss {call.value:.2%} > exploring {explore:.2%}")
        if not open_.any():
            return None
        best = np.flatnonzero(ei >= ei.max() - 1e-12)
        pick = cands[int(self._rng.choice(best))]
        return Plan(dict(pick.params))

    def _race(self, history: History, model: Predictor) -> RaceCall | None:
        every = [*history.observations, *([history.baseline] if history.baseline else [])]
        arms = [Arm(o.config_id, tuple(o.runs), tuple(map(tuple, o.starts))) for o in every]
        mean, sd = model.predict(Batch(self._enc_or_fail(), [o.effective for o in model.obs]))
        belief = {o.config_id: (float(m), float(s))
                  for o, m, s in zip(model.obs, mean, sd, strict=True)}
        call = race(arms, study_spread(arms), belief)
        if call is None or history.baseline is not None and \
                call.key == history.baseline.config_id:
            return None
        return call

    def _enc_or_fail(self) -> Encoder:
        assert self._enc is not None
        return self._enc

    @staticmethod
    def _endgame(study: optuna.Study, finished: int) -> float:
        """1 until the last quarter of the budget, then falling to 0 at its end."""
        budget = study.user_attrs.get(A.BUDGET) or {}
        target = budget.get("target")
        if not target:
            return 1.0
        left = max(int(target) - finished, 0)
        span = max(ENDGAME * (int(target) - int(budget.get("start", 0))), 1.0)
        return min(1.0, left / span)

