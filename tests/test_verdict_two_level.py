"""The verdict on two levels: starts, prompt positions, and what neither may change."""

from __future__ import annotations

import math
import random

import optuna
import pytest

import sweeper.results.verdict as R
from sweeper.measure.stats import (
    prompt_effects,
    shared_prompt_effects,
    summarize,
    without_prompt_effects,
)
from sweeper.results import attrs as A

_RNG = random.Random(4)
PROMPT = [math.exp(_RNG.gauss(0, 0.08)) for _ in range(24)]  # prompts ~8% apart


def _runs(mean: float, speed: float, positions: list[int], seed: int) -> list[float]:
    rng = random.Random(seed)
    return [mean * speed * PROMPT[p] * math.exp(rng.gauss(0, 0.02)) for p in positions]


def _add(study: optuna.Study, cid: str, runs: list[float], positions: list[int] | None,
         role: str = A.SAMPLER, startup: float = 30.0) -> None:
    attrs = {A.CONFIG_ID: cid, A.ROLE: role, A.RUNS: runs, A.EFFECTIVE: {"k": cid},
             A.STARTUP: startup}
    if positions is not None:
        attrs[A.RUN_POSITIONS] = positions
    study.add_trial(optuna.trial.create_trial(value=sum(runs) / len(runs),
                                              user_attrs=attrs))


def _study(shuffle: int | None = None) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    plan = [("base", 60.0, [1.0], 10, A.BASELINE), ("a", 100.0, [1.0, 1.03], 10, A.SAMPLER),
            ("b", 97.0, [0.99], 40, A.SAMPLER), ("c", 90.0, [1.0], 10, A.SAMPLER)]
    seed = 0
    for cid, mean, speeds, n, role in plan:
        for speed in speeds:
            pos = [i % 24 for i in range(n)]
            runs = _runs(mean, speed, pos, seed)
            seed += 1
            pairs = list(zip(pos, runs, strict=True))
            if shuffle is not None:
                random.Random(shuffle + seed).shuffle(pairs)
            _add(study, cid, [v for _, v in pairs], [p for p, _ in pairs], role)
    return study


def test_the_pick_does_not_depend_on_the_order_the_prompts_came_in() -> None:
    ref = R.verdict(_study())
    for k in range(3):
        v = R.verdict(_study(shuffle=k))
        assert v.best is not None and ref.best is not None
        assert v.best.config_id == ref.best.config_id == "a"
        assert v.sure == pytest.approx(ref.sure, rel=1e-9)
        assert v.best.stats.ci_low == pytest.approx(ref.best.stats.ci_low, rel=1e-9)


def test_the_winners_interval_and_speedup_include_the_start_variance() -> None:
    study = optuna.create_study(direction="maximize")
    flat = list(range(1))  # no prompt positions: the starts alone
    _add(study, "base", _runs(60.0, 1.0, flat * 100, 1), None, A.BASELINE)
    for k, speed in enumerate((1.0, 1.04)):  # two starts 4% apart, 100 runs each
        _add(study, "a", [100.0 * speed * math.exp(random.Random(k).gauss(0, 0.01))
                          for _ in range(100)], None)
    _add(study, "b", _runs(90.0, 1.0, flat * 100, 2), None)
    v = R.verdict(study)
    assert v.best is not None and v.baseline is not None
    st = v.best.stats
    assert st.mean == pytest.approx(summarize(v.best.runs).mean)  # equal starts: as pooled
    assert [len(s) for s in v.best.starts] == [100, 100]
    assert v.start is not None and v.start.configs == 1 and v.start.tau2 > 0
    text = v.start_text()
    assert text is not None and "two starts" in text
    # however many runs, two starts cannot know the configuration better than this
    assert math.log(st.ci_high / st.mean) >= 1.959 * math.sqrt(v.start.tau2 / 2)
    plain = summarize(v.best.runs)  # 200 runs taken as independent: far narrower
    assert st.ci_high - st.ci_low > 5 * (plain.ci_high - plain.ci_low)
    ratio = R.speedup_over(v.best, v.baseline)  # the baseline: one start
    assert ratio is not None
    assert math.log(ratio.high / ratio.ratio) >= 1.959 * math.sqrt(1.5 * v.start.tau2)


