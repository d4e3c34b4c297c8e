"""The search space: SGLang's speculative rules hold for every sampled trial, no two
distinct trials launch the same server, names keep one distribution each, start_from
round-trips, and the baseline carries no speculation."""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from sweeper.errors import StudyError
from sweeper.launch import LaunchConfig
from sweeper.search.space import BRANCH_SEP, DRAFT_POSITION, SearchSpace, user_name
from sweeper.study import DRAFT, STEPS, TOPK, TRIPLE, StudySpec, load_study, parse_study

REPO = Path(__file__).resolve().parent.parent
STUDIES = REPO / "studies"

optuna.logging.set_verbosity(optuna.logging.WARNING)

BASE: dict[str, Any] = {
    "hosts": [{"ssh": "local"}],
    "server": {
        "launcher": "{python} -m sweeper.sim",
        "port": 30817,
        "env": {"FIXED": "1"},
        "args": {"model-path": "m", "tp-size": 4, "speculative-algorithm": "EAGLE3",
                 "speculative-draft-model-path": "d"},
    },
    "space": {
        STEPS: {"int": [1, 6]},
        TOPK: {"choices": [1, 2, 4]},
        DRAFT: {"int": [2, 16]},
    },
}


def make(space: dict[str, Any] | None = None, args: dict[str, Any] | None = None,
         start_from: list[dict[str, Any]] | None = None) -> StudySpec:
    data = copy.deepcopy(BASE)
    if space is not None:
        data["space"] = space
    data["server"]["args"].update(args or {})
    if start_from is not None:
        data["start_from"] = start_from
    return parse_study(data, Path("t.yaml"))


def demo() -> StudySpec:
    return load_study("demo", root=STUDIES)


def kimi() -> StudySpec:
    return load_study("eagle3-kimi", root=STUDIES)


# --------------------------------------------------------------------- checks
def assert_valid(spec: StudySpec, eff: dict[str, Any], cfg: LaunchConfig) -> None:
    """One configuration obeys SGLang's rules and the study's space."""
    args = cfg.args
    present = [n for n in TRIPLE if n in args]
    assert len(present) in (0, 3), args
    if present:
        s, k, d = (args[n] for n in TRIPLE)
        assert k >= 1 and s >= 1
        if k == 1:
            assert d == s + 1, args
        else:
            assert 2 <= d <= s * k + 1, args
    for name, value in eff.items():
        if name in spec.space and not (name == DRAFT and args.get(TOPK) == 1):
            assert spec.space[name].contains(value), (name, value)
        if name.startswith("env."):
            var = name[4:]
            if value == "unset":
                assert var not in cfg.env
            else:
                assert cfg.env[var] == str(value) and isinstance(cfg.env[var], str)
    assert args["port"] == spec.server.port and args["host"] == spec.server.host
    assert cfg.env["FIXED"] == "1" if "FIXED" in spec.server.env else True


def launch_key(cfg: LaunchConfig) -> str:
    return json.dumps([cfg.argv("python3"), sorted(cfg.env.items())])


def values(dist: BaseDistribution) -> list[Any]:
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, FloatDistribution):
        return [dist.low, dist.high]
    assert isinstance(dist, IntDistribution)
    return list(range(dist.low, dist.high + 1, dist.step))


