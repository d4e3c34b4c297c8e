"""Node-seconds as the currency: costs, the best buy per node-second, the stop rule, and the
node time of a study as written."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import yaml

from sweeper.results import attrs as A
from sweeper.search.nodetime import (
    Costs,
    Option,
    batch_gain,
    choose,
    measured_costs,
    plan_seconds,
    replicate_gain,
    stop_reason,
)

from .conftest import run_cli


def _alt(mean: float, n: int, cv: float = 0.05) -> list[float]:
    return [mean * (1 + cv * (-1) ** i) for i in range(n)]


def _starts(mean: float, speeds: list[float], runs: int = 20) -> list[list[float]]:
    return [_alt(mean * s, runs) for s in speeds]


def test_the_stop_rule_ends_a_study_whose_leader_is_clear() -> None:
    tau2 = 0.015**2
    best = _starts(110.0, [1.0, 1.01])
    others = [_starts(100.0, [1.0, 0.99]), _starts(95.0, [1.0]), _starts(60.0, [1.0])]
    why = stop_reason(best, others, tau2, 0.95)
    assert why is not None and "within 1%" in why and "stop_when_sure" in why


def test_the_stop_rule_does_not_end_a_study_whose_leader_is_not_clear() -> None:
    tau2 = 0.015**2
    # 300 runs of one start each look decisive run by run; one start each is not
    best = _starts(101.5, [1.0], runs=300)
    others = [_starts(100.0, [1.0], runs=300), _starts(80.0, [1.0])]
    assert stop_reason(best, others, tau2, 0.95) is None
    assert stop_reason(best, others, 0.0, 0.95) is not None  # independent runs would stop
    # two starts each, agreeing, settle it
    best2 = _starts(103.0, [1.0, 1.0, 1.0, 1.0], runs=30)
    others2 = [_starts(100.0, [1.0, 1.0, 1.0, 1.0], runs=30), _starts(80.0, [1.0])]
    assert stop_reason(best2, others2, tau2, 0.95) is not None
    assert stop_reason(best2, others2, tau2, 1.0) is None  # 1: never stop early
    assert stop_reason(best, [], tau2, 0.95) is None  # nothing to compare with


def test_a_close_pair_buys_a_new_start_not_more_runs_when_starts_differ() -> None:
    costs = Costs(restart_s=480, run_s=6)
    lead = _starts(100.0, [1.0], runs=100)
    mine = _starts(99.5, [1.0], runs=60)
    tau2 = 0.02**2
    batch = Option("batch", batch_gain(mine, lead, tau2, 0.05, 10), 10 * costs.run_s)
    rep = Option("replicate", replicate_gain(mine, lead, tau2, 0.05, 10),
                 costs.trial_s(10))
    assert choose([batch, rep], min_rate=0.0).kind == "replicate"
    # independent runs: a batch on the running start is the cheaper buy
    batch0 = Option("batch", batch_gain(mine, lead, 0.0, 0.05, 10), 10 * costs.run_s)
    rep0 = Option("replicate", replicate_gain(mine, lead, 0.0, 0.05, 10), costs.trial_s(10))
    assert choose([batch0, rep0], min_rate=0.0).kind == "batch"
    # nothing worth its node time: stop
    assert choose([batch, rep], min_rate=1.0).kind == "stop"
    assert choose([], min_rate=0.0).kind == "stop"


def test_costs_from_the_baseline_start_up_and_the_measured_runs() -> None:
    def trial(role: str, startup: float, runs: list[float]) -> SimpleNamespace:
        return SimpleNamespace(user_attrs={A.ROLE: role, A.STARTUP: startup, A.RUNS: runs})

    trials = [trial(A.BASELINE, 470.0, [90.0, 90.0]), trial(A.SAMPLER, 500.0, [100.0] * 5),
              trial(A.SAMPLER, 0.0, [100.0])]  # reused a running server: no restart
    c = measured_costs(trials, max_tokens=500)
    assert c is not None and c.restart_s == 470.0 and c.run_s == pytest.approx(5.0)
    assert c.source == "measured" and c.ratio == pytest.approx(94.0)
    assert measured_costs(trials, 500, restart_s=300.0, run_s=4.0) == Costs(300.0, 4.0)
    assert measured_costs([], 500) is None
    assert math.isclose(c.spent(2, 10), 2 * 470 + 50)


def test_plan_seconds() -> None:
    low, high = plan_seconds(Costs(480, 6), trials=40, runs=10, warmup=1, max_runs=200,
                             confirm_restarts=2, confirm_runs=40)
    assert low == 40 * (480 + 11 * 6) + 2 * 480 + 40 * 6
    assert high == 40 * (480 + 201 * 6) + 2 * 480 + 40 * 6
    # confirm visits as long as a start is worth: up to confirm_max runs
    low2, high2 = plan_seconds(Costs(480, 6), trials=40, runs=10, warmup=1, max_runs=200,
                               confirm_restarts=2, confirm_runs=40, confirm_max=400)
    assert low2 == low and high2 == high + 360 * 6


def test_validate_prints_the_space_size_and_node_hours(make_study) -> None:  # noqa: ANN001
    path = make_study(sweep={"seed": 3, "n_startup_trials": 4, "restart_cost": "8m",
                             "run_cost": "6s"})
    proc = run_cli("validate", "--study", str(path))
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "space:" in ln)
    assert "configurations" in line and "node time" in line and " h at 480 s" in line
    # the conftest study has no max_runs: every trial is its 2 runs, one figure, not "a-a"
    assert re.search(r"restarts, [\d,]+ runs;", line), line
    data = yaml.safe_load(path.read_text())
    data["sweep"]["stop_when_sure"] = 1.5
    path.write_text(yaml.safe_dump(data))
    proc = run_cli("validate", "--study", str(path))
    assert proc.returncode == 2 and "stop_when_sure" in proc.stderr
