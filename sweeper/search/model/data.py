"""What the model learns from: the trials measured so far, read as *effective*
configurations (SGLang's flag names after its rules), never as Optuna parameter names, so
the model works whatever the space calls its parameters.

One ``Observation`` per distinct configuration (replicates pooled, as the verdict pools
them); one ``Outcome`` per configuration that was started (served or failed), for the
feasibility model. Proposals skipped as predicted failures are not evidence (nothing ran)
but are remembered so they are not proposed again. Confirm-phase trials are evidence like
any other measurement (fresh runs of the same configuration).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from sweeper.measure.stats import (
    add_start,
    shared_prompt_effects,
    start_variance,
    two_level,
    without_prompt_effects,
)
from sweeper.results import attrs as A
from sweeper.results.kind import TrialKind, kind_of
from sweeper.study import DRAFT, STEPS, TOPK

DRAFT_TP = "speculative-draft-tp-size"
ATTN_DP = "attn-dp-size"  # upstream SGLang's draft placement: the draft in each DP group
PHYSICS_KEYS = (STEPS, TOPK, DRAFT, DRAFT_TP, ATTN_DP)


@dataclass(frozen=True)
class Shape:
    """The speculative numbers of one configuration (None: not speculative)."""

    steps: int
    topk: int
    draft: int
    draft_tp: str  # a category: its cost is learned per value

    @classmethod
    def of(cls, eff: Mapping[str, Any], fixed: Mapping[str, Any]) -> Shape | None:
        def get(key: str) -> Any:
            return eff.get(key, fixed.get(key))

        steps, topk = get(STEPS), get(TOPK)
        if steps is None:
            return None
        steps = int(steps)
        topk = int(topk) if topk is not None else 1
        draft = get(DRAFT)
        draft = steps + 1 if topk == 1 or draft is None else int(draft)
        placement = get(DRAFT_TP) or (f"attn-dp {get(ATTN_DP)}" if get(ATTN_DP) else None)
        return cls(steps, topk, draft, str(placement or "default"))


def others(eff: Mapping[str, Any]) -> dict[str, Any]:
    """Every knob the physics does not model (NCCL, env.*, any flag)."""
    return {k: v for k, v in eff.items() if k not in PHYSICS_KEYS}


@dataclass
class Observation:
    """One configuration's pooled measurements."""

    config_id: str
    effective: dict[str, Any]
    runs: list[float] = field(default_factory=list)
    accepts: list[float] = field(default_factory=list)
    trials: list[int] = field(default_factory=list)
    starts: list[list[float]] = field(default_factory=list)  # runs by server start (trial)
    tau2: float = 0.0  # the study's between-start variance (read_history sets it)
    # (prompt position, tok/s) of the runs whose trial recorded where they started
    # (results/attrs.RUN_POSITIONS): all of them when as many as ``runs``
    positions: list[tuple[int, float]] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.runs)

    @property
    def log_mean(self) -> float:
        return math.log(self.mean)

    def log_se2(self, spread: float) -> float:
        """Squared standard error of log(mean). ``spread``: the study's typical relative
        run-to-run spread: three runs' own spread is itself too noisy to trust (they can
        agree by chance), and one server's spread hardly depends on the configuration."""
        n = len(self.runs)
        own = statistics.stdev(self.runs) / self.mean if n >= 8 else spread
        if self.tau2 and self.starts:  # runs on one start share its speed (stats.two_level)
            return two_level(self.starts, self.tau2, max(own, spread)).se ** 2
        return max(own, spread) ** 2 / n

    @property
    def accept(self) -> float | None:
        return statistics.fmean(self.accepts) if self.accepts else None


@dataclass(frozen=True)
class Outcome:
    config_id: str
    effective: dict[str, Any]
    failed: bool
    kind: str | None


@dataclass
class History:
    """Everything the model knows, from the study's trials alone."""

    observations: list[Observation]
    outcomes: list[Outcome]
    skipped: dict[str, dict[str, Any]]  # config_id -> effective: the sweep will not run it
    baseline: Observation | None
    failed_ids: set[str]

    @property
    def spread(self) -> float:
        """The typical run-to-run relative spread of this study's measurements."""
        cvs = [statistics.stdev(o.runs) / o.mean for o in self.observations if len(o.runs) > 1]
        return statistics.median(cvs) if cvs else 0.05


def read_history(trials: Sequence[FrozenTrial]) -> History:
    obs: dict[str, Observation] = {}
    outcomes: dict[str, Outcome] = {}
    skipped: dict[str, dict[str, Any]] = {}
    baseline: Observation | None = None
    for t in trials:
        ua = t.user_attrs
        cid = ua.get(A.CONFIG_ID)
        kind = kind_of(t)
        if cid is None or t.state not in (TrialState.COMPLETE, TrialState.PRUNED) \
                or kind == TrialKind.REPEAT:  # an accidental repeat told an earlier mean: no runs
            continue
        eff = dict(ua.get(A.EFFECTIVE) or {})
        if t.state == TrialState.PRUNED:
            if kind == TrialKind.SKIPPED:
                skipped[cid] = eff
            elif cid not in outcomes or not outcomes[cid].failed:
                outcomes[cid] = Outcome(cid, eff, True, ua.get(A.FAILURE))
            continue
        raw = [float(v) for v in ua.get(A.RUNS) or ([t.value] if t.value else [])]
        runs = [r for r in raw if r > 0]
        if not runs:
            continue
        where = ua.get(A.RUN_POSITIONS) or []
        placed = [(int(p), v) for p, v in zip(where, raw, strict=True)
                  if v > 0 and p is not None] if len(where) == len(raw) else []
        if ua.get(A.ROLE) == A.BASELINE:
            baseline = baseline or Observation(cid, eff)
            baseline.runs.extend(runs)
            add_start(baseline.starts, runs, ua.get(A.STARTUP) == 0)
            continue
        o = obs.setdefault(cid, Observation(cid, eff))
        o.runs.extend(runs)
        o.positions.extend(placed)
        add_start(o.starts, runs, ua.get(A.STARTUP) == 0)
        o.trials.append(t.number)
        acc = ua.get(A.ACCEPT) or ua.get(A.ACCEPT_LOG)
        if acc:
            o.accepts.append(float(acc))
        outcomes.setdefault(cid, Outcome(cid, eff, False, None))
    _compare_prompt_by_prompt(list(obs.values()))
    failed = {c for c, o in outcomes.items() if o.failed}
    every = [*obs.values(), *([baseline] if baseline else [])]
    # The model takes the start-to-start spread in only once replicates on other starts
    # have shown it (the prior alone would blur every 1% effect it must learn); the
    # intervals, racing and "measure longer" use the prior from the first trial.
    sv = start_variance([o.starts for o in every])
    for o in every:
        o.tau2 = sv.tau2 if sv.configs else 0.0
    return History(list(obs.values()), list(outcomes.values()), skipped, baseline, failed)


def _compare_prompt_by_prompt(observations: Sequence[Observation]) -> None:
    """Take the prompts' shared effects out of every run, as the verdict does
    (results/verdict.two_levels, measure/stats.prompt_effects). Every trial starts on the
    prompt set's first pass and a configuration measured longer or again goes on to the
    later prompts, which may be harder on average (a story is less predictable than code):
    pooled raw, the configurations close to the best, the ones measured most, were ranked
    down for their prompts by as much as the 1% the sweep chases."""
    eff = shared_prompt_effects([o.positions for o in observations])
    if not eff:
        return
    for o in observations:
        o.starts = without_prompt_effects(o.positions, o.starts, eff)
        o.runs = [v for s in o.starts for v in s]