def enumerate_space(sp: SearchSpace) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every (internal params, effective params) the space can produce for the
    speculative triple (other parameters at their first value)."""
    return list(sp.configurations(every_plain=False))


def brute_force(spec: StudySpec) -> set[tuple[int, int, int]]:
    """Valid (steps, topk, draft tokens), TRIPLE's order, straight from SGLang's rules."""
    r = spec.rules
    out = set()
    for k in r.topk_values():
        for s in r.steps_values():
            if k == 1:
                out.add((s, k, s + 1))
            else:
                out |= {(s, k, d) for d in r._domain(r.draft) if 2 <= d <= s * k + 1}
    return out


# --------------------------------------------------------------------- unit tests
def test_branch_names_demo() -> None:
    sp = SearchSpace(demo())
    dists = sp.distributions()
    assert dists[STEPS] == IntDistribution(1, 6)
    assert dists[TOPK] == CategoricalDistribution([1, 2, 4])
    # one draft-token parameter for every (topk, steps) branch: what TPE learns carries over
    assert dists[DRAFT_POSITION] == FloatDistribution(0.0, 1.0)
    assert [n for n in dists if user_name(n) == DRAFT] == [DRAFT_POSITION]
    assert not any("topk=" in n for n in dists)
    sp = SearchSpace(make())  # the same triple, no other parameter
    assert sp.effective({TOPK: 2, STEPS: 1, DRAFT_POSITION: 0.0})[DRAFT] == 2
    assert sp.effective({TOPK: 2, STEPS: 1, DRAFT_POSITION: 1.0})[DRAFT] == 3
    assert sp.effective({TOPK: 2, STEPS: 3, DRAFT_POSITION: 0.99})[DRAFT] == 7
    assert sp.effective({TOPK: 4, STEPS: 6, DRAFT_POSITION: 0.99})[DRAFT] == 16
    assert sp.effective({TOPK: 4, STEPS: 6, DRAFT_POSITION: 0.0})[DRAFT] == 2


def test_position_gives_every_valid_value_an_equal_share() -> None:
    sp = SearchSpace(make())
    for k, s, valid in ((2, 3, range(2, 8)), (4, 2, range(2, 10)), (2, 1, range(2, 4))):
        got = [sp.effective({TOPK: k, STEPS: s, DRAFT_POSITION: (i + 0.5) / 1000})[DRAFT]
               for i in range(1000)]
        assert set(got) == set(valid)
        shares = [got.count(v) for v in valid]
        assert max(shares) - min(shares) <= 1, shares


def test_trials_of_the_per_branch_space_stay_readable() -> None:
    """A study made before the shared name: status/export read its trials."""
    sp = SearchSpace(demo())
    eff = sp.effective({TOPK: 2, STEPS: 3, f"{DRAFT}|topk=2,steps=3": 5,
                        "attn-dp-size": 4, "env.NCCL_ALGO": "Tree",
                        "env.NCCL_PROTO": "LL"})
    assert eff[DRAFT] == 5


def test_steps_branch_when_draft_low_is_high() -> None:
    # draft tokens >= 8: topk 2 needs steps >= 4 (2*4+1 = 9), topk 4 steps >= 2.
    sp = SearchSpace(make({STEPS: {"int": [1, 6]}, TOPK: {"choices": [1, 2, 4]},
                           DRAFT: {"int": [8, 16]}}))
    d = sp.distributions()
    assert d[STEPS] == IntDistribution(1, 6)  # topk 1: every steps value
    assert d[f"{STEPS}{BRANCH_SEP}topk=2"] == IntDistribution(4, 6)
    assert d[f"{STEPS}{BRANCH_SEP}topk=4"] == IntDistribution(2, 6)
    assert sp.effective({TOPK: 2, f"{STEPS}{BRANCH_SEP}topk=2": 4,
                         DRAFT_POSITION: 0.7})[DRAFT] == 9


def test_single_value_branch_is_not_sampled() -> None:
    sp = SearchSpace(make({STEPS: {"int": [1, 2]}, TOPK: {"choices": [2]},
                           DRAFT: {"choices": [3, 5]}}))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial({TOPK: 2, STEPS: 1})
    trial = study.ask()
    assert sp.suggest(trial)[DRAFT] == 3  # only 3 fits: fixed, not sampled
    assert DRAFT_POSITION not in trial.params
    assert sp.effective({TOPK: 2, STEPS: 1})[DRAFT] == 3
    assert {sp.effective({TOPK: 2, STEPS: 2, DRAFT_POSITION: p})[DRAFT]
            for p in (0.2, 0.7)} == {3, 5}


def test_topk_fixed_one_in_args() -> None:
    spec = make({STEPS: {"int": [1, 4]}, "env.NCCL_ALGO": {"choices": ["unset", "Ring"]}},
                args={TOPK: 1})
    sp = SearchSpace(spec)
    assert set(sp.distributions()) == {STEPS, "env.NCCL_ALGO"}
    eff = sp.effective({STEPS: 3, "env.NCCL_ALGO": "Ring"})
    assert eff == {STEPS: 3, "env.NCCL_ALGO": "Ring", DRAFT: 4}
    cfg = sp.launch_config(eff)
    assert cfg.args[TOPK] == 1 and cfg.args[DRAFT] == 4 and cfg.env["NCCL_ALGO"] == "Ring"


def test_steps_fixed_topk_searched_draft_fixed() -> None:
    spec = make({TOPK: {"choices": [1, 2, 4]}}, args={STEPS: 2, DRAFT: 5})
    sp = SearchSpace(spec)
    assert set(sp.distributions()) == {TOPK}
    # topk 1: SGLang overrides the fixed draft tokens with steps + 1; say so.
    assert sp.launch_config(sp.effective({TOPK: 1})).args[DRAFT] == 3
    assert sp.launch_config(sp.effective({TOPK: 2})).args[DRAFT] == 5
    # steps 2, topk 2 allow 5 (<= 2*2+1): fine; a fixed 6 would not be, for topk 2
    with pytest.raises(StudyError, match="topk=2 admits no"):
        make({TOPK: {"choices": [1, 2, 4]}}, args={STEPS: 2, DRAFT: 6})


def test_no_speculative_triple() -> None:
    spec = make({"speculative-draft-tp-size": {"choices": [1, 4]},
                 "mem-fraction-static": {"float": [0.7, 0.9]}})
    sp = SearchSpace(spec)
    assert set(sp.distributions()) == {"speculative-draft-tp-size", "mem-fraction-static"}
    eff = sp.effective({"speculative-draft-tp-size": 4, "mem-fraction-static": 0.8})
    assert DRAFT not in eff and DRAFT not in sp.emitted_flags()
    assert sp.launch_config(eff).args["mem-fraction-static"] == 0.8


def test_launch_config_env_and_flags() -> None:
    sp = SearchSpace(kimi())
    eff = {STEPS: 2, TOPK: 1, DRAFT: 3, "speculative-draft-tp-size": 1,
           "env.NCCL_ALGO": "unset", "env.NCCL_PROTO": "LL", "env.NCCL_MIN_NCHANNELS": 8}
    cfg = sp.launch_config(eff)
    assert cfg.env == {"NCCL_PROTO": "LL", "NCCL_MIN_NCHANNELS": "8"}
    assert cfg.args["port"] == 8000 and cfg.args["host"] == "127.0.0.1"
    assert cfg.launcher == "{python} -m sglang.launch_server"
    argv = cfg.argv("/py")
    assert argv[:3] == ["/py", "-m", "sglang.launch_server"]
    assert "--speculative-num-draft-tokens" in argv and "--trust-remote-code" in argv


def test_baseline_has_no_speculation() -> None:
    for spec in (demo(), kimi()):
        cfg = SearchSpace(spec).baseline_config()
        assert not cfg.speculative
        assert not any(a.startswith("--speculative") for a in cfg.argv())
        assert cfg.args["port"] == spec.server.port and cfg.env == spec.server.env
        assert cfg.args["tp-size"] == spec.server.args["tp-size"]


def test_emitted_flags() -> None:
    flags = SearchSpace(kimi()).emitted_flags()
    assert {"model-path", "tp-size", "trust-remote-code", "port", "host", STEPS, TOPK,
            DRAFT, "attn-dp-size", "speculative-algorithm", "speculative-draft-model-path",
            "speculative-draft-model-quantization", "speculative-draft-attention-backend",
            "speculative-attention-mode", "disable-overlap-schedule"} == flags


def test_internal_params_errors() -> None:
    sp = SearchSpace(demo())
    with pytest.raises(StudyError, match="breaks SGLang's rule"):
        sp.internal_params({STEPS: 1, TOPK: 4, DRAFT: 9})
    with pytest.raises(StudyError, match="outside the space"):
        sp.internal_params({STEPS: 1, TOPK: 3, DRAFT: 2})
    with pytest.raises(StudyError, match="neither searched nor fixed"):
        sp.internal_params({"nope": 1})


def test_effective_reports_changed_space() -> None:
    with pytest.raises(KeyError, match="lack"):
        SearchSpace(demo()).effective({TOPK: 2, STEPS: 3})


# --------------------------------------------------------------------- start_from
@pytest.mark.parametrize("load", [demo, kimi])
def test_start_from_round_trip(load: Callable[[], StudySpec]) -> None:
    spec = load()
    sp = SearchSpace(spec)
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    entry = spec.start_from[0]
    internal = sp.internal_params(entry)
    assert internal[STEPS] == 3 and internal[TOPK] == 1
    assert not any(user_name(n) == DRAFT for n in internal)  # topk 1: not sampled
    study.enqueue_trial(internal)
    trial = study.ask()
    eff = sp.suggest(trial)
    assert {k: eff[k] for k in entry} == entry
    assert sp.effective(trial.params) == eff
    assert sp.launch_config(eff).args[DRAFT] == 4


def test_start_from_tree_and_partial_entries() -> None:
    sp = SearchSpace(demo())
    internal = sp.internal_params({STEPS: 3, TOPK: 2, DRAFT: 7})
    assert internal == {TOPK: 2, STEPS: 3, DRAFT_POSITION: 5.5 / 6}  # the last of 2..7
    assert SearchSpace(make()).effective(internal)[DRAFT] == 7
    # no speculative numbers at all: the sampler picks them
    assert sp.internal_params({"env.NCCL_ALGO": "Ring"}) == {"env.NCCL_ALGO": "Ring"}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    study.enqueue_trial(sp.internal_params({"env.NCCL_ALGO": "Ring"}))
    eff = sp.suggest(study.ask())
    assert eff["env.NCCL_ALGO"] == "Ring" and STEPS in eff


# --------------------------------------------------------------------- real Optuna
def _samplers() -> list[tuple[str, Callable[[], optuna.samplers.BaseSampler]]]:
    def tpe() -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(multivariate=True, group=True, seed=7,
                                              n_startup_trials=10)
    return [("random", lambda: optuna.samplers.RandomSampler(seed=7)), ("tpe", tpe)]


SPECS: dict[str, Callable[[], StudySpec]] = {
    "demo": demo,
    "kimi": kimi,
    "high-draft-low": lambda: make({STEPS: {"int": [1, 6]}, TOPK: {"int": [1, 4]},
                                    DRAFT: {"int": [8, 16, ], "step": 1},
                                    "env.NCCL_ALGO": {"choices": ["unset", "Ring", 3]},
                                    "mem-fraction-static": {"float": [0.7, 0.9]}}),
    "draft-choices": lambda: make({STEPS: {"choices": [1, 3, 5]}, TOPK: {"choices": [1, 2]},
                                   DRAFT: {"choices": [2, 4, 8, 12]},
                                   "disable-overlap-schedule": {"choices": [True, False]}}),
}


@pytest.mark.parametrize("sampler_name,sampler", _samplers(), ids=lambda x: x
                         if isinstance(x, str) else "")
@pytest.mark.parametrize("spec_name", list(SPECS))
def test_sampled_trials_valid_and_distinct(spec_name: str, sampler_name: str,
                                           sampler: Callable[[], optuna.samplers.BaseSampler]
                                           ) -> None:
    spec = SPECS[spec_name]()
    sp = SearchSpace(spec)
    dists = sp.distributions()
    study = optuna.create_study(direction="maximize", sampler=sampler())
    seen: dict[str, tuple[tuple[str, Any], ...]] = {}

    def objective(trial: optuna.trial.Trial) -> float:
        eff = sp.suggest(trial)
        cfg = sp.launch_config(eff)
        assert_valid(spec, eff, cfg)
        for name, dist in trial.distributions.items():
            assert dists[name] == dist, name
        assert sp.effective(trial.params) == eff
        # a position is continuous: compare the draft tokens it stands for
        internal = tuple(sorted((n, eff[DRAFT] if n == DRAFT_POSITION else v)
                                for n, v in trial.params.items()))
        key = launch_key(cfg)
        assert seen.setdefault(key, internal) == internal, (key, internal, seen[key])
        # arbitrary but structured, so TPE has something to chase
        return float(eff.get(STEPS, 0) * 3 - abs(eff.get(DRAFT, 0) - 5)
                     + (eff.get(TOPK) == 2))

    n = 300 if sampler_name == "random" else 150
    study.optimize(objective, n_trials=n, catch=())
    assert len(study.trials) == n
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


@pytest.mark.parametrize("spec_name", list(SPECS))
def test_enumeration_is_exactly_the_valid_set(spec_name: str) -> None:
    spec = SPECS[spec_name]()
    sp = SearchSpace(spec)
    pairs = enumerate_space(sp)
    triples = [tuple(sp.launch_config(eff).args[n] for n in TRIPLE) for _, eff in pairs]
    assert len(triples) == len(set(triples))  # no silent duplicates
    assert set(triples) == brute_force(spec)  # nothing invalid, nothing missing
    for internal, eff in pairs:
        assert sp.internal_params(eff) == {k: v for k, v in internal.items()
                                           if k in sp.distributions()}


# --------------------------------------------------------------------- hypothesis
ints = st.integers(min_value=1, max_value=8)


@st.composite
def number_spec(draw: st.DrawFn, name: str, low: int = 1, high: int = 8) -> Any:
    """A speculative number: searched as a range or choices, or fixed in args."""
    how = draw(st.sampled_from(["int", "choices", "fixed"]))
    if how == "int":
        a, b = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2)))
        return {"int": [a, b]}
    if how == "choices":
        return {"choices": draw(st.lists(st.integers(low, high), min_size=1, max_size=4,
                                         unique=True))}
    return draw(st.integers(low, high))


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(steps=number_spec(STEPS, 1, 6), topk=number_spec(TOPK, 1, 5),
       draft=st.one_of(st.none(), number_spec(DRAFT, 1, 20)))
def test_random_spaces(steps: Any, topk: Any, draft: Any) -> None:
    space: dict[str, Any] = {"env.NCCL_PROTO": {"choices": ["unset", "LL"]}}
    args: dict[str, Any] = {}
    for name, v in ((STEPS, steps), (TOPK, topk), (DRAFT, draft)):
        if isinstance(v, dict):
            space[name] = v
        elif v is not None:
            args[name] = v
    try:
        spec = make(space, args)
    except StudyError as exc:
        msg = str(exc)
        assert msg.startswith("t.yaml: ") and "\n" not in msg
        return
    sp = SearchSpace(spec)
    pairs = enumerate_space(sp)
    triples = [tuple(sp.launch_config(eff).args[n] for n in TRIPLE) for _, eff in pairs]
    assert len(triples) == len(set(triples))
    assert set(triples) == brute_force(spec)
    for k in spec.rules.topk_values():  # every topk the study lists is reachable
        assert any(t[1] == k for t in triples)
    dists = sp.distributions()
    for internal, eff in pairs:
        assert_valid(spec, eff, sp.launch_config(eff))
        assert sp.internal_params(eff) == {k: v for k, v in internal.items() if k in dists}
        assert sp.effective(internal) == eff


def test_a_null_choice_leaves_the_flag_out() -> None:
    sp = SearchSpace(kimi())
    args = sp.launch_config({"speculative-draft-model-quantization": None}).args
    assert "speculative-draft-model-quantization" not in args
    args = sp.launch_config({"speculative-draft-model-quantization": "fp8"}).args
    assert args["speculative-draft-model-quantization"] == "fp8"


def test_a_dimension_the_preflight_took_out_is_read_as_absent() -> None:
    """Trials of a sweep whose host lacked --speculative-draft-tp-size have no such
    parameter; status and export read them with the study file's full space."""
    sp = SearchSpace(make({STEPS: {"int": [1, 6]}, TOPK: {"choices": [1, 2]},
                           DRAFT: {"int": [2, 8]},
                           "speculative-draft-tp-size": {"choices": [1, 4]}}))
    eff = sp.effective({TOPK: 1, STEPS: 2})
    assert eff == {TOPK: 1, STEPS: 2, DRAFT: 3}
