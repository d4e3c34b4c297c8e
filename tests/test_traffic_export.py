"""``export --adaptive`` and the pure parts of several levels: SGLang's adaptive JSON from
the per-level winners (what may and may not become one), the winner per level and the
Pareto front, a stored objective. The study is written into a real SQLite storage by
hand (no sweep needed to read it back); the exported flags are checked by the simulator's
own reading of SGLang's rules, and the preflight by a launcher whose --help lacks them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import create_trial

from sweeper.errors import InputError
from sweeper.results import attrs as A
from sweeper.results.adaptive import plan
from sweeper.results.levels import LevelRuns, level_winners, pareto_front
from sweeper.results.verdict import ConfigResult
from sweeper.search.space import SearchSpace
from sweeper.sim import expected_throughput
from sweeper.sim.profiles import load_profile
from sweeper.sim.rules import resolve_config
from sweeper.study import Objective, load_study

from .conftest import run_cli
from .test_traffic import traffic_data, write

S3 = {"speculative-num-steps": 3, "speculative-eagle-topk": 1}
S1 = {"speculative-num-steps": 1, "speculative-eagle-topk": 1}


def _levels(per1: float, per16: float) -> dict[str, Any]:
    def one(per: float, level: int) -> dict[str, Any]:
        runs = [per * 0.99, per * 1.01]
        return {"per_request_runs": runs, "total_runs": [r * level for r in runs],
                "per_request": {"mean": per}, "total": {"mean": per * level},
                "ttft_s": {"mean": 0.03}, "itl_s": {"mean": 0.002}, "accept_length": 2.0}
    return {"1": one(per1, 1), "16": one(per16, 16)}


def stored_study(tmp: Path, launcher: str | None = None, base16: float = 250.0) -> Path:
    """A two-level study file and its storage: the baseline, 3 steps (fastest alone) and
    1 step (fastest at 16), as a sweep would have recorded them."""
    data = traffic_data(tmp)
    if launcher:
        data["server"]["launcher"] = launcher
    path = write(tmp, data)
    spec = load_study(str(path))
    space = SearchSpace(spec)
    study = optuna.create_study(storage=spec.storage, study_name=spec.name,
                                direction="maximize")
    study.set_user_attr(A.OBJECTIVE, spec.objective.signature())
    study.set_user_attr(A.SIMULATED, True)
    dists = space.distributions()
    for role, point, per1, per16 in ((A.BASELINE, None, 330.0, base16),
                                     (A.START_FROM, S3, 520.0, 370.0),
                                     (A.START_FROM, S1, 440.0, 390.0)):
        params = space.internal_params(point) if point else {}
        eff = space.effective(params) if point else {}
        config = space.launch_config(eff) if point else space.baseline_config()
        mix = [(a * b) ** 0.5 for a, b in ((per1 * 0.99, per16 * 0.99),
                                           (per1 * 1.01, per16 * 1.01))]
        study.add_trial(create_trial(
            params=params, distributions={k: dists[k] for k in params}, value=sum(mix) / 2,
            user_attrs={A.ROLE: role, A.CONFIG_ID: config.config_id(), A.EFFECTIVE: eff,
                        A.RUNS: mix, A.LEVELS: _levels(per1, per16)}))
    return path


def test_adaptive_export_is_what_sglang_and_the_simulator_accept(tmp_path: Path) -> None:
    study = stored_study(tmp_path)
    out = tmp_path / "out" / "best.yaml"
    proc = run_cli("export", "--study", str(study), "--adaptive", "-o", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    js = out.with_suffix(".adaptive.json")
    assert json.loads(js.read_text()) == {"1": {"candidate_steps": [3]},
                                          "16": {"candidate_steps": [1]}}
    args = yaml.safe_load(out.read_text())
    assert args["speculative-adaptive"] is True
    assert args["speculative-adaptive-config"] == str(js.resolve())
    assert (args["speculative-num-steps"], args["speculative-eagle-topk"]) == (3, 1)
    # SGLang's rules (as the simulator applies them) take it: 3 steps alone, 1 at 16
    cfg = resolve_config(load_profile("demo"), args, {})
    assert cfg.adaptive is not None
    assert {s.batch_size: s.candidate_steps for s in cfg.adaptive.slots} == {1: (3,), 16: (1,)}
    # measured against the fixed winners: the same speed at each level
    for level, fixed in ((1, S3), (16, S1)):
        fixed_args = {**{k: v for k, v in args.items() if not k.startswith(
            "speculative-adaptive")}, **fixed, "speculative-num-draft-tokens":
            fixed["speculative-num-steps"] + 1}
        got = expected_throughput("demo", args, {}, concurrency=level).tok_s
        want = expected_throughput("demo", fixed_args, {}, concurrency=level).tok_s
        assert got == pytest.approx(want, rel=0.03)


def test_a_zero_step_slot_is_exported_with_the_skip_env(tmp_path: Path) -> None:
    """The baseline won at 16: that slot runs 0 steps, which still pays the draft extend
    unless SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1: the env file says so."""
    study = stored_study(tmp_path, base16=420.0)
    out = tmp_path / "out" / "best.yaml"
    proc = run_cli("export", "--study", str(study), "--adaptive", "-o", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    js = json.loads(out.with_suffix(".adaptive.json").read_text())
    assert js["16"] == {"candidate_steps": [0]}
    env = out.with_suffix(".env").read_text().splitlines()
    assert "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1" in env
    assert "export SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1" in out.with_suffix(
        ".sh").read_text().splitlines()
    args = yaml.safe_load(out.read_text())
    env_vars = {"SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND": "1"}
    at16 = expected_throughput("demo", args, env_vars, concurrency=16)
    assert at16.steps == 0
    without = expected_throughput("demo", args, {}, concurrency=16)
    assert (without.tok_s or 0) < (at16.tok_s or 0)  # what the env var is for


def test_adaptive_export_checks_the_hosts_sglang_has_the_flags(tmp_path: Path) -> None:
    fake = tmp_path / "old_sglang.py"
    fake.write_text("import argparse\np = argparse.ArgumentParser()\n"
                    "for f in ('--model-path', '--tp-size', '--port', '--host', "
                    "'--speculative-num-steps'):\n    p.add_argument(f)\np.parse_args()\n")
    study = stored_study(tmp_path, launcher=f"{{python}} {fake}")
    out = tmp_path / "best.yaml"
    proc = run_cli("export", "--study", str(study), "--adaptive", "-o", str(out))
    assert proc.returncode != 0, proc.stdout
    line, = proc.stderr.strip().splitlines()
    assert "--speculative-adaptive" in line and "export --adaptive" in line
    assert not out.exists() and not out.with_suffix(".adaptive.json").exists()


def test_plan_only_when_the_winners_differ_in_steps_alone() -> None:
    tp = {"speculative-draft-tp-size": 4}
    p = plan({1: {**S3, "speculative-num-draft-tokens": 4, **tp}, 8: {}, 32: {**S1, **tp}}, "s")
    assert p.config == {"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [0]},
                        "32": {"candidate_steps": [1]}}
    assert p.effective["speculative-num-steps"] == 3
    with pytest.raises(InputError, match="differ in speculative-draft-tp-size"):
        plan({1: {**S3, **tp}, 16: {**S1, "speculative-draft-tp-size": 1}}, "s")
    with pytest.raises(InputError, match="topk 2"):
        plan({1: {**S3, "speculative-eagle-topk": 2}, 16: S1}, "s")
    with pytest.raises(InputError, match="two or more"):
        plan({1: S3}, "s")
    with pytest.raises(InputError, match="baseline won everywhere"):
        plan({1: {}, 16: {}}, "s")


def _result(cid: str, per: dict[int, float], total: dict[int, float]) -> ConfigResult:
    r = ConfigResult(cid, {"speculative-num-steps": len(cid)}, "config")
    for c in per:
        r.levels[c] = LevelRuns(c, per_request=[per[c]], total=[total[c]])
    return r


def test_winner_per_level_and_the_pareto_front() -> None:
    goal = Objective("pareto", (1, 16))
    a = _result("a", {1: 500, 16: 200}, {1: 500, 16: 3200})  # fastest alone
    b = _result("b", {1: 450, 16: 300}, {1: 450, 16: 4800})  # fastest at 16
    c = _result("c", {1: 440, 16: 290}, {1: 440, 16: 4640})  # beaten by b on both
    d = _result("d", {1: 470}, {1: 470})  # not measured at 16
    wins = level_winners([a, b, c, d], (1, 16))
    assert (wins[1].config_id, wins[16].config_id) == ("a", "b")
    assert [r.config_id for r in pareto_front([a, b, c, d], goal)] == ["a", "b"]


def test_a_stored_objective_reads_back_and_confirm_is_refused_for_pareto(
        tmp_path: Path) -> None:
    goal = Objective("mix", (1, 8, 32), weights={1: 0.2, 8: 0.5, 32: 0.3})
    assert Objective.from_signature(goal.signature()) == goal
    assert Objective.from_signature(None) == Objective("at", (1,), at=1)
    data = traffic_data(tmp_path, objective="pareto", sweep={"confirm_top": 2})
    proc = run_cli("optimize", "--study", str(write(tmp_path, data)), "--trials", "1")
    assert proc.returncode == 2
    line, = proc.stderr.strip().splitlines()
    assert ": sweep.confirm_top: " in line and "pareto" in line
    assert not (tmp_path / "t.db").exists()
    data = traffic_data(tmp_path, objective="pareto", sweep={"sampler": "model"})
    proc = run_cli("optimize", "--study", str(write(tmp_path, data)), "--trials", "1")
    assert proc.returncode == 2 and ": sweep.sampler: " in proc.stderr
    assert not (tmp_path / "t.db").exists()


def test_a_changed_objective_is_refused_naming_its_key() -> None:
    from sweeper.results.storage import check_objective

    study = optuna.create_study(direction="maximize")
    stored = Objective("mix", (1, 16), weights={1: 0.5, 16: 0.5})
    study.set_user_attr(A.OBJECTIVE, stored.signature())
    check_objective(study, stored, "s.yaml", "sqlite:///x.db")  # the same: accepted
    with pytest.raises(InputError, match=r"^s\.yaml: objective: differs .* tok/s per request "
                                         r"at concurrency 16, the stored study's is a "
                                         r"traffic mix"):
        check_objective(study, Objective("at", (1, 16), at=16), "s.yaml", "sqlite:///x.db")
    with pytest.raises(InputError, match=r"^s\.yaml: benchmark\.concurrency: differs .*"
                                         r"\[1, 8\], the stored study measured \[1, 16\]"):
        check_objective(study, Objective("at", (1, 8), at=8), "s.yaml", "sqlite:///x.db")
    # a study stored before levels existed measured concurrency 1
    old = optuna.create_study(direction="maximize")
    old.set_user_attr(A.SPACE, "{}")
    with pytest.raises(InputError, match="benchmark.concurrency"):
        check_objective(old, stored, "s.yaml", "sqlite:///x.db")
