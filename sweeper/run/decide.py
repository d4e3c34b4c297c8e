"""What happens to a proposal, and how a trial's life may move: decisions as data.

``decide`` is a pure function of a proposal and explicit state (what the study measured,
the failure memory, how many repeats in a row were answered without a restart) that
returns a typed ``Decision``; the loop (run/workers.py) carries it out and nothing else
decides. ``Outcome`` is how a trial ended for the loop; ``advance`` is the one place a
trial's outcome is set, and it refuses a transition that cannot happen.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sweeper.results import attrs as A
from sweeper.search.failures import FailureMemory

# An accidental repeat of a measured configuration is resolved without a restart this many
# times in a row; the next one is measured (a sampler that insists gets its replicate), so
# the loop always moves on.
REPEAT_LIMIT = 5
# Proposals skipped as known failures before the loop gives up on the space: this many
# per trial of the budget, plus a margin for small budgets.
SKIP_LIMIT_FACTOR = 10
SKIP_LIMIT_MARGIN = 100


class Action(Enum):
    MEASURE = "measure"  # start the server (or reuse it) and benchmark
    REPLICATE = "replicate"  # measure a configuration measured before, on purpose
    SKIP = "skip"  # known to fail: recorded PRUNED, no restart
    ANSWER_REPEAT = "repeat"  # an accidental repeat: told the earlier mean, no restart


@dataclass(frozen=True)
class Proposal:
    """A trial the study handed out, as the decision sees it."""

    number: int
    role: str  # results/attrs.py roles: baseline, start_from, sampler
    config_id: str
    effective: dict[str, Any]
    deliberate: bool = False  # a replicate on purpose (racing, or enqueued as one)


@dataclass(frozen=True)
class Decision:
    action: Action
    kind: str = ""  # SKIP: the predicted failure class
    reason: str = ""  # SKIP: why it is predicted to fail
    value: float | None = None  # ANSWER_REPEAT: what the sampler is told
    of: tuple[int, ...] = ()  # ANSWER_REPEAT / REPLICATE: the earlier trials

    @property
    def restarts(self) -> bool:
        return self.action in (Action.MEASURE, Action.REPLICATE)


def decide(p: Proposal, measured: Sequence[tuple[int, float]], memory: FailureMemory,
           repeats_in_a_row: int) -> Decision:
    """The decision for proposal ``p``. ``measured``: (trial, value told) of every earlier
    measurement of ``p``'s configuration; ``memory``: the failures seen so far;
    ``repeats_in_a_row``: accidental repeats answered since the last restart."""
    earlier = tuple(n for n, _ in measured)
    if p.role == A.SAMPLER and not p.deliberate and measured \
            and repeats_in_a_row < REPEAT_LIMIT:
        # proposed again by accident: tell the sampler what it gave instead of a restart
        return Decision(Action.ANSWER_REPEAT, value=statistics.fmean(v for _, v in measured),
                        of=earlier)
    predicted = memory.predict(p.config_id, p.effective)
    if predicted is not None:
        return Decision(Action.SKIP, kind=predicted.kind, reason=predicted.reason)
    if measured:
        return Decision(Action.REPLICATE, of=earlier)
    return Decision(Action.MEASURE)


def skip_limit(trials: int) -> int:
    """Skipped proposals past which the loop stops (SweepAborted)."""
    return SKIP_LIMIT_FACTOR * trials + SKIP_LIMIT_MARGIN


# --------------------------------------------------------------------------- outcomes
class Outcome(Enum):
    """How a proposal ended, for the loop."""

    RUNNING = "running"  # handed out, not ended yet
    COMPLETE = "complete"  # measured
    PRUNED = "pruned"  # the configuration failed on its server
    FAILED = "failed"  # the infrastructure failed: FAIL, queued again
    SKIPPED = "skipped"  # predicted to fail, no restart
    REPEAT = "repeat"  # answered without a restart
    LOST = "lost"  # another sweeper closed it before it started
    INTERRUPTED = "interrupted"  # Ctrl-C / SIGTERM: FAIL, queued again

    @property
    def restarted(self) -> bool:
        """It cost a server start that counts towards ``--trials``."""
        return self in (Outcome.COMPLETE, Outcome.PRUNED)


_LEGAL: dict[Outcome, frozenset[Outcome]] = {
    Outcome.RUNNING: frozenset(Outcome) - {Outcome.RUNNING},
}


class IllegalTransition(RuntimeError):
    """A trial asked to move from an ended state: a bug in the loop."""


def advance(current: Outcome, new: Outcome) -> Outcome:
    """The trial's outcome after ``new``: only a running trial ends, and only once."""
    if new not in _LEGAL.get(current, frozenset()):
        raise IllegalTransition(f"a trial cannot go from {current.value} to {new.value}")
    return new
