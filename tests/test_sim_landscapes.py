"""bench/landscapes: profiles that are not the built-in two, each with the shape it promises,
and the optima their README quotes (recomputed here, so the README cannot drift)."""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sweeper.sim import expected_throughput, load_profile
from sweeper.sim.harness import stream_chat
from sweeper.sim.model import resolve_config
from sweeper.sim.rules import residual_factor
from tests.sim_helpers import FAST, spawn

__all__ = ["spawn"]

LANDSCAPES = Path(__file__).resolve().parent.parent / "bench" / "landscapes"
FILES = sorted(LANDSCAPES.glob("*.yaml"))


def _optima() -> ModuleType:
    spec = importlib.util.spec_from_file_location("landscape_optima", LANDSCAPES / "optima.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


OPTIMA = _optima()
SPACE = OPTIMA.load_space(OPTIMA.DEFAULT_STUDY, [])


def path(name: str) -> str:
    return str(LANDSCAPES / f"{name}.yaml")


def test_at_least_five_landscapes_load_and_say_simulated() -> None:
    assert len(FILES) >= 5
    for file in FILES:
        profile = load_profile(file)
        assert profile.name == file.stem
        assert "simulated" in profile.hardware.gpu_name.lower()
        assert "(simulated)" in profile.description
        assert profile.startup.load_seconds <= 1.0  # fast trials, like demo
        assert file.read_text().startswith("# Simulated landscape (a test double")


def test_readme_quotes_the_computed_optima() -> None:
    readme = (LANDSCAPES / "README.md").read_text()
    for file in FILES:
        o = OPTIMA.optimum(str(file), SPACE, 1)
        row = (f"| {o.profile} | {OPTIMA.describe(o)} | {o.tok_s:.1f} | "
               f"x{o.tok_s / o.baseline:.2f} | {sum(o.failures.values())}/{o.points} | "
               f"{o.near} |")
        assert row in readme, f"README row out of date for {file.name}:\n{row}"


def test_the_noisy_node_is_the_demo_but_for_its_noise() -> None:
    """Its header promises the demo's machine, model and physics: only the noise differs
    (a copy of demo.yaml that would drift silently otherwise)."""
    demo, noisy = load_profile("demo"), load_profile(path("noisy-node-l40s"))
    own = {"name", "description", "noise", "source"}
    assert [f.name for f in dataclasses.fields(demo)
            if f.name not in own and getattr(demo, f.name) != getattr(noisy, f.name)] == []
    assert noisy.noise.start_sd > demo.noise.start_sd
    assert noisy.noise.cycle_sd > demo.noise.cycle_sd


def best(name: str) -> Any:
    return OPTIMA.optimum(path(name), SPACE, 1)


def test_deep_chain_wins_at_the_deep_end() -> None:
    o = best("deep-chain-h100")
    assert o.args["speculative-eagle-topk"] == 1
    assert o.args["speculative-num-steps"] == max(SPACE.dims["speculative-num-steps"])


def test_a_wide_tree_wins() -> None:
    assert best("wide-tree-h200").args["speculative-eagle-topk"] == 4


def test_small_memory_cuts_off_most_of_the_space() -> None:
    o = best("small-memory-l4")
    assert o.failures["oom"] > len(SPACE.points()) / 2
    for args, env in SPACE.points():
        if args.get("speculative-draft-tp-size") == 1 and not env:
            got = expected_throughput(path("small-memory-l4"), args, env)
            assert got.failure == "oom" and "mem-fraction-static" in got.reason


def test_nccl_settings_are_worth_ten_to_fifteen_percent() -> None:
    tuned = best("nccl-sensitive-pcie").tok_s
    defaults = OPTIMA.load_space(OPTIMA.DEFAULT_STUDY,
                                 ["env.NCCL_ALGO=unset", "env.NCCL_PROTO=unset"])
    untuned = OPTIMA.optimum(path("nccl-sensitive-pcie"), defaults, 1).tok_s
    assert 1.10 <= tuned / untuned <= 1.15


def test_verify_cost_steps_at_graph_buckets() -> None:
    name = path("graph-buckets-a10g")
    buckets = load_profile(name).target.verify_buckets
    tree = {"tp-size": 4, "speculative-algorithm": "EAGLE3", "speculative-num-steps": 4,
            "speculative-eagle-topk": 2, "speculative-draft-tp-size": 4}
    cycles = {k: expected_throughput(name, {**tree, "speculative-num-draft-tokens": k}, {}
                                     ).cycle_ms for k in range(5, 10)}
    assert cycles[5] == cycles[6] == cycles[7] == cycles[8] < (cycles[9] or 0)
    assert best("graph-buckets-a10g").args["speculative-num-draft-tokens"] in buckets


def test_residual_is_fixed_per_configuration_and_sized_by_the_profile() -> None:
    rugged = load_profile(path("rugged-h100"))
    factors = [residual_factor(rugged, resolve_config(rugged, args, env))
               for args, env in SPACE.points()[:600]]
    assert 0.02 < statistics.pstdev(factors) < 0.04
    assert len(set(factors)) > 500  # distinct configurations, distinct factors
    args, env = SPACE.points()[7]
    assert residual_factor(rugged, resolve_config(rugged, args, env)) == factors[7]
    reseeded = dataclasses.replace(rugged, noise=dataclasses.replace(rugged.noise,
                                                                     config_residual_seed=1))
    assert residual_factor(reseeded, resolve_config(reseeded, args, env)) != factors[7]
    assert residual_factor(load_profile("demo"), resolve_config(rugged, args, env)) == 1.0


@pytest.mark.timing  # wall-clock tok/s against the model: alone, on a quiet machine
def test_a_landscape_path_serves_with_its_residual(spawn) -> None:
    rugged = load_profile(path("rugged-h100"))
    # a configuration whose residual is clearly not 1, so ignoring it would show
    # the draft at the target's TP: no draft-TP flag on the command line (upstream 0.5.23)
    tp = rugged.defaults.tp_size
    args, env = next(({k: v for k, v in a.items() if k != "speculative-draft-tp-size"}, e)
                     for a, e in SPACE.points() if not e
                     and a.get("speculative-draft-tp-size", tp) == tp
                     and abs(residual_factor(rugged, resolve_config(rugged, a, e)) - 1) > 0.03
                     and expected_throughput(rugged, a, e).tok_s)
    flags = [t for k, v in args.items() for t in (f"--{k}", str(v))]
    sim = spawn([*FAST, "--sim-profile", path("rugged-h100"), "--sim-noise", "0", *flags])
    sim.wait_healthy()
    truth = expected_throughput(rugged, args, env).tok_s
    assert stream_chat(sim.url, "rugged", 500).tok_s == pytest.approx(truth, rel=0.015)
