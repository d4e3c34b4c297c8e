"""One trial loop: the loop ``sweeper optimize`` runs decides the same whether it measures
through the real measurer (the simulated SGLang server as a real process over real HTTP,
a real SQLite file) or through the bench's emulated measurer (the simulator's ground truth
in process). The bench's figures come from this loop, so they are the product's."""

from __future__ import annotations

from pathlib import Path

from bench.emulation import GroundTruth, emulate
from sweeper.run.common import SweepOptions
from sweeper.run.decide import Action, Decision, Proposal
from sweeper.run.workers import HostPool
from sweeper.study import parse_study

from .conftest import demo_study_data
from .test_optimize import failing_point

TRIALS = 8


def _row(p: Proposal, d: Decision) -> tuple[int, str, str, Action]:
    return p.number, p.role, p.config_id, d.action


def test_real_and_emulated_measurers_take_the_same_decisions(tmp_path: Path) -> None:
    oom = failing_point("oom", max_steps=6)
    data = demo_study_data(
        tmp_path,
        space={"speculative-num-steps": {"int": [1, 6]},
               "speculative-eagle-topk": {"choices": [1, 2, 4]},
               "speculative-num-draft-tokens": {"int": [2, 16]}},
        start_from=[oom], sweep={"seed": 11, "sampler": "random", "confirm_top": 0})
    data["server"]["launcher"] += " --sim-noise 0"  # noise off: the same values told
    spec = parse_study(data, tmp_path / "t.yaml")

    real: list[tuple[int, str, str, Action]] = []
    pool = HostPool(spec, SweepOptions(trials=TRIALS),
                    observe=lambda p, d: real.append(_row(p, d)))
    pool.open()
    try:
        pool.run()
    finally:
        pool.done()

    emulated = emulate(GroundTruth(spec, "demo"), "default", 11, TRIALS, noise=False)
    assert [_row(p, d) for p, d in emulated.decisions] == real
    # the sequence is worth comparing: it measured, and skipped what failed before
    actions = [row[3] for row in real]
    assert actions.count(Action.MEASURE) >= 3
    assert real[0][1] == "baseline" and real[1][1] == "start_from"
