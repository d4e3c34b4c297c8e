"""Remember what failed, and predict failures before they cost a restart.

Every restart of a 1T-parameter model costs minutes of an 8-GPU node, so a
configuration that will fail should not be started. TPE is told about failures (PRUNED
with an infeasibility constraint) but keeps a share of its proposals on a failing value
for the whole sweep: measured on the simulator, NCCL_ALGO=CollNetDirect stayed at ~10% of
proposals from trial 10 to trial 60 (bench/failure_rate.py). Three rules, each one a
physical reason rather than a statistical guess:

* the same configuration failed before (any class): it will fail again;
* an NCCL setting failed in two configurations and never ran in any: NCCL errors come
  from the environment value itself (an algorithm or protocol the fabric lacks), so any
  configuration with that value is predicted to fail the same way;
* out of memory is monotone: with everything else equal, more speculative steps and more
  draft tokens need more memory, so a configuration at least as large (same topk) as one
  that ran out of memory is predicted to run out too.

Predictions are recorded as PRUNED trials with the constraint (the sampler learns from
them) and the reason, but never used as evidence for further predictions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sweeper.study import DRAFT, STEPS, TOPK

# a value that failed this many times, in this class only, and never ran, is predicted
VALUE_RULE_MIN_FAILURES = 2
VALUE_RULE_KINDS = ("nccl",)


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


@dataclass
class FailureMemory:
    outcomes: list[Outcome] = field(default_factory=list)

    def add(self, number: int, config_id: str, effective: dict[str, Any],
            failure: str | None) -> None:
        self.outcomes.append(Outcome(number, config_id, dict(effective), failure))

    def predict(self, config_id: str, effective: dict[str, Any]) -> Prediction | None:
        return (self._same_config(config_id) or self._failing_value(effective)
                or self._larger_than_oom(effective))

    def _same_config(self, config_id: str) -> Prediction | None:
        for o in self.outcomes:
            if o.config_id == config_id and o.failure:
                return Prediction(o.failure, f"the same configuration failed in trial {o.number}")
        return None

    def _failing_value(self, effective: dict[str, Any]) -> Prediction | None:
        for key, value in effective.items():
            with_value = [o for o in self.outcomes if key in o.effective
                          and o.effective[key] == value]
            failed = [o for o in with_value if o.failure]
            kinds = {o.failure for o in failed}
            if (len(failed) >= VALUE_RULE_MIN_FAILURES and len(failed) == len(with_value)
                    and len(kinds) == 1 and next(iter(kinds)) in VALUE_RULE_KINDS):
                trials = ", ".join(str(o.number) for o in failed)
                return Prediction(next(iter(kinds)), f"{key.removeprefix('env.')}={value} "
                                  f"failed in trials {trials} and never ran")
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


def _memory_relevant(effective: dict[str, Any]) -> dict[str, Any]:
    """Everything but steps and draft tokens that can change memory use: NCCL's
    algorithm, protocol and channel count do not (its buffer size does)."""
    return {k: v for k, v in effective.items() if k not in (STEPS, DRAFT)
            and not (k.startswith("env.NCCL_") and k != "env.NCCL_BUFFSIZE")}
