"""The confirm phase: re-measure the top configurations and the baseline, interleaved.

A sweep picks its leader on measurements that were selected *because* they were high
(the winner's curse): with ~14% run-to-run spread chasing ~5% gains, one lucky run can
top the table. The confirm phase measures the top K configurations and the baseline
again, in rounds (A B C, then C A B, ...) so that drift over time hits all of them
alike, and decides on every start of each: the fresh ones and the sweep's that agree with
them (a sweep start lucky beyond what starts differ by is left out), every run compared
prompt by prompt (each visit goes on along its configuration's prompt order, so two
contenders' fresh starts send different prompts). The outputs at
temperature 0 are compared with the baseline's on the same prompts: speculative decoding
must be lossless, so a configuration whose outputs differ (a broken draft or verify
kernel) cannot win, however fast it is; when none is lossless, the baseline wins. The
table (confirm_table.py) says so.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial

import sweeper.results.verdict as R
from sweeper.errors import (
    ConfigurationFailure,
    ConfirmFailed,
    InfrastructureError,
    InputError,
    one_line,
)
from sweeper.launch import LaunchConfig
from sweeper.measure import BenchResult, compare_outputs
from sweeper.measure.stats import (
    Ratio,
    Starts,
    Stats,
    consistent_starts,
    shared_prompt_effects,
    speedup,
    start_variance,
    summarize,
    two_level,
    without_prompt_effects,
)
from sweeper.results import attrs as A
from sweeper.results.confirmed import confirmed_for, record_confirmed
from sweeper.results.groups import trial_groups
from sweeper.results.headline import confirm_hint, mark_best
from sweeper.results.kind import TrialKind, kind_of
from sweeper.run.confirm_runs import VisitRuns, visit_runs
from sweeper.run.session import HostSession
from sweeper.run.trial import Measurement
from sweeper.study import StudySpec


@dataclass
class Candidate:
    result: R.ConfigResult
    config: LaunchConfig
    params: dict[str, Any]
    distributions: dict[str, optuna.distributions.BaseDistribution]
    runs: list[float] = field(default_factory=list)
    starts: list[list[float]] = field(default_factory=list)  # this phase's runs by visit
    texts: dict[int, str] = field(default_factory=dict)  # prompt index -> output
    trials: list[int] = field(default_factory=list)  # this phase's trials of it
    failed: str = ""  # why a fresh start of it failed in this phase ("" when none did)

    @property
    def stats(self) -> Stats:
        return summarize(self.runs)

    def value(self, aggregate: str) -> float:
        """The fresh runs' ``benchmark.aggregate`` (mean, median or min)."""
        return float(getattr(self.stats, aggregate))


class ConfirmStopped(Exception):
    """The confirm phase was told to stop (``run_confirm``'s ``stop``: a Ctrl-C while
    several groups confirm at once, run/confirm_groups.py); its visit in flight is recorded
    as interrupted, and nothing more is measured or decided."""


@dataclass
class ConfirmOutcome:
    candidates: list[Candidate]
    baseline: Candidate | None
    winner: Candidate
    speedups: dict[str, Ratio | None]
    lossless_mismatches: dict[str, list[int]]
    aggregate: str = "mean"  # the study's statistic of the runs, which ranks them
    # config_id -> (the score that ranked it, server starts in it): with the mean, every
    # start of the sweep's and this phase's pooled, so the winner need not lead the table
    # of fresh runs (confirm_table.print_confirm says so when it does not)
    pooled: dict[str, tuple[float, int]] = field(default_factory=dict)

    @property
    def failed(self) -> dict[str, str]:
        """The configurations a fresh start of failed in this phase, and why."""
        return {c.result.config_id: c.failed for c in self.candidates if c.failed}

    def value(self, c: Candidate) -> float:
        return c.value(self.aggregate)


def _texts(result: BenchResult) -> dict[int, str]:
    """Temperature-0 outputs by prompt: the measured runs', or the warm-up's (always at 0)
    when the study measures at another temperature."""
    out: dict[int, str] = {}
    for run in result.runs if result.spec.temperature == 0 else result.warmup_runs:
        for req in run.requests:
            if req.ok and req.prompt_index not in out:
                out[req.prompt_index] = req.text
    return out


