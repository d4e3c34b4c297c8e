"""The confirm phase spans server starts, and every measurement of a configuration walks
on through the prompt order."""

from __future__ import annotations

from pathlib import Path

import optuna

import sweeper.results.verdict as R
from sweeper.results import attrs as A
from sweeper.run.confirm import Candidate, _paired_starts, confirm_plan
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


def _measured(study: optuna.Study, cid: str, positions: list[int], speed: float,
              prompt: dict[int, float], role: str = A.SAMPLER) -> int:
    """A trial of ``cid`` on a fresh start: one run per prompt position, ``speed`` times
    that prompt's factor."""
    attrs = {A.CONFIG_ID: cid, A.ROLE: role, A.EFFECTIVE: {"x": cid}, A.STARTUP: 60.0,
             A.RUNS: [speed * prompt[p] for p in positions], A.RUN_POSITIONS: positions}
    study.add_trial(optuna.trial.create_trial(value=speed, user_attrs=attrs))
    return study.get_trials(deepcopy=False)[-1].number


def test_fresh_starts_on_different_prompts_are_compared_prompt_by_prompt() -> None:
    # Positions 0-3 are easy prompts (+3%), 4-7 hard ones (-3%). In the sweep twenty
    # configurations ran all eight; in the confirm phase "fast" (truly 2% faster) happened
    # to run on the hard half and "slow" on the easy half, as a visit continues each
    # configuration's own prompt order.
    prompt = {p: 1.03 if p < 4 else 0.97 for p in range(8)}
    study = optuna.create_study(direction="maximize")
    for cid, speed in (("fast", 102.0), ("slow", 100.0)):
        _measured(study, cid, list(range(8)), speed, prompt)
    for i in range(18):
        _measured(study, f"other{i}", list(range(8)), 80.0 + i, prompt)
    _measured(study, "base", list(range(8)), 90.0, {p: 1.0 for p in range(8)}, A.BASELINE)
    results = R.config_results(study.get_trials())
    by_id = {r.config_id: r for r in results}
    cands = [Candidate(by_id[cid], None, {}, {}) for cid in ("fast", "slow")]  # type: ignore[arg-type]
    for cand, positions, speed in ((cands[0], [4, 5, 6, 7], 102.0),
                                   (cands[1], [0, 1, 2, 3], 100.0)):
        n = _measured(study, cand.result.config_id, positions, speed, prompt, A.CONFIRM_ROLE)
        runs = [speed * prompt[p] for p in positions]
        cand.trials.append(n)
        cand.runs.extend(runs)
        cand.starts.append(runs)
    assert cands[0].stats.mean < cands[1].stats.mean  # raw: the prompts decide

    paired = _paired_starts(results, cands, study.get_trials())

    def mean(starts: list[list[float]]) -> float:
        return sum(sum(s) for s in starts) / sum(len(s) for s in starts)

    fresh_fast, fresh_slow = mean(paired["fast"][1]), mean(paired["slow"][1])
    assert fresh_fast > fresh_slow  # prompt by prompt: the configuration decides
    assert abs(fresh_fast / fresh_slow - 1.02) < 0.01
    # the sweep's starts are adjusted with the same effects, and the baseline is not
    assert abs(mean(paired["fast"][0]) / mean(paired["slow"][0]) - 1.02) < 0.005
    assert paired["base"][0] == [[90.0] * 8]


def _node(startup: float, run_sd: float, start_sd: float, configs: int = 60,
          starts: int = 4, runs: int = 20) -> optuna.Study:
    """A study of ``configs`` configurations near 100 tok/s, each on ``starts`` server
    starts of ``runs`` runs: each start's speed off by ``start_sd``, each run by
    ``run_sd`` (seeded)."""
    import random

    rng = random.Random(3)
    study = optuna.create_study(direction="maximize")
    for c in range(configs):
        speed = 100.0 * (1 + 0.02 * rng.random())
        for _ in range(starts):
            fast = speed * (1 + rng.gauss(0, start_sd))
            attrs = {A.CONFIG_ID: f"c{c}", A.ROLE: A.SAMPLER, A.EFFECTIVE: {"x": c},
                     A.STARTUP: startup, A.RUNS: [fast * (1 + rng.gauss(0, run_sd))
                                                  for _ in range(runs)]}
            study.add_trial(optuna.trial.create_trial(value=fast, user_attrs=attrs))
    return study


def test_a_confirm_visit_is_as_long_as_a_start_is_worth() -> None:
    import math

    from sweeper.run.confirm_runs import visit_runs
    from sweeper.study.sections import BenchSpec

    bench = BenchSpec(runs=10, max_runs=200, max_tokens=500)  # a run: ~5 s at 100 tok/s
    slow = _node(startup=480.0, run_sd=0.06, start_sd=0.015).get_trials(deepcopy=False)
    # Cochran's two-stage optimum on the true figures: sqrt(restart/run x sigma^2/tau^2)
    truth = math.sqrt(480.0 / 5.0 * (0.06 / 0.015) ** 2)
    v = visit_runs(slow, bench, runs=20, rounds=2)
    assert 0.7 * truth <= v.runs <= 1.4 * truth, (v.runs, truth)
    assert v.worth == v.runs and "a start is worth" in v.why() and "8.0 min" in v.why()
    assert "on the simulated server" in v.why("on the simulated server")
    # the study's count when the user asked for exactly that, or a restart is cheap
    assert visit_runs(slow, bench, runs=20, rounds=2, exact=True).runs == 10
    fast = _node(startup=20.0, run_sd=0.06, start_sd=0.015).get_trials(deepcopy=False)
    cheap = visit_runs(fast, bench, runs=20, rounds=2)
    assert cheap.runs == 10 and cheap.why() == ""
    # never past the study's max_runs, and the study's own count when it asks for more
    capped = BenchSpec(runs=10, max_runs=15, max_tokens=500)
    assert visit_runs(slow, capped, runs=20, rounds=2).runs == 15
    assert visit_runs(slow, bench, runs=400, rounds=2).runs == 200
