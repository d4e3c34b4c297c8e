"""Each host's state, kept in the study so `sweeper status` (from any machine) shows which
host runs which trial, which were retired and why.

One study user attribute per host (``sweeper:host:<label>``), so sweepers on several
machines never overwrite each other's hosts.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial
from rich.console import Console

from sweeper.errors import InputError
from sweeper.results import attrs as A
from sweeper.results.groups import in_group, trial_groups  # noqa: F401  (re-exported)
from sweeper.results.headline import Headline

if TYPE_CHECKING:
    from sweeper.study import StudySpec

RUNNING, IDLE, RETIRED, DONE, STARTING = "running", "idle", "retired", "done", "starting"


def record_host(study: optuna.Study, label: str, state: str, *, group: str | None = None,
                trial: int | None = None, why: str = "") -> None:
    study.set_user_attr(A.HOST_STATE_PREFIX + label, {
        "state": state, "group": group, "trial": trial, "why": why[:300],
        "machine": socket.gethostname(), "pid": os.getpid(), "at": round(time.time(), 1)})


@dataclass(frozen=True)
class HostState:
    label: str
    state: str
    group: str | None
    trial: int | None
    why: str
    machine: str
    pid: int
    at: float

    def describe(self) -> str:
        """``running trial 12``, ``retired: SSH connection lost ...``, ``idle``."""
        if self.state == RUNNING and not self._sweeper_alive():
            return f"stopped (its sweeper, pid {self.pid} on {self.machine}, is gone)"
        if self.state == RUNNING and self.trial is not None:
            return f"running trial {self.trial}"
        if self.state == RETIRED:
            return f"retired: {self.why}" if self.why else "retired"
        return self.state

    def _sweeper_alive(self) -> bool:
        if self.machine != socket.gethostname():
            return True  # cannot tell from here: trust what it wrote
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def host_states(study: optuna.Study) -> list[HostState]:
    out = []
    for key, value in study.user_attrs.items():
        if not key.startswith(A.HOST_STATE_PREFIX) or not isinstance(value, dict):
            continue
        v: dict[str, Any] = value
        out.append(HostState(key[len(A.HOST_STATE_PREFIX):], str(v.get("state", "?")),
                             v.get("group"), v.get("trial"), str(v.get("why") or ""),
                             str(v.get("machine", "")), int(v.get("pid", -1)),
                             float(v.get("at", 0.0))))
    return sorted(out, key=lambda h: h.label)


def of_group(spec: StudySpec, trials: list[FrozenTrial], group: str | None
             ) -> list[FrozenTrial]:
    """The trials a winner is chosen from (export, report): one group's (``group``, or the
    only one). A study measured on several groups needs ``group``: results are compared
    only within one kind of hardware."""
    groups = trial_groups(trials)
    if group is None:
        if len(groups) > 1:
            raise InputError(f"{spec.path}: study {spec.name!r} was measured on "
                             f"{len(groups)} groups of hardware ({', '.join(groups)}), each "
                             "with its own winner; pass --group with one of them")
        return trials
    if group not in groups:
        raise InputError(f"--group {group}: study {spec.name!r} has no measurement on it; "
                         f"its groups: {', '.join(groups) or 'none yet'}")
    return in_group(trials, group)


def group_headlines(study: optuna.Study, objective: str,
                    trials: Sequence[FrozenTrial]) -> list[tuple[str, Headline]]:
    """The verdict per group when hosts of more than one group measured: a result is
    compared only with results from the same hardware. Empty with one group."""
    groups = trial_groups(trials)
    if len(groups) < 2:
        return []
    return [(g, Headline.of(study, objective, in_group(trials, g))) for g in groups]


def print_hosts(console: Console, study: optuna.Study, objective: str,
                trials: Sequence[FrozenTrial]) -> None:
    """Each host's state, then the winner of each group (when there are several)."""
    states = host_states(study)
    if states:
        console.print("hosts: " + "; ".join(
            f"{h.label}" + (f" [{h.group}]" if h.group else "") + f": {h.describe()}"
            for h in states), markup=False, soft_wrap=False, overflow="fold")
    for group, headline in group_headlines(study, objective, trials):
        for i, line in enumerate(headline.lines()):
            console.print(f"group {group}: {line}" if i == 0 else f"  {line}", markup=False,
                          soft_wrap=False)