def leaders(trials: Sequence[FrozenTrial], objective: str, top: int) -> list[str]:
    """The configurations a confirm phase of the top ``top`` would re-measure now (of
    ``trials``: one group's): ranked on the sweep's measurements alone, so that the
    confirm phase's own runs (which pool into the verdict) do not make the leaders look
    changed right after it."""
    return [r.config_id for r in _ranked_by_sweep(list(trials), objective)[:top]]


def _ranked_by_sweep(trials: list[FrozenTrial], objective: str) -> list[R.ConfigResult]:
    swept = R.config_results([t for t in trials if kind_of(t) != TrialKind.CONFIRM])
    return [r for r in R.ranked(swept, objective) if not r.is_baseline]


def leaders_changed(study: optuna.Study, objective: str, top: int,
                    trials: Sequence[FrozenTrial] | None = None) -> bool:
    """Whether the leaders of ``trials`` (one group's; default: the study's) differ from
    those the last confirm phase on them measured (a top-up that did not change them needs
    no new confirm phase)."""
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    last = confirmed_for(study, trials) or {}
    return sorted(last.get("leaders", [])) != sorted(leaders(trials, objective, top))


MODEL_CONFIRM_TOP = 2  # leaders the model sampler's confirm phase measures again


@dataclass(frozen=True)
class ConfirmPlan:
    top: int  # how many leaders (0: no confirm phase)
    rounds: int  # interleaved visits, one restart each per configuration
    runs: int  # runs per configuration, spread over the rounds
    racing: bool = False  # racing narrowed the leaders: the top few only

    @property
    def restarts(self) -> int:
        return self.rounds * (self.top + 1) if self.top else 0


def confirm_plan(spec: StudySpec, sampler: str | None = None, top: int | None = None,
                 skip: bool = False) -> ConfirmPlan:
    """The confirm phase a sweep ends with (the CLI runs it; the bench charges it). With
    the model sampler, racing re-measured the overlapping leaders during the sweep: what
    is left is the top two (at most ``confirm_top``) and the baseline on two fresh
    interleaved starts each, their outputs checked against the baseline's (6 restarts,
    not 2 (K + 1)). An explicit ``top`` (``--confirm K``) gets the full phase."""
    if skip:
        return ConfirmPlan(0, 0, 0)
    if top is None and (sampler or spec.sweep.sampler) == "model" and spec.sweep.confirm_top:
        # two interleaved starts each: one fresh start says as little about a
        # configuration as one sweep start (server starts differ). Two leaders, not one:
        # with starts 1.5% apart the sweep's first and second are often within each
        # other's errors, and the emulated Kimi sweeps picked 1.1-1.8% below the best
        # they had measured when only the first was confirmed (bench/search_efficiency.py)
        return ConfirmPlan(min(MODEL_CONFIRM_TOP, spec.sweep.confirm_top), 2,
                           spec.sweep.confirm_runs, racing=True)
    k = spec.sweep.confirm_top if top is None else top
    return ConfirmPlan(k, 2, spec.sweep.confirm_runs)


@dataclass(frozen=True)
class ConfirmStart:
    """What the end of ``optimize`` does about the confirm phase: the plan, whether to run
    it now, and what to tell the user (in order)."""

    plan: ConfirmPlan
    run: bool
    notes: tuple[str, ...] = ()


def after_sweep(study: optuna.Study, spec: StudySpec, sampler: str | None, top: int | None,
                skip: bool, interrupted: bool,
                trials: Sequence[FrozenTrial] | None = None) -> ConfirmStart:
    """Whether the sweep that just ended goes on into its confirm phase: not when it was
    interrupted, when nothing speculative was measured, or when the leaders are the ones
    the last confirm phase measured (a top-up that did not change them). ``trials``: one
    group's (default: the study's)."""
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    plan = confirm_plan(spec, sampler, top, skip)
    notes: list[str] = []
    if plan.racing:
        notes.append("Racing narrowed the leaders during the sweep: the confirm phase "
                     f"measures the top {plan.top} and the baseline on two fresh starts "
                     "each and checks their temperature-0 outputs against the baseline's.")
    if plan.top <= 0 or interrupted:
        return ConfirmStart(plan, False, tuple(notes))
    objective = spec.benchmark.aggregate
    if not leaders(trials, objective, plan.top):
        notes.append("Confirm phase skipped: no speculative configuration was measured.")
        return ConfirmStart(plan, False, tuple(notes))
    if not leaders_changed(study, objective, plan.top, trials):
        one = plan.top == 1
        which = "the leader is the configuration" if one else \
            f"the top {plan.top} are the configurations"
        notes.append(f"Confirm phase skipped: {which} the last confirm phase measured "
                     f"(`sweeper confirm` measures {'it' if one else 'them'} again).")
        return ConfirmStart(plan, False, tuple(notes))
    return ConfirmStart(plan, True, tuple(notes))


