"""What happens to a proposal, and how a trial's life may move: decisions as data.

``decide`` is a pure function of a proposal and explicit state (what the study measured,
the failure memory, how many repeats in a row were answered without a restart) that
returns a typed ``Decision``; the loop (run/workers.py) carries it out and nothing else
decides. ``should_stop`` is the same for the sweep as a whole after each finished trial:
``StopState`` in, a ``Stop`` (with its one-line reason) or None out.
``Outcome`` is how a trial ended for the loop; ``advance`` is the one place a
trial's outcome is set, and it refuses a transition that cannot happen.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from optuna.trial import FrozenTrial

from sweeper.measure.stats import Starts
from sweeper.results import attrs as A
from sweeper.results.hosts import in_group, trial_groups
from sweeper.search.failures import FailureMemory
from sweeper.search.nodetime import (
    SURE_TOL,
    measured_costs,
    not_worth_a_restart,
    stop_reason,
)

if TYPE_CHECKING:
    from sweeper.study import StudySpec

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
    # the baseline is measured again after it failed (run/failed.py: that failure ended
    # the sweep, and the user was told to fix the server first)
    predicted = memory.predict(p.config_id, p.effective) if p.role != A.BASELINE else None
    if predicted is not None:
        return Decision(Action.SKIP, kind=predicted.kind, reason=predicted.reason)
    if measured:
        return Decision(Action.REPLICATE, of=earlier)
    return Decision(Action.MEASURE)


def skip_limit(trials: int) -> int:
    """Skipped proposals past which the loop stops (SweepAborted)."""
    return SKIP_LIMIT_FACTOR * trials + SKIP_LIMIT_MARGIN


# --------------------------------------------------------------------------- stopping
@dataclass(frozen=True)
class StopState:
    """What the stop rule sees after a finished trial: the leader's runs by start, every
    other configuration's that could win, the between-start variance, and how long the
    leader's level has held (finished restarts since the first trial of a configuration
    within 1% of it: a sampler still finding better configurations is not done)."""

    leader: Starts
    others: tuple[Starts, ...]
    tau2: float
    restarts: int  # finished trials that started a server
    held: int  # ... of them after the leader's level was first reached
    patience: int  # the least of both before stopping (the study's n_startup_trials)
    stop_when_sure: float  # sweep.stop_when_sure (1: never stop early)
    # what another restart buys (results/attrs.GAINS: new configuration, replicate; None:
    # the sampler does not say), the restarts left in --trials and one trial's node-seconds
    gains: tuple[float, float] | None = None
    remaining: int = 0
    trial_s: float = 0.0


@dataclass(frozen=True)
class Stop:
    reason: str  # one line, for the user: why the sweep ends before --trials


def should_stop(state: StopState) -> Stop | None:
    """Stop when the pick is at least ``stop_when_sure`` likely to be within 1% of every
    other configuration measured (two-level statistics: search/nodetime.stop_reason), once
    the sampler has explored (``patience`` restarts), the leader's level has held as
    long and the leader was measured on two starts or more: "sure" speaks of what was
    measured, the holding of what the search still finds."""
    if state.stop_when_sure >= 1.0 or not state.others:
        return None
    if state.restarts < state.patience or state.held < state.patience:
        return None
    if state.gains is not None:
        why = not_worth_a_restart(*state.gains, state.remaining, state.trial_s,
                                  state.stop_when_sure)
        if why is not None:
            return Stop(why)
    if len(state.leader) < 2:
        # one start's speed is not the configuration's: until the leader has a second
        # start, its lead may be a lucky start, which only the prior's spread accounts for
        return None
    why = stop_reason(state.leader, state.others, state.tau2, state.stop_when_sure)
    if why is None:
        return None
    return Stop(f"{why}; no configuration more than {SURE_TOL:.0%} better in the last "
                f"{state.held} restarts")


def stop_state(trials: Sequence[Any], stop_when_sure: float, patience: int,
               remaining: int = 0, trial_s: float = 0.0) -> StopState | None:
    """The stop rule's state from a study's trials (optuna FrozenTrials): the
    configurations ranked by their two-level means (results/verdict.config_results), the
    study's between-start variance, the gains the sampler recorded on its latest plan;
    None before two configurations are measured. ``remaining``: restarts left in
    --trials; ``trial_s``: one trial's node-seconds (search/nodetime.Costs.trial_s)."""
    import sweeper.results.verdict as R
    from sweeper.measure.stats import start_variance
    from sweeper.results.kind import TrialKind, kind_of

    swept = [t for t in trials if kind_of(t) != TrialKind.CONFIRM]
    results = [r for r in R.config_results(swept) if r.runs and r.two is not None]
    if len(results) < 2:
        return None
    results.sort(key=lambda r: r.two.mean if r.two is not None else 0.0, reverse=True)
    lead = results[0]
    level = (lead.two.mean if lead.two is not None else 0.0) * (1 - SURE_TOL)
    near = {r.config_id for r in results if r.two is not None and r.two.mean >= level}
    started = [t for t in swept if isinstance(t.user_attrs.get(A.STARTUP), int | float)
               and t.user_attrs[A.STARTUP] > 0]
    reached = min((t.number for t in started if t.user_attrs.get(A.CONFIG_ID) in near),
                  default=None)
    held = sum(t.number > reached for t in started) if reached is not None else 0
    tau2 = start_variance([r.by_start() for r in results]).tau2
    planned = [t for t in trials if isinstance(t.system_attrs.get(A.GAINS), dict)]
    last = max(planned, key=lambda t: t.number).system_attrs[A.GAINS] if planned else None
    gains = (float(last.get("new", 0.0)), float(last.get("replicate", 0.0))) \
        if last is not None else None
    return StopState(lead.by_start(), tuple(r.by_start() for r in results[1:]), tau2,
                     len(started), held, patience, stop_when_sure, gains, remaining, trial_s)


def sure_stop(spec: StudySpec, trials: Sequence[FrozenTrial], done: int, budget: int
              ) -> Stop | None:
    """The stop rule after a finished trial (``done`` of ``budget`` restarts): a Stop when
    the sweep may end before --trials, which stays the upper bound. Several groups of
    hardware: each has its own winner, so the sweep stops only when every group's pick is
    sure (a group's results are compared only within it)."""
    sw, bench = spec.sweep, spec.benchmark
    if done >= budget or sw.stop_when_sure >= 1.0 or len(bench.levels) > 1:
        return None
    costs = measured_costs(trials, bench.max_tokens, sw.restart_cost, sw.run_cost)
    trial_s = costs.trial_s(bench.runs) if costs else 0.0
    groups: list[str | None] = list(trial_groups(trials)) or [None]
    stops: list[str] = []
    for g in groups:
        mine = in_group(trials, g)
        state = stop_state(mine, sw.stop_when_sure, sw.n_startup_trials, budget - done,
                           trial_s)
        stop = should_stop(state) if state is not None else None
        if stop is None:
            return None
        stops.append(f"group {g}: {stop.reason}" if len(groups) > 1 else stop.reason)
    return Stop("; ".join(stops))


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
