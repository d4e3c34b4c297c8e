"""Faults a simulated server shows while serving, from the profile's ``faults:`` rules or
``--sim-fault KIND[:N]`` on the command line.

- ``lossy``: greedy output differs from the same prompt without speculation, as a broken
  draft/verify kernel would make it: one token in ``every`` is replaced deterministically.
  Speculative launches only: the no-speculation server is the reference and stays exact.
- ``http_500``: healthy, but every generation request answers HTTP 500 with SGLang's error
  body, and the log says so.
- ``crash_serving``: healthy, serves ``requests`` generation requests (default 2), then the
  scheduler hits an exception on the next one and the process exits with code 1.

A profile rule applies when its ``when`` matches the resolved flags/env (rules.matches).
``--sim-fault`` applies to the launch it is given to: lossy when it is speculative,
http_500 and crash_serving always.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sweeper.sim.profiles import FAULT_KINDS, FaultRule, Profile
from sweeper.sim.rules import SimConfig, matches


class FaultSpecError(ValueError):
    """A --sim-fault value the simulator does not understand."""


@dataclass(frozen=True)
class ActiveFaults:
    """The faults of one launch; the default is a healthy server."""

    lossy_every: int | None = None  # replace one token in this many
    http_500: bool = False
    crash_after: int | None = None  # generation requests served before the crash

    def __bool__(self) -> bool:
        return bool(self.lossy_every or self.http_500 or self.crash_after is not None)

    def describe(self) -> list[str]:
        out = []
        if self.lossy_every:
            out.append(f"lossy (one token in {self.lossy_every} replaced)")
        if self.http_500:
            out.append("http_500 (every generation request fails)")
        if self.crash_after is not None:
            out.append(f"crash_serving (after {self.crash_after} generation requests)")
        return out


def parse_cli_fault(text: str) -> FaultRule:
    """``KIND`` or ``KIND:N`` (N: requests before the crash, or lossy's period)."""
    kind, _, number = text.partition(":")
    if kind not in FAULT_KINDS:
        raise FaultSpecError(
            f"--sim-fault {text!r}: kind must be one of {', '.join(FAULT_KINDS)}")
    try:
        n = int(number) if number else None
    except ValueError:
        raise FaultSpecError(f"--sim-fault {text!r}: N must be an integer") from None
    if n is not None and (n < 0 or (kind == "lossy" and n < 2)):
        raise FaultSpecError(f"--sim-fault {text!r}: N out of range")
    if kind == "lossy":
        return FaultRule(kind, every=n or 8, speculative_only=True, reason="--sim-fault")
    return FaultRule(kind, requests=2 if n is None else n, speculative_only=False,
                     reason="--sim-fault")


def active_faults(profile: Profile, cfg: SimConfig, cli: Sequence[FaultRule] = ()
                  ) -> ActiveFaults:
    lossy, http_500, crash = None, False, None
    for rule in [*(r for r in profile.faults if matches(cfg, r.when.args, r.when.env)), *cli]:
        if rule.kind == "lossy":
            # no speculation, no draft kernel to break: the reference output stays exact
            if cfg.speculative:
                lossy = rule.every if lossy is None else min(lossy, rule.every)
        elif rule.speculative_only and not cfg.speculative:
            continue
        elif rule.kind == "http_500":
            http_500 = True
        elif rule.kind == "crash_serving":
            crash = rule.requests if crash is None else min(crash, rule.requests)
    return ActiveFaults(lossy, http_500, crash)