def run_confirm(sweep: HostSession, top: int, runs: int, rounds: int = 2,
                visit: VisitRuns | None = None,
                stop: threading.Event | None = None) -> ConfirmOutcome:
    """Measure the top ``top`` configurations and the baseline ``runs`` times each (at
    least: as long as a start is worth, confirm_runs.visit_runs), spread over ``rounds``
    interleaved visits; record the verdict in the study. ``visit``: the runs per visit
    the caller already announced (else decided here). ``stop``: set from another thread,
    the phase ends with ``ConfirmStopped`` (its server stopped by whoever set it)."""
    study = sweep.study
    if sweep.spec.objective.multi:
        raise InputError(f"{sweep.spec.path}: objective: pareto has a front, not one winner "
                         "to confirm; confirm needs {at: LEVEL} or {mix: ...}")
    measured = sweep.trials  # this host's group's (results compare within one)
    trials = {t.number: t for t in measured()}
    results = R.config_results(list(trials.values()))
    base_res = R.baseline_result(results)
    ranked = _ranked_by_sweep(list(trials.values()), sweep.bench_spec.aggregate)
    if not ranked:
        raise InputError(f"{sweep.spec.path}: nothing to confirm: no speculative configuration "
                         f"of study {sweep.spec.name!r} has been measured yet")
    chosen = ranked[:top] + ([base_res] if base_res else [])
    cands: list[Candidate] = []
    for res in chosen:
        first = trials[res.trials[0]]
        cands.append(Candidate(res, sweep.config_of(res), dict(first.params),
                               dict(first.distributions)))
    per_visit = (visit or visit_runs(list(trials.values()), sweep.bench_spec, runs,
                                     rounds)).runs
    visits, total = 0, max(1, rounds) * len(cands)
    sweep.report.progress(0, total)
    bench = sweep.bench_spec.model_copy(update={"runs": per_visit})
    for rnd in range(max(1, rounds)):
        # rotate the order each round so no configuration always goes first
        order = cands[rnd % len(cands):] + cands[:rnd % len(cands)]
        for cand in order:
            label = R.short_params(cand.result.effective)
            visits += 1
            if stop is not None and stop.is_set():
                raise ConfirmStopped
            if cand.failed:  # its later visits are not made: it cannot win
                sweep.report.progress(visits, total)
                continue
            try:
                m, number = _visit_retrying(
                    sweep, cand, f"confirm-{cand.result.config_id}-{rnd}", bench,
                    f"confirm round {rnd + 1}/{rounds}: {label}: ",
                    R.next_prompt_round(measured(), cand.result.config_id), stop)
            except ConfigurationFailure as exc:
                # A configuration that served in the sweep and fails a fresh start now
                # (a hang, an OOM at a start's own memory layout, a crash) is one a
                # production launch cannot trust: it is recorded (the failed trial), left
                # out of the winner, and the phase goes on with the others. Ending the
                # whole run here would lose the verdict on everything else measured.
                cand.failed = f"{exc.kind}: {one_line(str(exc), 300)}"
                sweep.report.line(f"confirm {rnd + 1}/{rounds}: {label}: a fresh start "
                                  f"failed ({one_line(str(exc), 300)}): it cannot win")
                sweep.report.progress(visits, total)
                continue
            cand.trials.append(number)
            sweep.report.progress(visits, total)
            ok_runs = sweep.recorder.series(m)  # the objective's runs (every level)
            cand.runs.extend(ok_runs)
            cand.starts.append(list(ok_runs))
            for idx, text in _texts(m.bench).items():
                cand.texts.setdefault(idx, text)
            sweep.report.line(f"confirm {rnd + 1}/{rounds}: {label}: "
                              f"{summarize(ok_runs).mean:.1f} tok/s")
    sweep.stop_server()
    base = next((c for c in cands if c.result.is_baseline), None)
    # the ones a fresh start of failed are not contenders: a winner must start every time
    contenders = [c for c in cands if not c.result.is_baseline and not c.failed]
    if base is not None and not base.runs:
        base = None  # it failed its every fresh start: nothing to compare the outputs with
    if not contenders and base is None:
        raise ConfirmFailed(
            "every configuration of the confirm phase failed a fresh start ("
            + "; ".join(f"{R.short_params(c.result.effective)}: {c.failed}" for c in cands)
            + "): the host may be in trouble; check it, then run "
            f"`{confirm_hint(sweep.study, sweep.group)}`")
    mismatches: dict[str, list[int]] = {}
    if base is not None:
        keys = sorted(base.texts)
        for c in contenders:
            common = [k for k in keys if k in c.texts]
            diff = compare_outputs([base.texts[k] for k in common], [c.texts[k] for k in common])
            mismatches[c.result.config_id] = [common[i] for i in diff]
    # Lossy configurations cannot win: a fast server that changes the answers is broken.
    lossless = [c for c in contenders if not mismatches.get(c.result.config_id)]
    # every start counts, the sweep's and this phase's (two levels: measure/stats), all of
    # them compared prompt by prompt
    paired = _paired_starts(results, cands, measured())
    tau2 = start_variance([sweep_s for sweep_s, _ in paired.values()]
                          + [fresh for _, fresh in paired.values() if fresh]).tau2
    agg = sweep.bench_spec.aggregate

    def pool(c: Candidate) -> tuple[float, int]:
        """(the study's own aggregate, the starts in it): a mean pools every start, this
        phase's and the sweep's consistent with them (no lucky sweep start)."""
        if agg != "mean":
            return c.value(agg), len(c.starts)
        sweep_s, fresh = paired[c.result.config_id]
        starts = [*consistent_starts(fresh, sweep_s, tau2), *fresh]
        return two_level(starts, tau2).mean, len(starts)

    pooled = {c.result.config_id: pool(c)
              for c in [*lossless, *([base] if base is not None else [])]}

    def score(c: Candidate) -> float:
        return pooled[c.result.config_id][0]

    winner = max(lossless, key=score) if lossless else base
    if base is not None and (winner is None or score(base) > score(winner)):
        winner = base  # nothing lossless beat "no speculation": export that, honestly
    if winner is None:  # no baseline to compare with: nothing could be checked
        winner = max(contenders, key=lambda c: c.value(agg))
    speedups = {c.result.config_id: (speedup(c.runs, base.runs)
                                     if base and c is not base and c.runs else None)
                for c in cands}
    # The verdict's state stays small (the dashboard lists study attributes); the whole
    # phase, every run included, is a study artifact (confirm.json) beside it.
    record_confirmed(study, sweep.group, {
        "winner": winner.result.config_id,
        "leaders": [c.result.config_id for c in contenders],
        "trials": {c.result.config_id: c.trials for c in cands},
        "lossless_mismatches": {k: v for k, v in mismatches.items() if v},
        "failed_starts": {c.result.config_id: c.failed for c in cands if c.failed},
        "runs_per_config": per_visit * rounds, "rounds": rounds,
    })
    several = len(trial_groups(study.get_trials(deepcopy=False))) > 1
    name = f"confirm-{sweep.group}.json" if several and sweep.group else "confirm.json"
    sweep.recorder.upload_study_json(name, {
        "group": sweep.group,
        "winner": winner.result.config_id, "runs_per_config": per_visit * rounds,
        "rounds": rounds,
        "results": [{"config_id": c.result.config_id, "effective": c.result.effective,
                     "baseline": c.result.is_baseline, "runs": c.runs, "trials": c.trials,
                     "mean": c.stats.mean if c.runs else None,
                     "ci95": [c.stats.ci_low, c.stats.ci_high] if c.runs else None,
                     "speedup": _ratio_dict(speedups.get(c.result.config_id)),
                     "lossless_mismatches": mismatches.get(c.result.config_id, []),
                     "failed_start": c.failed or None}
                    for c in cands]})
    with contextlib.suppress(Exception):  # the dashboard's note is a courtesy
        mark_best(study, sweep.bench_spec.aggregate)
    return ConfirmOutcome(cands, base, winner, speedups, mismatches, agg, pooled)


