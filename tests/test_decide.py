"""The loop's decisions as data (run/decide.py) and the trial classifier (results/kind.py):
pure functions, tested without a server."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState, create_trial

from sweeper.results import attrs as A
from sweeper.results.kind import TrialKind, kind_of, ran_on_server
from sweeper.run.decide import (
    REPEAT_LIMIT,
    Action,
    IllegalTransition,
    Outcome,
    Proposal,
    advance,
    decide,
)
from sweeper.search.failures import FailureMemory

EFF = {"speculative-num-steps": 3, "speculative-eagle-topk": 1,
       "speculative-num-draft-tokens": 4}


def proposal(role: str = A.SAMPLER, deliberate: bool = False, cid: str = "c1") -> Proposal:
    return Proposal(7, role, cid, dict(EFF), deliberate)


def test_a_new_configuration_is_measured() -> None:
    assert decide(proposal(), [], FailureMemory(), 0).action == Action.MEASURE


def test_an_accidental_repeat_is_told_the_earlier_mean_without_a_restart() -> None:
    d = decide(proposal(), [(2, 100.0), (5, 110.0)], FailureMemory(), 0)
    assert d.action == Action.ANSWER_REPEAT and d.value == 105.0 and d.of == (2, 5)
    assert not d.restarts


def test_a_sampler_that_insists_gets_its_replicate() -> None:
    d = decide(proposal(), [(2, 100.0)], FailureMemory(), REPEAT_LIMIT)
    assert d.action == Action.REPLICATE and d.restarts


@pytest.mark.parametrize("p", [proposal(deliberate=True), proposal(role=A.START_FROM),
                               proposal(role=A.BASELINE)])
def test_replicates_on_purpose_and_queued_entries_are_measured_again(p: Proposal) -> None:
    assert decide(p, [(2, 100.0)], FailureMemory(), 0).action == Action.REPLICATE


def test_a_configuration_that_failed_is_skipped_with_its_class() -> None:
    memory = FailureMemory()
    memory.add(3, "c1", EFF, "oom")
    d = decide(proposal(), [], memory, 0)
    assert d.action == Action.SKIP and d.kind == "oom" and "trial 3" in d.reason


def test_a_trial_ends_once() -> None:
    assert advance(Outcome.RUNNING, Outcome.COMPLETE) == Outcome.COMPLETE
    with pytest.raises(IllegalTransition):
        advance(Outcome.COMPLETE, Outcome.PRUNED)
    with pytest.raises(IllegalTransition):
        advance(Outcome.RUNNING, Outcome.RUNNING)


@pytest.mark.parametrize(("attrs", "state", "kind", "ran"), [
    ({A.ROLE: A.BASELINE}, TrialState.COMPLETE, TrialKind.BASELINE, True),
    ({A.ROLE: A.SAMPLER}, TrialState.PRUNED, TrialKind.MEASURED, True),
    ({A.ROLE: A.SAMPLER, A.REPLICATE: {"of": [1]}}, TrialState.COMPLETE,
     TrialKind.REPLICATE, True),
    ({A.ROLE: A.SAMPLER, A.REPEAT_OF: [1]}, TrialState.COMPLETE, TrialKind.REPEAT, False),
    ({A.ROLE: A.SAMPLER, A.SKIPPED: True}, TrialState.PRUNED, TrialKind.SKIPPED, False),
    ({A.ROLE: A.BASELINE, A.CONFIRM: True}, TrialState.COMPLETE, TrialKind.CONFIRM, False),
    ({A.ROLE: A.SAMPLER, A.BACKED_OFF: "busy"}, TrialState.FAIL, TrialKind.BACKED_OFF, False),
])
def test_every_reader_gets_the_same_kind(attrs: dict, state: TrialState, kind: TrialKind,
                                         ran: bool) -> None:
    t = create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None,
                     user_attrs=attrs)
    assert kind_of(t) == kind
    assert ran_on_server(t) == ran