def test_a_long_lucky_start_weighs_as_one_start_in_the_figure_the_speedup_and_the_tie(
) -> None:
    """The figures printed agree with the ranking: a start measured longer (as "measure
    longer" does for a start that leads) does not outweigh the others by its run count.
    Pooled run by run, "s" reads 2% above "w"; start by start it is 1% below, and "w"
    ranks first. Its figure, its speedup and the simplest's tie with it say the same."""
    from dataclasses import replace

    from sweeper.measure.stats import Ratio
    from sweeper.results.simplest import describe, simplest_tied

    study = optuna.create_study(direction="maximize")
    _add(study, "base", _runs(60.0, 1.0, [0] * 40, 1), None, A.BASELINE)
    for k in range(3):
        _add(study, "w", _runs(100.0, 1.0, [0] * 20, 10 + k), None)
    for k, (speed, n) in enumerate(((0.97, 10), (1.04, 120), (0.96, 10))):
        _add(study, "s", _runs(100.0, speed, [0] * n, 20 + k), None)
    for k in range(2):  # a second speculative configuration: the spread between starts
        _add(study, "o", _runs(80.0, (0.98, 1.02)[k], [0] * 20, 30 + k), None)
    results = {r.config_id: r for r in R.config_results(study.trials)}
    w, s, base = results["w"], results["s"], results["base"]
    assert s.two is not None and w.two is not None
    assert summarize(s.runs).mean > summarize(w.runs).mean * 1.015  # pooled: s leads
    assert [r.config_id for r in R.ranked(list(results.values()))][0] == "w"
    assert s.stats.mean == pytest.approx(s.two.mean) and s.stats.mean < w.stats.mean
    ratio = R.speedup_over(s, base)
    assert ratio is not None and ratio.ratio == pytest.approx(s.two.mean / base.two.mean)
    # "s" sets nothing, "w" one setting: "s" is the simplest within 1%, and reads slower
    s.effective, w.effective = {"flag": False}, {"flag": True}
    tie = simplest_tied(w, list(results.values()), {})
    assert tie is not None and tie.result.config_id == "s"
    assert tie.vs_winner.ratio == pytest.approx(s.two.mean / w.two.mean)
    assert tie.vs_winner.ratio < 1.0
    assert "recommended if fewer settings matter more than that difference" in describe(tie)
    # a tie that reads above the winner (the verdict's winner is the confirm phase's):
    # nothing is given up, and the line does not ask the reader to weigh a loss
    above = replace(tie, vs_winner=Ratio(1.009, 0.972, 1.047))
    assert "+0.9% [-2.8, +4.7] against it: recommended: as fast within the noise" in \
        describe(above)


def test_prompt_effects_take_the_prompts_spread_out_of_the_comparison() -> None:
    groups = []
    for k, mean in enumerate((100.0, 97.0, 90.0)):
        pos = [i % 24 for i in range(48)]
        groups.append(list(zip(pos, _runs(mean, 1.0, pos, 50 + k), strict=True)))
    eff = prompt_effects(groups)
    truth = [math.log(p) for p in PROMPT]
    centre = sum(truth) / len(truth)
    for p, e in eff.items():
        # six runs a prompt, shrunk by two runs' worth of prior: 6/8 of the truth
        assert e == pytest.approx((truth[p] - centre) * 6 / 8, abs=0.02)
    raw = summarize([v for _, v in groups[0]]).rel_stdev
    adjusted = summarize([v * math.exp(-eff[p]) for p, v in groups[0]]).rel_stdev
    assert adjusted < raw / 2


def test_only_runs_placed_one_by_one_are_divided_by_their_prompts_effect() -> None:
    """The one rule the verdict, the model and the confirm phase share: effects from two
    or more configurations that placed runs; a configuration's runs adjusted only when
    every one of them is placed (else a run would be divided by another prompt's effect)."""
    pos = [i % 24 for i in range(48)]
    a = list(zip(pos, _runs(100.0, 1.0, pos, 7), strict=True))
    b = list(zip(pos, _runs(95.0, 1.0, pos, 8), strict=True))
    assert shared_prompt_effects([a, []]) == {}  # one configuration: its speed or the prompt's?
    eff = shared_prompt_effects([a, [], b])
    assert eff == prompt_effects([a, b]) and len(eff) == 24
    starts = [[v for _, v in a[:24]], [v for _, v in a[24:]]]
    paired = without_prompt_effects(a, starts, eff)
    assert [len(s) for s in paired] == [24, 24]
    assert paired[1][3] == pytest.approx(a[27][1] * math.exp(-eff[3]))
    # one run not placed: every run kept as measured (a copy, not the caller's lists)
    kept = without_prompt_effects(a[1:], starts, eff)
    assert kept == starts and kept[0] is not starts[0]
    assert without_prompt_effects(a, starts, {}) == starts


