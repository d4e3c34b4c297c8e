"""The model's evidence compared prompt by prompt (search/model/data.pair_prompts), and the
racing leader on two levels (search/model/racing.Arm.level)."""

from __future__ import annotations

import math
import random

import optuna

from sweeper.results import attrs as A
from sweeper.search.model.data import read_history
from sweeper.search.model.racing import Arm, race

_RNG = random.Random(7)
# 24 prompt positions; the first 10 (the ones every short trial covers) are hard
PROMPT = [math.exp(-0.10 if p < 10 else 0.06) * math.exp(_RNG.gauss(0, 0.01))
          for p in range(24)]


def _add(study: optuna.Study, cid: str, mean: float, positions: list[int], seed: int,
         record: bool = True) -> None:
    rng = random.Random(seed)
    runs = [mean * PROMPT[p] * math.exp(rng.gauss(0, 0.01)) for p in positions]
    ua = {A.CONFIG_ID: cid, A.ROLE: A.SAMPLER, A.RUNS: runs, A.EFFECTIVE: {"k": cid},
          A.STARTUP: 30.0}
    if record:
        ua[A.RUN_POSITIONS] = positions
    study.add_trial(optuna.trial.create_trial(value=sum(runs) / len(runs), user_attrs=ua))


def _study(record: bool = True) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    # "long" is truly 3% slower but was measured longer, over the easy prompts too;
    # "short" saw only the hard first ten; "other" as well, a fixed reference
    _add(study, "short", 100.0, list(range(10)), 1, record)
    _add(study, "long", 97.0, [p % 24 for p in range(48)], 2, record)
    _add(study, "other", 90.0, list(range(10)), 3, record)
    return study


def _means(record: bool) -> dict[str, float]:
    h = read_history(_study(record).get_trials(deepcopy=False))
    return {o.config_id: o.mean for o in h.observations}


def test_the_model_compares_configurations_prompt_by_prompt() -> None:
    pooled = _means(record=False)
    # pooled as measured, the configuration measured longer on easier prompts leads
    assert pooled["long"] > pooled["short"]
    paired = _means(record=True)
    # prompt by prompt the truly faster one leads, by about its true 3%
    assert paired["short"] > paired["long"]
    assert math.log(paired["short"] / paired["long"]) == \
        __import__("pytest").approx(math.log(100 / 97), abs=0.012)
    h = read_history(_study().get_trials(deepcopy=False))
    long_ = next(o for o in h.observations if o.config_id == "long")
    assert sum(map(len, long_.starts)) == len(long_.runs) == 48


def test_racing_leader_weighs_a_long_lucky_start_as_one_start() -> None:
    # "lucky": 200 runs on a start 4% fast, then a fresh start 10 runs at its true 100;
    # "steady": two starts at its true 102
    rng = random.Random(3)

    def runs(mean: float, n: int) -> tuple[float, ...]:
        return tuple(mean * math.exp(rng.gauss(0, 0.02)) for _ in range(n))

    lucky = Arm("lucky", (), (runs(104.0, 200), runs(100.0, 10)))
    lucky = Arm("lucky", sum(lucky.starts, ()), lucky.starts)
    steady_starts = (runs(102.0, 10), runs(102.0, 10))
    steady = Arm("steady", sum(steady_starts, ()), steady_starts)
    assert lucky.mean > steady.mean  # pooled, the lucky start's 200 runs outweigh
    call = race([lucky, steady], 0.02, tau2=0.02**2)
    assert call is not None
    # the leader raced against is the two-level one
    assert {call.key, call.against} == {"lucky", "steady"}
    assert steady.level(0.02, 0.02**2) > lucky.level(0.02, 0.02**2)
