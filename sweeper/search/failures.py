"""Remember what failed, and predict failures before they cost a restart, on evidence.

Every restart of a 1T-parameter model costs minutes of an 8-GPU node, so a configuration
that will fail should not be started. TPE is told about failures (PRUNED with an
infeasibility constraint) but keeps a share of its proposals on a failing value for the
whole sweep. A wrong prediction is worse than a wasted restart, though: a value banned by
mistake is never measured again, and when the optimum holds it the sweep cannot find it.
So a proposal is skipped only on specific evidence, and the three rules are physical
reasons, not statistical guesses:

* the same configuration failed before (any class): it will fail again;
* a setting explains the failures of a class: NCCL errors come from NCCL's own settings
  (an algorithm or protocol the fabric lacks), a rejected flag from that flag. A value is
  blamed only when (a) it is a setting that can cause that class (``suspects``: the
  speculative numbers never cause an NCCL fault), (b) it is present in at least two
  failures of that class, of different configurations, and (c) no configuration with it
  ever ran. Everything those failures share that could equally be the cause and never ran
  is blamed *together*: a configuration is predicted to fail only when it holds all of
  them. Two NCCL failures that share ``NCCL_ALGO=CollNetDirect`` (and happen to share
  ``topk=4``) blame CollNetDirect, never topk; two that share CollNetDirect and
  ``NCCL_PROTO=LL128`` (neither seen running) blame only the pair until a failure with
  another protocol separates them;
* out of memory is monotone: with everything else equal, more speculative steps and more
  draft tokens need more memory, so a configuration at least as large (same topk) as one
  that ran out of memory is predicted to run out too.

Predictions are recorded as PRUNED trials with the constraint (the sampler learns from
them) and the reason, but never used as evidence for further predictions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sweeper.study import DRAFT, ENV_PREFIX, STEPS, TOPK

# a value must appear in this many failures (of distinct configurations) of one class
VALUE_RULE_MIN_FAILURES = 2
SPECULATIVE_PREFIX = "speculative-"
_ABSENT = object()


def _nccl_setting(key: str) -> bool:
    if key.startswith(ENV_PREFIX):
        return key.startswith(f"{ENV_PREFIX}NCCL_")
    return "nccl" in key.lower() and not key.startswith(SPECULATIVE_PREFIX)


def _plain_flag(key: str) -> bool:
    # argparse rejects a flag's value; an environment variable is never rejected there,
    # and the speculative numbers are kept valid by the space's rules
    return not key.startswith(ENV_PREFIX) and not key.startswith(SPECULATIVE_PREFIX)


# failure class -> which settings can cause it. Classes left out (oom: its own rule;
# hang, crash, startup_timeout: often a combination of settings, or chance) are predicted
# only for the very same configuration.
SUSPECTS: dict[str, Callable[[str], bool]] = {
    "nccl": _nccl_setting,
    "invalid_args": _plain_flag,
}


@dataclass(frozen=True)
class Outcome:
    number: int
    config_id: str
    effective: dict[str, Any]
    failure: str | None  # None: the configuration served and was measured


@dataclass(frozen=True)
class Prediction:
    kind: str
    reason: str


def _pairs(effective: dict[str, Any]) -> set[tuple[str, str]]:
    # repr keeps 4 and "4" apart and makes any scalar hashable
    return {(k, repr(v)) for k, v in effective.items()}


@dataclass
class FailureMemory:
    outcomes: list[Outcome] = field(default_factory=list)

    def add(self, number: int, config_id: str, effective: dict[str, Any],
            failure: str | None) -> None:
        self.outcomes.append(Outcome(number, config_id, dict(effective), failure))

    def predict(self, config_id: str, effective: dict[str, Any]) -> Prediction | None:
        return (self._same_config(config_id) or self._explained(effective)
                or self._larger_than_oom(effective))

    def _same_config(self, config_id: str) -> Prediction | None:
        for o in self.outcomes:
            if o.config_id == config_id and o.failure:
                return Prediction(o.failure, f"the same configuration failed in trial {o.number}")
        return None

    def _explained(self, effective: dict[str, Any]) -> Prediction | None:
        ran: set[tuple[str, str]] = set()
        for o in self.outcomes:
            if o.failure is None:
                ran |= _pairs(o.effective)
        mine = _pairs(effective)
        for kind, suspect in SUSPECTS.items():
            failed = [o for o in self.outcomes if o.failure == kind]
            if len(failed) < VALUE_RULE_MIN_FAILURES:
                continue
            for key, value in sorted(mine):
                if not suspect(key) or (key, value) in ran:
                    continue
                support = [o for o in failed if (key, value) in _pairs(o.effective)]
                if len({o.config_id for o in support}) < VALUE_RULE_MIN_FAILURES:
                    continue
                # every setting these failures share that could be the cause and never ran
                common = set.intersection(*(_pairs(o.effective) for o in support))
                blamed = sorted((k, v) for k, v in common if suspect(k) and (k, v) not in ran)
                if set(blamed) <= mine:
                    what = " with ".join(f"{k.removeprefix(ENV_PREFIX)}={_shown(v)}"
                                         for k, v in blamed)
                    trials = ", ".join(str(o.number) for o in support)
                    return Prediction(kind, f"{what} failed ({kind}) in trials {trials} as "
                                      "the other settings varied, and never ran")
        return None

    def _larger_than_oom(self, effective: dict[str, Any]) -> Prediction | None:
        if STEPS not in effective or DRAFT not in effective:
            return None
        rest = _memory_relevant(effective)
        for o in self.outcomes:
            if o.failure != "oom" or STEPS not in o.effective or DRAFT not in o.effective:
                continue
            o_rest = _memory_relevant(o.effective)
            if o_rest == rest and rest.get(TOPK, 1) == o_rest.get(TOPK, 1) and \
                    effective[STEPS] >= o.effective[STEPS] and \
                    effective[DRAFT] >= o.effective[DRAFT]:
                return Prediction("oom", f"at least as many steps and draft tokens as trial "
                                  f"{o.number}, which ran out of memory")
        return None


def _shown(value_repr: str) -> str:
    return value_repr[1:-1] if value_repr[:1] in "'\"" else value_repr


def _memory_relevant(effective: dict[str, Any]) -> dict[str, Any]:
    """Everything but steps and draft tokens that can change memory use: NCCL's
    algorithm, protocol and channel count do not (its buffer size does)."""
    return {k: v for k, v in effective.items() if k not in (STEPS, DRAFT)
            and not (k.startswith("env.NCCL_") and k != "env.NCCL_BUFFSIZE")}