def test_runs_without_positions_are_compared_as_before() -> None:
    study = optuna.create_study(direction="maximize")
    _add(study, "base", [60.0, 61.0, 59.0], None, A.BASELINE)
    _add(study, "a", [100.0, 101.0, 99.0], None)
    _add(study, "b", [90.0, 91.0, 89.0], None)
    v = R.verdict(study)
    assert v.best is not None and v.best.config_id == "a" and v.best.positions == []
    assert v.sure is not None and v.sure > 0.9


def test_the_summary_reports_the_spread_between_starts() -> None:
    from sweeper.results.headline import Headline

    lines = Headline.of(_study()).lines()
    assert any(ln.startswith("Server starts differ by ") for ln in lines), lines
    assert any("start by start" in ln for ln in lines)


def test_a_between_start_spread_at_its_floor_is_not_stated_as_zero() -> None:
    """Starts whose means agree more closely than their runs allow estimate 0 (the
    method of moments' floor): the summary says what that means, not "0.0%"."""
    from sweeper.measure.stats import StartVariance

    flat = R.Verdict(None, None, False, start=StartVariance(0.0, 2, 4.0))
    assert flat.start_text() == ("server starts differ by less than their runs' noise can "
                                 "show (from 2 configurations measured on two starts or more)")
    some = R.Verdict(None, None, False, start=StartVariance(0.012**2, 1, 3.0))
    # with one replicated configuration the figure is mostly the prior's guess: it says so,
    # and its interval (chi-square on 3 degrees of freedom: 1.2% x [0.57, 3.73]) is wide
    assert some.start_text() == (
        "server starts differ by 1.2% [0.7%, 4.5%] (sd of a start's speed, with its 95% "
        "interval; from 1 configuration measured on two starts or more, and a prior guess "
        "of 2.0% counted as 2 such configurations)")
    many = StartVariance(0.015**2, 40, 42.0).sd_interval()
    assert 0.012 < many[0] < 0.013 and 0.0185 < many[1] < 0.0195  # forty: a narrow interval


def test_a_baseline_alone_is_not_said_to_have_beaten_anything() -> None:
    from sweeper.results.headline import Headline

    study = optuna.create_study(direction="maximize")
    _add(study, "base", [60.0, 61.0, 59.0], None, A.BASELINE)
    lines = Headline.of(study).lines()
    assert "No speculative configuration has been measured yet." in lines, lines
    assert not any("beat" in ln for ln in lines), lines
    _add(study, "a", [50.0, 51.0, 49.0], None)  # measured, and slower
    lines = Headline.of(study).lines()
    assert "No speculative configuration beat the baseline (no speculation)." in lines, lines


def test_one_run_on_one_start_each_states_no_chance() -> None:
    """With one run per configuration, the run-to-run noise is unmeasured: no "How sure"
    (it would rest on the between-start prior alone), and the stop rule does not fire."""
    from sweeper.results.headline import Headline
    from sweeper.search.nodetime import stop_reason

    study = optuna.create_study(direction="maximize")
    _add(study, "base", [60.0], None, A.BASELINE)
    _add(study, "a", [100.0], None)
    _add(study, "b", [80.0], None)
    v = R.verdict(study)
    assert v.best is not None and v.best.config_id == "a" and v.sure is None
    lines = Headline.of(study).lines()
    said = "How sure: not stated: every configuration has one run"
    assert any(ln.startswith(said) for ln in lines), lines
    assert "Speedup over baseline (60.0 tok/s): +66.7%" in lines, lines  # no interval
    assert stop_reason([[100.0]], [[[80.0]]], 0.02**2, 0.5) is None
    _add(study, "b", [81.0], None)  # measured again: its two starts show a spread
    v = R.verdict(study)
    assert v.sure is not None
    assert not any("not stated" in ln for ln in Headline.of(study).lines())
    assert stop_reason([[100.0]], [[[80.0], [81.0]]], 0.02**2, 0.5) is not None
