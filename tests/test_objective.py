"""Concurrency levels and the objective: the forms a study may write, what they compute,
and bad objectives as one line naming the key (exit 2, nothing written)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from sweeper.errors import StudyError
from sweeper.study import Objective, load_study
from tests.conftest import run_cli
from tests.test_study import edit, write


def _load(tmp_path: Path, concurrency: Any, objective: Any = None) -> Objective:
    def change(d: dict[str, Any]) -> None:
        d["benchmark"] = {"concurrency": concurrency}
        if objective is not None:
            d["objective"] = objective
    return load_study(str(write(tmp_path, edit(change)))).objective


def test_one_level_is_its_own_objective(tmp_path: Path) -> None:
    obj = _load(tmp_path, 1)
    assert (obj.kind, obj.levels, obj.at) == ("at", (1,), 1)
    assert obj.metric_names() == ["tok/s"] and obj.values({1: 90.0}, {1: 90.0}) == [90.0]


def test_at_one_level(tmp_path: Path) -> None:
    obj = _load(tmp_path, [1, 8, 32], {"at": 8})
    assert obj.kind == "at" and obj.at == 8 and obj.primary == 8
    assert obj.combine({1: 100.0, 8: 60.0, 32: 30.0}) == 60.0
    assert obj.metric_names() == ["tok/s per request @8"]


def test_mix_is_a_weighted_geometric_mean(tmp_path: Path) -> None:
    obj = _load(tmp_path, [1, 8, 32], {"mix": {1: 2, 8: 5, 32: 3}})
    assert obj.weights == pytest.approx({1: 0.2, 8: 0.5, 32: 0.3})
    got = obj.combine({1: 100.0, 8: 60.0, 32: 30.0})
    assert got == pytest.approx(math.exp(0.2 * math.log(100) + 0.5 * math.log(60)
                                         + 0.3 * math.log(30)))
    # a 10% gain at any level moves the mix by the same factor, times its weight
    assert obj.combine({1: 110.0, 8: 60.0, 32: 30.0}) / got == pytest.approx(1.1 ** 0.2)
    assert obj.combine({1: 100.0, 8: 60.0, 32: 33.0}) / got == pytest.approx(1.1 ** 0.3)


def test_several_levels_default_to_an_equal_mix(tmp_path: Path) -> None:
    obj = _load(tmp_path, [1, 16])
    assert obj.kind == "mix" and obj.weights == {1: 0.5, 16: 0.5}


def test_pareto_is_two_objectives(tmp_path: Path) -> None:
    obj = _load(tmp_path, [1, 16], "pareto")
    assert obj.multi and obj.values({1: 100.0, 16: 40.0}, {1: 100.0, 16: 640.0}) == [100.0, 640.0]
    assert obj.metric_names() == ["tok/s per request @1", "total tok/s @16"]


@pytest.mark.parametrize(("concurrency", "objective", "key", "words"), [
    ([1, 8], {"at": 4}, "objective.at", "not one of the measured levels"),
    ([1, 8], {"mix": {1: 0.5, 16: 0.5}}, "objective.mix.16", "not one of the measured levels"),
    ([1, 8], {"mix": {1: 0.5, 8: -1}}, "objective.mix.8", "not a positive number"),
    ([1, 8], {"mix": {}}, "objective.mix", "mapping of level: weight"),
    ([1, 8], {"best": 8}, "objective", "is not an objective"),
    ([1, 8], "fastest", "objective", "is not an objective"),
    ([8], "pareto", "objective", "at least two concurrency levels"),
    ([1, 1], None, "benchmark.concurrency", "listed twice"),
    ([1, 0], None, "benchmark.concurrency[1]", "whole number >= 1"),
    ([], None, "benchmark.concurrency", "empty list"),
])
def test_bad_objective_names_the_key(tmp_path: Path, concurrency: Any, objective: Any,
                                     key: str, words: str) -> None:
    with pytest.raises(StudyError) as info:
        _load(tmp_path, concurrency, objective)
    assert f": {key}: " in str(info.value) and words in str(info.value)


def test_bad_objective_through_the_cli_is_one_line(make_study, tmp_path: Path) -> None:
    study = make_study(benchmark={"concurrency": [1, 4]}, objective={"at": 16})
    proc = run_cli("optimize", "--study", str(study), "--trials", "1")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "objective.at" in lines[0] and "16" in lines[0]
    assert not (tmp_path / "t.db").exists()
