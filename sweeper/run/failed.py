"""A trial whose measurement failed: recorded, counted, and said, by its cause.

* the configuration's fault (out of memory, a crash, a hang, flags the server rejects):
  PRUNED with its failure class, remembered by the failure memory, never retried; a
  baseline that does not serve ends the sweep (every configuration carries its settings;
  with hosts of other hardware live, only its group's part: run/workers.py), and the next
  sweep measures it again first (run/claims.needs_baseline);
* the infrastructure's (SSH, the host, a 5xx server): FAIL and queued again, up to
  ``sweep.max_retries`` times, then the sweep stops and the same command resumes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.errors import ConfigurationFailure, InfrastructureError
from sweeper.results import attrs as A
from sweeper.run.common import SweepAborted
from sweeper.run.reconcile import requeue
from sweeper.run.record import Slot
from sweeper.run.session import HostSession


def closed_meanwhile(sweep: HostSession, slot: Slot) -> bool:
    """The trial was finished while it was measured: a Ctrl-C recorded it interrupted and
    queued it again (run/worker.py, from the main thread), then stopped its server, which
    is why its measurement failed here. Recording the failure too would queue a second
    retry (a restart charged twice) or remember a configuration as crashing."""
    with contextlib.suppress(Exception):  # unreadable: record as usual
        return sweep.recorder.storage.get_trial(slot.trial_id).state.is_finished()
    return False


def configuration_failed(sweep: HostSession, trial: optuna.Trial, slot: Slot, role: str,
                         cid: str, effective: dict[str, Any], label: str,
                         fail: ConfigurationFailure) -> None:
    """Recorded PRUNED; SweepAborted when the baseline itself is rejected."""
    if closed_meanwhile(sweep, slot):
        return
    log = sweep.server_log(fail)
    sweep.measurer.stop()
    sweep.memory.add(trial.number, cid, effective, fail.kind)
    sweep.recorder.prune(slot, fail.kind, str(fail), log_tail=fail.log_tail, log=log)
    sweep.summary.finished += 1
    sweep.summary.pruned[fail.kind] += 1
    sweep.line(f"{label}[red]{fail.kind}[/]: {fail}")
    if role == A.BASELINE and fail.kind == "invalid_args":
        # the baseline is the study's fixed settings alone: a server that rejects
        # them rejects every configuration, so stop now rather than after N restarts
        raise SweepAborted(
            f"the server rejects the study's fixed settings (the baseline, trial "
            f"{trial.number}): {sweep.secrets.scrub(str(fail))}; fix server.launcher "
            "or server.args", reason="baseline") from fail
    if role == A.BASELINE:
        # the server without speculation did not serve (out of memory, a crash, a hang,
        # a start-up past its timeout): every configuration is that server and more, so
        # each would cost a restart to fail alike (max_consecutive_failures of them)
        raise SweepAborted(
            f"the server without speculation (the baseline, trial {trial.number}) did not "
            f"serve: {fail.kind}: {sweep.secrets.scrub(str(fail))}; every configuration "
            "adds speculation to it, so the sweep stops before spending restarts on them. "
            "Fix the server settings (server.args, server.launcher, the host; "
            "server.startup_timeout for a slow load), then run the same command: the "
            "baseline is measured again first", reason="baseline") from fail


def group_left_out(group: str, host: str, exc: SweepAborted, scrub: Callable[[str], str]
                   ) -> tuple[str, str]:
    """Why a group's hosts are retired when its baseline did not serve on ``host``
    (``exc``, raised above) and hosts of other hardware go on (run/workers.py): what that
    host says, and what the group's other hosts say."""
    cause = exc.__cause__
    what = f"{cause.kind}: {scrub(str(cause))}" \
        if isinstance(cause, ConfigurationFailure) else str(exc)
    return (f"group {group} is left out of this sweep, the other groups go on: its server "
            "without speculation (the baseline) did not serve; fix the server settings "
            "there, then run the same command (its baseline is measured again first). "
            f"{what}",
            f"the baseline of its group ({group}) did not serve on host {host}")


def group_failing(group: str, host: str, failed: int, last: str) -> tuple[str, str]:
    """The same when ``failed`` restarts in a row failed on the group's hardware, the
    last on ``host`` (``last``: why)."""
    return (f"group {group} is left out of this sweep, the other groups go on: {failed} "
            f"trials in a row failed on its hardware, the last: {last}. Check the server "
            "settings and the hosts there, then run the same command",
            f"{failed} trials in a row failed on its group's hardware ({group}), the last "
            f"on host {host}")


def infrastructure_failed(sweep: HostSession, trial: optuna.Trial, slot: Slot, label: str,
                          err: InfrastructureError) -> None:
    """Recorded FAIL and queued again; SweepAborted past the retries."""
    if closed_meanwhile(sweep, slot):
        return
    sweep.measurer.stop(best_effort=True)
    with contextlib.suppress(Exception):  # the host may be what failed
        sweep.recorder.fail(slot, err.kind, str(err), log=sweep.server_log())
    sweep.study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
    sweep.summary.failed += 1
    attempt = requeue(sweep.study, trial, count_attempt=True)
    sweep.summary.retried += 1
    retries = sweep.spec.sweep.max_retries
    sweep.line(f"{label}[magenta]failed[/] ({err.kind}): {err} — retry {attempt}/{retries}")
    if attempt > retries:
        raise SweepAborted(
            f"trial {trial.number}: {err} — the same configuration failed "
            f"{attempt} times for reasons outside it; fix the host or network, then "
            "run the same command to resume (the configuration stays queued)",
            reason="retries") from err
