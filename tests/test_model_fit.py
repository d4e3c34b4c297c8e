"""The model sampler's pieces on synthetic data with a known answer (pure, fast): the
acceptance fit, the cycle-time and factor fit, the residual, feasibility, racing and
the how-sure figure."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import numpy as np
import pytest
from optuna.trial import TrialState, create_trial

from sweeper.measure.stats import p_within
from sweeper.results import attrs as A
from sweeper.search.model.accept import AcceptModel, fit_acceptance
from sweeper.search.model.data import Shape, read_history
from sweeper.search.model.encode import Batch, Encoder
from sweeper.search.model.feasible import Feasibility
from sweeper.search.model.fit import Predictor
from sweeper.search.model.racing import Arm, race

STEPS, TOPK, DRAFT, TP = ("speculative-num-steps", "speculative-eagle-topk",
                          "speculative-num-draft-tokens", "speculative-draft-tp-size")


def space() -> list[dict[str, Any]]:
    out = []
    for s in range(1, 7):
        for k in (1, 2, 4):
            drafts = [s + 1] if k == 1 else range(2, min(16, s * k + 1) + 1)
            for d in drafts:
                for tp in (1, 4):
                    for algo in ("unset", "Ring", "Tree"):
                        out.append({STEPS: s, TOPK: k, DRAFT: d, TP: tp, "env.NCCL_ALGO": algo})
    return out


TRUE_ACCEPT = AcceptModel(np.array([0.85, 0.7, 0.6, 0.5, 0.45, 0.4]), 0.5, True)


def shape(eff: dict[str, Any]) -> Shape:
    return Shape(eff[STEPS], eff[TOPK], eff[DRAFT], str(eff[TP]))


def true_tok_s(eff: dict[str, Any], bucket: bool = False, buckets: tuple[int, ...] = (),
               per_token: float = 0.06) -> float:
    """A landscape of the model's own form, plus (``bucket``) a step it cannot express;
    with ``buckets``, the verify of k draft tokens costs what the smallest bucket >= k
    costs (CUDA graphs / kernel tiles padded): a step landscape."""
    s = shape(eff)
    L = TRUE_ACCEPT.accept_length(s)
    padded = next((b for b in buckets if b >= s.draft), s.draft)
    step = 0.4 if s.draft_tp == "1" else 0.25
    cycle = 3.0 + per_token * padded + s.steps * step * (1 + 0.2 * (s.topk - 1)) + \
        0.3 * (s.topk > 1)
    if eff["env.NCCL_ALGO"] == "Tree":
        cycle *= 0.96
    if bucket and s.draft > 8:
        cycle *= 1.08  # a CUDA-graph bucket edge: nothing in the physics says so
    return 1000.0 * L / cycle


def trial(number: int, eff: dict[str, Any], runs: list[float] | None,
          accept: float | None = None, failure: str | None = None) -> Any:
    ua: dict[str, Any] = {A.CONFIG_ID: repr(sorted(eff.items())), A.EFFECTIVE: eff,
                          A.ROLE: A.SAMPLER}
    if runs is None:
        ua[A.FAILURE] = failure
        t = create_trial(state=TrialState.PRUNED, user_attrs=ua)
    else:
        ua[A.RUNS] = runs
        if accept is not None:
            ua[A.ACCEPT] = accept
        t = create_trial(value=sum(runs) / len(runs), user_attrs=ua)
    t.number = number
    return t


def measured(effs: list[dict[str, Any]], seed: int = 0, noise: float = 0.0,
             bucket: bool = False) -> list[Any]:
    rng = random.Random(seed)
    out = []
    for i, e in enumerate(effs):
        tok = true_tok_s(e, bucket)
        runs = [tok * math.exp(rng.gauss(0, noise)) for _ in range(3)] if noise else [tok] * 3
        out.append(trial(i, e, runs, TRUE_ACCEPT.accept_length(shape(e))))
    return out


def test_acceptance_fit_recovers_known_per_depth_acceptance() -> None:
    shapes = [Shape(s, 1, s + 1, "1") for s in range(1, 7)] + \
        [Shape(3, 2, 7, "1"), Shape(2, 4, 9, "1"), Shape(4, 2, 6, "1"), Shape(1, 4, 5, "1")]
    fit = fit_acceptance(shapes, [TRUE_ACCEPT.accept_length(s) for s in shapes], 6)
    assert fit.depth[:4] == pytest.approx(TRUE_ACCEPT.depth[:4], abs=0.03)
    assert fit.branch == pytest.approx(0.5, abs=0.08)
    # and predicts trees it never saw
    for s in (Shape(3, 4, 12, "1"), Shape(5, 2, 10, "1")):
        assert fit.accept_length(s) == pytest.approx(TRUE_ACCEPT.accept_length(s), rel=0.03)


def test_acceptance_without_data_is_the_weak_prior() -> None:
    fit = fit_acceptance([], [], 4)
    assert not fit.fitted and 1.0 < fit.accept_length(Shape(3, 1, 4, "1")) < 4.0


def test_physics_fit_finds_the_optimum_it_never_measured() -> None:
    cands = space()
    rng = random.Random(1)
    effs = rng.sample(cands, 30)
    enc = Encoder(cands, {})
    model = Predictor(enc, read_history(measured(effs)))
    mean, sd = model.predict(Batch(enc, cands))
    truth = np.log([true_tok_s(e) for e in cands])
    assert np.abs(mean - truth).max() < 0.05  # within 5% everywhere
    best = int(np.argmax(truth))
    assert truth[int(np.argmax(mean))] >= truth[best] - 0.01  # the pick is within 1%
    # the Tree factor is learned: ~4% faster, all else equal
    tree = enc.level_index[("env.NCCL_ALGO", "Tree")]
    ring = enc.level_index[("env.NCCL_ALGO", "Ring")]
    g = model.physics.factor_g if model.physics else None
    assert g is not None and g[tree] - g[ring] == pytest.approx(math.log(0.96), abs=0.02)


def test_residual_absorbs_what_the_physics_misses_and_says_how_unsure() -> None:
    cands = space()
    enc = Encoder(cands, {})
    rng = random.Random(2)
    effs = rng.sample(cands, 40)
    model = Predictor(enc, read_history(measured(effs, bucket=True)))
    seen = Batch(enc, effs)
    mean, sd = model.predict(seen)
    truth = np.log([true_tok_s(e, bucket=True) for e in effs])
    # at measured points the GP follows the data (noise-free runs), bucket edge included
    assert np.abs(mean - truth).max() < 0.03
    far = [e for e in cands if e not in effs]
    _, sd_far = model.predict(Batch(enc, far))
    assert float(np.median(sd_far)) > float(np.median(sd))


def test_feasibility_blames_the_value_that_explains_the_failures() -> None:
    cands = space()
    enc = Encoder(cands, {})
    rng = random.Random(3)
    trials = []
    for i, e in enumerate(rng.sample(cands, 30)):
        if e["env.NCCL_ALGO"] == "Tree":
            trials.append(trial(i, e, None, failure="nccl"))
        else:
            trials.append(trial(i, e, [100.0, 101.0, 99.0]))
    feas = Feasibility(enc, read_history(trials))
    batch = Batch(enc, cands)
    p = feas.p_fail(batch, ["x"] * len(cands))
    tree = np.array([e["env.NCCL_ALGO"] == "Tree" for e in cands])
    assert p[tree].min() > 0.5
    assert p[~tree].max() < 0.5  # no speculative number is blamed for an NCCL fault


def test_out_of_memory_is_monotone() -> None:
    cands = space()
    enc = Encoder(cands, {})
    small = {STEPS: 2, TOPK: 2, DRAFT: 4, TP: 1, "env.NCCL_ALGO": "Ring"}
    big = {STEPS: 4, TOPK: 2, DRAFT: 8, TP: 1, "env.NCCL_ALGO": "Ring"}
    feas = Feasibility(enc, read_history([trial(0, small, [100.0] * 3),
                                          trial(1, big, None, failure="oom")]))
    bigger = {STEPS: 5, TOPK: 2, DRAFT: 10, TP: 1, "env.NCCL_ALGO": "Ring"}
    other_env = {**bigger, "env.NCCL_ALGO": "Tree"}
    p = feas.p_fail(Batch(enc, [bigger, other_env, small]), ["a", "b", "c"])
    assert p[0] >= 0.95 and p[1] >= 0.8 and p[2] < 0.5


def test_racing_measures_the_less_measured_of_overlapping_leaders() -> None:
    lead = Arm("a", (100.0, 104.0, 98.0, 101.0, 99.0, 102.0))
    close = Arm("b", (99.0, 103.0, 97.0))
    far = Arm("c", (70.0, 71.0, 69.0))
    call = race([lead, close, far], 0.03)
    assert call is not None and call.key == "b" and call.against == "a"
    assert race([lead], 0.03) is None
    # a challenger far behind is not worth a replicate
    clear = race([Arm("a", (100.0,) * 20), far], 0.01)
    assert clear is not None and clear.value < 1e-6


def test_how_sure() -> None:
    clear = p_within([100.0, 101.0, 99.0] * 3, [[80.0, 81.0, 79.0]])
    assert clear > 0.99
    tie = p_within([100.0, 104.0, 96.0], [[100.0, 104.0, 96.0]], tol=0.0)
    assert tie == pytest.approx(0.5, abs=0.01)
    # more alternatives that could be better: less sure
    assert p_within([100.0, 104.0, 96.0], [[99.0, 103.0, 95.0]] * 3) < \
        p_within([100.0, 104.0, 96.0], [[99.0, 103.0, 95.0]])


def test_a_cost_measured_with_one_knob_value_only_is_uncertain_with_another() -> None:
    """Trees at draft TP 4 measured once, with NCCL_ALGO=Ring, which was never measured at
    draft TP 4 otherwise: the tree's cost and Ring's factor there are confounded. That
    configuration itself is pinned; the same tree with another algorithm is not (its
    cost is only as known as Ring's factor at TP 4), so the model must say so (a
    separate covariance per part called it as sure as the measured one)."""
    cands = space()
    enc = Encoder(cands, {})
    chains = [e for e in cands if e[TOPK] == 1 and (e[TP] == 1 or e["env.NCCL_ALGO"] == "unset")]
    tree_ring = {STEPS: 3, TOPK: 2, DRAFT: 7, TP: 4, "env.NCCL_ALGO": "Ring"}
    tree_unset = {**tree_ring, "env.NCCL_ALGO": "unset"}
    trees_tp1 = [{STEPS: 3, TOPK: 2, DRAFT: 7, TP: 1, "env.NCCL_ALGO": a}
                 for a in ("unset", "Tree")]
    model = Predictor(enc, read_history(measured(chains + trees_tp1 + [tree_ring],
                                                 noise=0.02)))
    _, sd = model.predict(Batch(enc, [tree_ring, tree_unset]))
    assert sd[0] < 0.02  # measured: its own runs pin it
    assert sd[1] > 2 * sd[0] and sd[1] > 0.03  # the split is the factor's prior width


def test_the_model_compares_runs_prompt_by_prompt() -> None:
    """Every trial starts on the prompt set's first pass; one measured longer goes on to
    later, harder prompts. Two configurations of the same true speed: raw, the one
    measured longer looks slower by the prompts' difference; as the model reads them
    (prompt effects taken out, like the verdict) they are alike. Without positions the
    runs are read as they are."""
    ease = [1.03] * 10 + [0.97] * 20  # positions 0-9 easy, 10-29 hard
    speed = {"a": 100.0, "b": 100.0, "c": 95.0}
    trials = []
    for n, (name, count) in enumerate((("a", 10), ("b", 30), ("c", 30))):
        eff = {"speculative-num-steps": 2 + n, "speculative-eagle-topk": 1}
        t = trial(n, eff, [speed[name] * ease[p] for p in range(count)])
        t.user_attrs[A.RUN_POSITIONS] = list(range(count))
        trials.append(t)
    obs = {o.trials[0]: o for o in read_history(trials).observations}
    for t in trials:
        del t.user_attrs[A.RUN_POSITIONS]
    raw = {o.trials[0]: o for o in read_history(trials).observations}
    raw_gap = raw[0].mean / raw[1].mean - 1
    assert raw_gap == pytest.approx(1.03 / statistics.fmean(ease) - 1, rel=1e-6)
    # (prompt effects seen on few configurations are shrunk towards none, as in the
    # verdict: the difference is not removed whole with three configurations)
    assert abs(obs[0].mean / obs[1].mean - 1) < raw_gap / 2, (obs[0].mean, obs[1].mean)
    assert obs[1].mean / obs[2].mean == pytest.approx(100 / 95, rel=1e-6)


def bucketed_tok_s(eff: dict[str, Any], buckets: tuple[int, ...]) -> float:
    return true_tok_s(eff, buckets=buckets, per_token=0.25)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_verify_cost_in_steps_when_the_data_say_so(seed: int) -> None:
    """On a step landscape (5 to 8 draft tokens cost the same) the model predicts the
    bucket edge it never measured, and so finds the optimum there; a linear verify cost
    extrapolates the slope and misses it."""
    buckets = (2, 4, 8, 16)
    cands = [e for e in space() if e["env.NCCL_ALGO"] == "unset"]
    enc = Encoder(cands, {})
    truth = np.log([bucketed_tok_s(e, buckets) for e in cands])
    best = int(np.argmax(truth))
    rng = random.Random(seed)
    # measured: two configurations at each draft-token count, none within 3% of the optimum
    by_draft: dict[int, list[dict[str, Any]]] = {}
    for e, t in zip(cands, truth, strict=True):
        if t < truth[best] - 0.03:
            by_draft.setdefault(e[DRAFT], []).append(e)
    effs = [e for d in sorted(by_draft) for e in rng.sample(by_draft[d], 2)]
    trials = [trial(i, e, [bucketed_tok_s(e, buckets)] * 3, TRUE_ACCEPT.accept_length(shape(e)))
              for i, e in enumerate(effs)]
    model = Predictor(enc, read_history(trials))
    assert model.physics is not None and model.physics.steps
    mean, _ = model.predict(Batch(enc, cands))
    assert truth[int(np.argmax(mean))] >= truth[best] - 0.01
    edge = [i for i, e in enumerate(cands) if e[DRAFT] == 8 and e not in effs]
    assert np.abs(mean[edge] - truth[edge]).max() < 0.03


def test_verify_cost_stays_linear_when_the_data_are() -> None:
    cands = space()
    enc = Encoder(cands, {})
    effs = random.Random(7).sample(cands, 30)
    model = Predictor(enc, read_history(measured(effs, seed=7, noise=0.01)))
    assert model.physics is not None and not model.physics.steps