def _paired_starts(results: list[R.ConfigResult], cands: list[Candidate],
                   trials: list[FrozenTrial]) -> dict[str, tuple[Starts, Starts]]:
    """config_id -> (the sweep's starts, this phase's starts), each run divided by its
    prompt's effect estimated over the sweep's runs and this phase's together
    (measure/stats.prompt_effects). A visit continues a configuration's prompt order where
    its sweep runs stopped, so two contenders' fresh starts ran on different prompts; on a
    server whose acceptance depends on the prompt, raw means would rank the prompts."""
    mine = {n for c in cands for n in c.trials}
    fresh_pos = {r.config_id: r.positions
                 for r in R.config_results([t for t in trials if t.number in mine])}
    # the speculative configurations' shared prompt effects, as results.verdict.two_levels
    eff = shared_prompt_effects([r.positions + fresh_pos.get(r.config_id, [])
                                 for r in results if not r.is_baseline])

    def adjust(positions: list[tuple[int, float]], starts: Starts, baseline: bool) -> Starts:
        return [list(s) for s in starts] if baseline else \
            without_prompt_effects(positions, starts, eff)

    out: dict[str, tuple[Starts, Starts]] = {
        r.config_id: (adjust(r.positions, r.starts, r.is_baseline), []) for r in results}
    for c in cands:
        cid = c.result.config_id
        out[cid] = (out[cid][0],
                    adjust(fresh_pos.get(cid, []), c.starts, c.result.is_baseline))
    return out


