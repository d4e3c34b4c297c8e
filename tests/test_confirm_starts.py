"""The confirm phase spans server starts, and every measurement of a configuration walks
on through the prompt order."""

from __future__ import annotations

from pathlib import Path

import optuna

import sweeper.results.verdict as R
from sweeper.results import attrs as A
from sweeper.run.confirm import confirm_plan
from sweeper.study import load_study


def test_every_sampler_confirms_on_two_starts_per_contender(make_study) -> None:  # noqa: ANN001
    for sampler in ("model", "tpe", "random"):
        spec = load_study(str(make_study(sweep={"sampler": sampler, "confirm_top": 3,
                                                "confirm_runs": 20})))
        plan = confirm_plan(spec)
        assert plan.rounds >= 2, sampler
        assert plan.restarts == plan.rounds * (plan.top + 1)
    spec = load_study(str(make_study(sweep={"sampler": "model", "confirm_top": 3})))
    assert confirm_plan(spec).top == 2  # racing narrowed the leaders: the top two
    spec = load_study(str(make_study(sweep={"sampler": "model", "confirm_top": 1})))
    assert confirm_plan(spec).top == 1  # never more than the study asks for
    assert confirm_plan(spec, skip=True).restarts == 0


def _add(study: optuna.Study, cid: str, runs: list[float], flagged: int = 0,
         repeat: bool = False) -> None:
    attrs = {A.CONFIG_ID: cid, A.ROLE: A.SAMPLER, A.RUNS: runs, A.RUNS_FLAGGED: flagged,
             A.EFFECTIVE: {}}
    if repeat:
        attrs[A.REPEAT_OF] = [0]
    study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs=attrs))


def test_the_next_benchmark_continues_where_the_last_one_stopped(tmp_path: Path) -> None:
    study = optuna.create_study(direction="maximize")
    assert R.next_prompt_round(study.get_trials(), "a") == 0
    _add(study, "a", [1.0] * 10)
    _add(study, "b", [1.0] * 30)
    _add(study, "a", [1.0] * 9, flagged=1)  # a flagged run still sent its prompts
    _add(study, "a", [1.0] * 10, repeat=True)  # resolved without a restart: sent nothing
    assert R.next_prompt_round(study.get_trials(), "a") == 20
    assert R.next_prompt_round(study.get_trials(), "b") == 30
