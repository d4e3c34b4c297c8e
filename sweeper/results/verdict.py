"""Results read back from the study: per-trial rows, configurations with their
replicates pooled, the baseline, the best configuration with its uncertainty.

Everything here is derived from the storage alone, so `status`, `export` and the
dashboard agree with what the sweep recorded, and a resumed sweep sees the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.measure.stats import (
    Z95,
    Ratio,
    StartVariance,
    Stats,
    TwoLevel,
    add_start,
    consistent_starts,
    noise_measured,
    shared_prompt_effects,
    speedup,
    start_variance,
    summarize,
    two_level,
    within_variance,
    without_prompt_effects,
)
from sweeper.measure.sure import Estimate, p_within_starts, posterior_log_means
from sweeper.results import attrs as A
from sweeper.results.confirmed import confirmed_for
from sweeper.results.kind import TrialKind, kind_of
from sweeper.results.labels import short_params  # noqa: F401 - re-exported
from sweeper.results.levels import LevelRuns, level_winners, pareto_front
from sweeper.study.objective import Objective


@dataclass
class ConfigResult:
    """One configuration and every measurement of it (replicates pooled)."""

    config_id: str
    effective: dict[str, Any]
    role: str
    trials: list[int] = field(default_factory=list)
    runs: list[float] = field(default_factory=list)
    accept_lengths: list[float] = field(default_factory=list)
    launch: dict[str, Any] = field(default_factory=dict)
    # every concurrency level's pooled figures, for a study of several levels
    levels: dict[int, LevelRuns] = field(default_factory=dict)
    # the same runs by server start (a trial that reused the running server: the same
    # start), and (prompt position, tok/s) of the runs that recorded where they started
    starts: list[list[float]] = field(default_factory=list)
    positions: list[tuple[int, float]] = field(default_factory=list)
    # two levels (measure/stats.two_level): this configuration's estimate with the
    # study's between-start variance, runs compared prompt by prompt; set by config_results
    two: TwoLevel | None = None
    paired_starts: list[list[float]] = field(default_factory=list)

    @property
    def stats(self) -> Stats:
        """The pooled runs' summary. When ``config_results`` estimated two levels, its mean
        and interval are the two-level ones: each start weighed by what it says (a start
        measured longer, often *because* it led, no longer outweighs the others by its run
        count), runs compared prompt by prompt, the between-start variance in the interval.
        That is the figure configurations are ranked by (``ranked``), so the winner's
        figure, its speedup and the ties with it all agree with the ranking."""
        st = summarize(self.runs)
        if self.two is None or st.n < 2 or not self.two.se:  # no spread: as pooled
            return st
        mean = self.two.mean
        half = math.exp(Z95 * self.two.se)
        return replace(st, mean=mean, ci_low=mean / half, ci_high=mean * half)

    def by_start(self) -> list[list[float]]:
        """Runs by start for the two-level statistics (prompt-adjusted when known)."""
        return self.paired_starts or self.starts or [list(self.runs)]

    @property
    def accept_length(self) -> float | None:
        vals = [a for a in self.accept_lengths if a is not None]
        return sum(vals) / len(vals) if vals else None

    @property
    def is_baseline(self) -> bool:
        return self.role == A.BASELINE

    def objective(self, kind: str = "mean") -> float:
        st = self.stats
        return {"mean": st.mean, "median": st.median, "min": st.min}.get(kind, st.mean)


def _role(t: FrozenTrial) -> str:
    return str(t.user_attrs.get(A.ROLE, "sampler"))


def config_results(trials: Sequence[FrozenTrial], tau2: float | None = None
                   ) -> list[ConfigResult]:
    """COMPLETE trials grouped by configuration; a configuration measured in several
    trials is one configuration whose runs are pooled (and kept by start: ``two_levels``;
    ``tau2``: the between-start variance to use, default: what these trials show)."""
    groups: dict[str, ConfigResult] = {}
    for t in trials:
        if t.state != TrialState.COMPLETE or A.CONFIG_ID not in t.user_attrs \
                or kind_of(t) == TrialKind.REPEAT:
            continue  # a repeat resolved without a restart measured nothing
        cid = str(t.user_attrs[A.CONFIG_ID])
        res = groups.get(cid)
        if res is None:
            res = groups[cid] = ConfigResult(cid, dict(t.user_attrs.get(A.EFFECTIVE, {})),
                                             _role(t) if _role(t) == A.BASELINE else "config",
                                             launch=dict(t.user_attrs.get(A.LAUNCH, {})))
        res.trials.append(t.number)
        runs = t.user_attrs.get(A.RUNS) or ([t.value] if len(t.values or []) == 1 else [])
        res.runs.extend(float(v) for v in runs)
        add_start(res.starts, [float(v) for v in runs], t.user_attrs.get(A.STARTUP) == 0)
        where = t.user_attrs.get(A.RUN_POSITIONS) or []
        if len(where) == len(runs):
            res.positions.extend((int(p), float(v)) for p, v in zip(where, runs, strict=True)
                                 if p is not None)
        if t.user_attrs.get(A.ACCEPT) is not None:
            res.accept_lengths.append(float(t.user_attrs[A.ACCEPT]))
        for level, summary in (t.user_attrs.get(A.LEVELS) or {}).items():
            res.levels.setdefault(int(level), LevelRuns(int(level))).add(summary)
    out = [g for g in groups.values() if g.runs]
    two_levels(out, tau2)
    return out


def two_levels(results: Sequence[ConfigResult], tau2: float | None = None) -> StartVariance:
    """Give every result its two-level estimate: the between-start variance pooled over
    them all (``tau2`` when given), and runs compared prompt by prompt where they recorded
    their prompt positions (the speculative configurations' shared prompt effects taken
    out: measure/stats.prompt_effects)."""
    eff = shared_prompt_effects([r.positions for r in results if not r.is_baseline])
    for r in results:
        r.paired_starts = [] if r.is_baseline else \
            without_prompt_effects(r.positions, r.starts, eff)
    groups = [r.by_start() for r in results]
    sv = start_variance(groups)
    if tau2 is not None:
        sv = replace(sv, tau2=tau2)
    floor = math.sqrt(within_variance(groups))
    for r in results:
        r.two = two_level(r.by_start(), sv.tau2, floor)
    return sv


def next_prompt_round(trials: Sequence[FrozenTrial], config_id: str) -> int:
    """Where the next benchmark of ``config_id`` starts in the prompt set's one order
    (measure/client.run_benchmark's ``first_round``): after every run its earlier trials
    made, so a replicate or a confirm visit continues where the previous batch stopped."""
    done = 0
    for t in trials:
        ua = t.user_attrs
        if ua.get(A.CONFIG_ID) == config_id and t.state == TrialState.COMPLETE \
                and not ua.get(A.REPEAT_OF):
            done += len(ua.get(A.RUNS) or []) + int(ua.get(A.RUNS_FLAGGED) or 0)
    return done


def baseline_result(results: Sequence[ConfigResult]) -> ConfigResult | None:
    return next((r for r in results if r.is_baseline), None)


def ranked(results: Sequence[ConfigResult], objective: str = "mean") -> list[ConfigResult]:
    """Best first. By mean (the default objective): each configuration's two-level
    estimate (its starts weighed by what each says, the between-start variance included),
    the leaders shrunk towards one another (measure/sure.posterior_log_means: a lead that
    rests on one lucky start is discounted by as much as its error allows). The median
    and the minimum rank by the pooled runs' statistic, as measured."""
    if objective != "mean" or not results or any(r.two is None for r in results):
        return sorted(results, key=lambda r: r.objective(objective), reverse=True)
    est = [Estimate(math.log(two.mean), two.se) for two in (r.two for r in results) if two]
    score = dict(zip((r.config_id for r in results), posterior_log_means(est), strict=True))
    return sorted(results, key=lambda r: (score[r.config_id], r.objective(objective)),
                  reverse=True)


@dataclass
class Verdict:
    """The best configuration and the baseline it is compared with. After a confirm
    phase its winner wins, and every start of it counts, the sweep's and the confirm
    phase's interleaved ones: on two levels the sweep's start (which may lead *because*
    it was fast) weighs as one start among several.

    A study of several levels also has a winner per level (``per_level``: every
    measurement of each configuration pooled, lossy ones left out), and a ``pareto``
    study has no single best: ``best`` is None and ``front`` holds the configurations no
    other beats on both tok/s per request and total tok/s."""

    best: ConfigResult | None
    baseline: ConfigResult | None
    confirmed: bool
    goal: Objective = field(default_factory=lambda: Objective("at", (1,), at=1))
    per_level: dict[int, ConfigResult] = field(default_factory=dict)
    front: list[ConfigResult] = field(default_factory=list)
    # estimated probability that the best is truly within 1% of every other configuration
    # it was chosen from (measure/sure.p_within_starts: two levels, the winner's curse);
    # None with nothing to compare
    sure: float | None = None
    # the between-start spread measured on this node (measure/stats.start_variance)
    start: StartVariance | None = None
    # how many other configurations ``sure`` compares the best with (the baseline counted)
    compared: int = 0

    def start_text(self) -> str | None:
        """The between-start spread in words, for the summary (None: not measured yet)."""
        if self.start is None or not self.start.configs:
            return None
        n = self.start.configs
        source = f"{n} configuration{'' if n == 1 else 's'} measured on two starts or more"
        if self.start.sd < 0.0005:  # the estimate at its floor: the starts' means agreed
            # more closely than their runs' noise allows; "0.0%" would read as measured
            return (f"server starts differ by less than their runs' noise can show (from "
                    f"{source})")
        lo, hi = self.start.sd_interval()
        prior = ""
        if self.start.prior_df > 0:  # with few replicates the figure is mostly this guess
            worth = f"{self.start.prior_df:g} such configuration" + \
                ("" if self.start.prior_df == 1 else "s")
            prior = f", and a prior guess of {self.start.prior_sd:.1%} counted as {worth}"
        return (f"server starts differ by {self.start.sd:.1%} [{lo:.1%}, {hi:.1%}] (sd of a "
                f"start's speed, with its 95% interval; from {source}{prior})")

    @property
    def levels(self) -> tuple[int, ...]:
        return self.goal.levels


SURE_TOL = 0.01


def _sure(best: ConfigResult | None, pool: Sequence[ConfigResult], tau2: float
          ) -> float | None:
    """Every measurement of the winner (sweep, racing and confirm runs pooled) against
    every other configuration measured that could win, start by start (two levels)."""
    if best is None:
        return None
    mine = next((r for r in pool if r.config_id == best.config_id), best).by_start()
    rest = [r.by_start() for r in _rivals(best, pool)]
    if not rest or not noise_measured([mine, *rest]):
        return None
    return p_within_starts(mine, rest, tau2, SURE_TOL,
                           math.sqrt(within_variance([mine, *rest])))


def _rivals(best: ConfigResult | None, pool: Sequence[ConfigResult]) -> list[ConfigResult]:
    """The configurations ``_sure`` weighs the best against: every other one measured."""
    if best is None:
        return []
    return [r for r in pool if r.config_id != best.config_id and r.runs]


def study_goal(study: optuna.Study) -> Objective:
    """The levels and objective the study was created with (results/attrs.py OBJECTIVE)."""
    return Objective.from_signature(study.user_attrs.get(A.OBJECTIVE))


def cannot_win(confirmed: dict[str, Any] | None) -> dict[str, str]:
    """The configurations the last confirm phase ruled out (run/confirm.py), and why:
    outputs unlike the baseline's at temperature 0, or a fresh start that failed."""
    confirmed = confirmed or {}
    out = {cid: f"differs on prompts {prompts}" for cid, prompts in
           (confirmed.get("lossless_mismatches") or {}).items() if prompts}
    for cid, why in (confirmed.get("failed_starts") or {}).items():
        out.setdefault(cid, f"a fresh start failed ({str(why).split(':')[0]})")
    return out


def verdict(study: optuna.Study, objective: str = "mean",
            trials: Sequence[FrozenTrial] | None = None) -> Verdict:
    trials = trials if trials is not None else study.get_trials(deepcopy=False)
    confirmed = confirmed_for(study, trials)
    goal = study_goal(study)
    lossy = set(cannot_win(confirmed))
    if len(goal.levels) > 1:
        pooled = [r for r in config_results(trials) if r.config_id not in lossy]
        per_level = level_winners(pooled, goal.levels)
        if goal.multi:
            return Verdict(None, baseline_result(config_results(trials)), False, goal,
                           per_level, pareto_front(pooled, goal))
        v = _verdict(trials, confirmed, objective, lossy)
        return Verdict(v.best, v.baseline, v.confirmed, goal, per_level, sure=v.sure,
                       start=v.start, compared=v.compared)
    return _verdict(trials, confirmed, objective, lossy)


def _verdict(trials: Sequence[FrozenTrial], confirmed: dict[str, Any] | None, objective: str,
             lossy: set[str]) -> Verdict:
    results = config_results(trials)
    sv = start_variance([r.by_start() for r in results])
    # configurations the last confirm phase found lossy (outputs unlike the baseline's)
    # never win, here either (run/confirm.py decides which)
    top = [r for r in ranked(results, objective) if r.config_id not in lossy]
    if confirmed:
        # the runs of the last confirm phase, exactly as its table showed them
        # its winner, every start of it pooled, the sweep's and the confirm phase's,
        # unless a sweep start disagrees with the fresh ones beyond what starts differ
        # by (a lucky start: the winner's curse): then the fresh runs alone
        numbers = {n for ns in (confirmed.get("trials") or {}).values() for n in ns}
        fresh = config_results([t for t in trials if kind_of(t) == TrialKind.CONFIRM
                                and (not numbers or t.number in numbers)], sv.tau2)
        swept = config_results([t for t in trials if kind_of(t) != TrialKind.CONFIRM],
                               sv.tau2)

        def pooled(f: ConfigResult | None) -> ConfigResult | None:
            whole = next((r for r in results if f and r.config_id == f.config_id), None)
            mine = next((r for r in swept if f and r.config_id == f.config_id), None)
            if f is None or whole is None or mine is None:
                return f
            keep = consistent_starts(f.by_start(), mine.by_start(), sv.tau2)
            return whole if len(keep) == len(mine.by_start()) else f

        winner = next((r for r in fresh if r.config_id == confirmed.get("winner")), None)
        if winner is not None:
            best = pooled(winner)
            return Verdict(best, pooled(baseline_result(fresh)), True,
                           sure=_sure(best, top, sv.tau2), start=sv,
                           compared=len(_rivals(best, top)))
    best = top[0] if top else None
    return Verdict(best, baseline_result(results), False, sure=_sure(best, top, sv.tau2),
                   start=sv, compared=len(_rivals(best, top)))


def best_result(study: optuna.Study, objective: str = "mean",
                trials: Sequence[FrozenTrial] | None = None) -> ConfigResult | None:
    """The confirmed winner when a confirm phase ran, else the best pooled configuration."""
    return verdict(study, objective, trials).best


def speedup_over(result: ConfigResult, base: ConfigResult | None) -> Ratio | None:
    """``result`` over ``base``; with two-level estimates (``config_results``), the
    interval includes the between-start variance of both."""
    if base is None or not result.runs or not base.runs:
        return None
    if result.two is not None and base.two is not None:
        # the two-level means (``ConfigResult.stats``'s): the figures the summary prints
        ratio = result.two.mean / base.two.mean
        se = math.hypot(result.two.se, base.two.se)
        return Ratio(ratio, ratio * math.exp(-Z95 * se), ratio * math.exp(Z95 * se))
    return speedup(result.runs, base.runs)


def fmt_tok_s(st: Stats) -> str:
    if st.n == 0:
        return "-"
    if st.n == 1 or math.isnan(st.ci_low):
        return f"{st.mean:.1f}"
    return f"{st.mean:.1f} ± {(st.ci_high - st.ci_low) / 2:.1f}"


def fmt_ratio(r: Ratio | None) -> str:
    if r is None:
        return "-"
    pct = (r.ratio - 1) * 100
    if math.isnan(r.low) or math.isnan(r.high):
        return f"{pct:+.1f}%"
    return f"{pct:+.1f}% [{(r.low - 1) * 100:+.1f}, {(r.high - 1) * 100:+.1f}]"