def _visit_retrying(sweep: HostSession, cand: Candidate, tag: str, bench: Any, label: str,
                    first_round: int, stop: threading.Event | None = None
                    ) -> tuple[Measurement, int]:
    """A visit, made again (up to ``sweep.max_retries`` times) when the infrastructure
    failed it (an SSH cut, a port taken): as in the sweep, that is not the configuration's
    fault. The failed attempt stays a failed trial; the last fault is raised."""
    for attempt in range(sweep.spec.sweep.max_retries + 1):
        try:
            return _visit(sweep, cand, tag if not attempt else f"{tag}-again{attempt}", bench,
                          label, first_round, stop)
        except InfrastructureError as exc:
            if attempt >= sweep.spec.sweep.max_retries:
                raise
            sweep.report.line(f"{label}{exc.kind}: {one_line(str(exc))}; measuring it again")
            sweep.stop_server()
    raise AssertionError("unreachable")


def _visit(sweep: HostSession, cand: Candidate, tag: str, bench: Any,
           label: str, first_round: int = 0, stop: threading.Event | None = None
           ) -> tuple[Measurement, int]:
    """One confirm measurement, kept as a finished trial with its evidence (role confirm,
    or baseline): nothing measured is lost, and the dashboard shows it. The trial exists
    before the server starts, so a sweeper killed here leaves a server someone can find.
    Always a fresh start: not a server the sweep left running, nor one a rotated round
    put back to back (two configurations: L B | B L)."""
    sweep.measurer.stop(label=label)
    rec = sweep.recorder
    role = A.BASELINE if cand.result.is_baseline else A.CONFIRM_ROLE
    where = {A.HOST: sweep.spec.hosts[0].label, **({A.GROUP: sweep.group} if sweep.group
                                                   else {})}  # the sweep's trials say so too
    slot = rec.new_running(cand.params, cand.distributions, {A.CONFIRM: True, **where})
    rec.begin(slot, role=role, config=cand.config, effective=cand.result.effective,
              command=cand.config.command_line(sweep.python))
    try:
        m = sweep.measurer.measure(cand.config, tag, bench, label=label,
                                 on_start=lambda h: rec.server_started(slot, h),
                                 phase="confirm-", primary=sweep.spec.objective.primary,
                                 first_round=first_round)
    except BaseException as exc:
        if stop is not None and stop.is_set():
            # its server was stopped under it: that is the Ctrl-C, not the configuration
            # failing a fresh start (which would rule it out of the verdict)
            rec.fail(slot, "interrupted", "interrupted (Ctrl-C) during the confirm phase")
            raise ConfirmStopped from exc
        rec.fail(slot, getattr(exc, "kind", "interrupted"), str(exc) or type(exc).__name__)
        raise
    rec.complete(slot, m, log=sweep.measurer.log_text(m.server))
    return m, slot.number


def _ratio_dict(r: Ratio | None) -> dict[str, float] | None:
    return None if r is None else {"ratio": r.ratio, "low": r.low, "high": r.high}
