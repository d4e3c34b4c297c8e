"""One trial of the loop: a proposal turned into a decision (run/decide.py), carried out,
and recorded. The loop (run/workers.py) hands a trial in and gets its ``Outcome`` back.

    begin (role, configuration, command recorded) -> decide -> answer the repeat / skip
    the known failure (no restart) | measure through the session's measurer -> record
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

import sweeper.results.verdict as R
from sweeper.errors import ConfigurationFailure, InfrastructureError, ServerErrorResponse
from sweeper.measure.stats import summarize
from sweeper.results import attrs as A
from sweeper.results.headline import Headline, mark_best
from sweeper.run.decide import Action, Decision, Outcome, Proposal, advance, decide
from sweeper.run.failed import configuration_failed, infrastructure_failed
from sweeper.run.interrupted import record_interrupted
from sweeper.run.longer import more_runs
from sweeper.run.norestart import answer_repeat, measured, skip_known_failure
from sweeper.run.pending import is_storage_error
from sweeper.run.record import Slot
from sweeper.run.session import HostSession
from sweeper.run.trial import Measurement, server_error


@dataclass
class Step:
    """What one trial came to: its outcome, the decision taken, and the failure in words
    when it failed (for the message that stops a sweep after too many in a row)."""

    outcome: Outcome
    decision: Decision | None = None
    proposal: Proposal | None = None
    failure: str = ""


Observer = Callable[[Proposal, Decision], None]


def run_trial(s: HostSession, trial: optuna.trial.Trial, repeats_in_a_row: int,
              observe: Observer | None = None) -> Step:
    """Carry ``trial`` (handed out by the study, RUNNING) to its end."""
    state = Outcome.RUNNING
    slot = s.recorder.slot(trial)
    role = str(trial.user_attrs.get(A.ROLE, A.SAMPLER))
    n_done = s.summary.finished + 1 + s.summary.resumed_from
    prefix = f"trial {trial.number} ({n_done}/{s.options.trials}) "
    if role == A.BASELINE:
        effective: dict[str, Any] = {}
        config = s.space.baseline_config()
    else:
        effective = s.space.suggest(trial)
        config = s.space.launch_config(effective)
    cid = config.config_id()
    try:
        s.recorder.begin(slot, role=role, config=config, effective=effective,
                         command=config.command_line(s.python))
    except optuna.exceptions.UpdateFinishedTrialError:
        # another sweeper sharing the storage took it for an orphan before this one
        # wrote its owner (run/reconcile.UNOWNED_GRACE makes that rare): nothing ran
        s.line(f"{prefix}was closed by another sweeper before it started; asking for another")
        return Step(advance(state, Outcome.LOST))
    deliberate = getattr(s.study.sampler, "deliberate", None)
    note = deliberate(trial.number) if deliberate and role == A.SAMPLER else None
    if note:  # a racing replicate (search/model/): a repeat on purpose, marked so
        trial.set_user_attr(A.REPLICATE, note)
    proposal = Proposal(trial.number, role, cid, effective,
                        deliberate=bool(trial.user_attrs.get(A.REPLICATE)))
    mine = s.trials()  # this host's group's: results are compared within one
    decision = decide(proposal, measured(s.study, mine, cid), s.memory, repeats_in_a_row)
    if observe is not None:
        observe(proposal, decision)
    label = f"{prefix}{R.short_params(effective)}: "

    def ended(outcome: Outcome, failure: str = "") -> Step:
        return Step(advance(state, outcome), decision, proposal, failure)

    if decision.action == Action.ANSWER_REPEAT:
        answer_repeat(s, slot, decision, label)
        return ended(Outcome.REPEAT)
    if decision.action == Action.SKIP:
        skip_known_failure(s, slot, decision, label)
        return ended(Outcome.SKIPPED)
    try:
        try:
            if proposal.deliberate:  # bought as another start, not runs on the one up
                s.measurer.stop(label=prefix)
            m = s.measurer.measure(config, f"trial-{trial.number:04d}", s.bench_spec,
                                   label=prefix,
                                   on_start=lambda h: s.recorder.server_started(slot, h),
                                   primary=s.spec.objective.primary,
                                   more=more_runs(mine, cid, s.bench_spec),
                                   first_round=R.next_prompt_round(mine, cid))
        except ServerErrorResponse as err:
            raise server_error(err, int(trial.user_attrs.get(A.ATTEMPT, 0)),
                               s.spec.sweep.max_retries) from err
    except ConfigurationFailure as fail:
        configuration_failed(s, trial, slot, role, cid, effective, label, fail)
        return ended(Outcome.PRUNED, f"trial {trial.number}: {fail}")
    except InfrastructureError as err:
        infrastructure_failed(s, trial, slot, label, err)
        return ended(Outcome.FAILED, f"trial {trial.number}: {err}")
    except KeyboardInterrupt as exc:
        record_interrupted(s, slot, trial, getattr(exc, "levels", None) or {})
        s.summary.retried += 1
        s.summary.stopped_because = "interrupted"
        advance(state, Outcome.INTERRUPTED)
        raise
    s.memory.add(trial.number, cid, effective, None)
    _complete(s, slot, m, label)
    return ended(Outcome.COMPLETE)


def _complete(s: HostSession, slot: Slot, m: Measurement, label: str) -> None:
    runs = s.recorder.series(m)  # the objective's per-run series
    try:
        base = R.baseline_result(R.config_results(s.trials()))
    except Exception as exc:
        # A storage failing here, with the measurement in hand and not yet recorded, would
        # lose it: the recorder is what keeps a measurement the storage refuses
        # (run/pending.py), so the speed-up (a courtesy) is left out and it goes on to it.
        if not is_storage_error(exc):
            raise
        base = None
    ratio = R.speedup_over(R.ConfigResult("", {}, "", runs=runs), base)
    s.recorder.complete(slot, m, log=s.measurer.log_text(m.server), speedup=ratio)
    s.summary.finished += 1
    s.summary.complete += 1
    s.summary.reused += int(m.reused)
    if not s.options.notes:
        return
    # the best of this host's group: results are compared within one kind of hardware
    headline = Headline.of(s.study, s.bench_spec.aggregate, s.trials())
    with contextlib.suppress(Exception):  # the dashboard's note is a courtesy
        mark_best(s.study, s.bench_spec.aggregate)
    result = m.bench
    acc = f", accept len {result.accept_length:.2f}" if result.accept_length else ""
    best = f" | {headline.short()}" if headline.short() else ""
    # measured longer than benchmark.runs (close to the best): say so, it took longer
    longer = f" ({len(runs)} runs)" if len(runs) > s.bench_spec.runs else ""
    s.line(f"{label}[green]{R.fmt_tok_s(summarize(runs))} "
           f"{s.spec.objective.metric_names()[0]}[/]{longer}{acc}{best}")
