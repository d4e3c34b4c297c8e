"""The confirm phase as the commands run it: which host each group confirms on, what
is said before it, one group's phase (``confirm_one``) or several at once
(``confirm_at_once``), its table, and the host `sweeper confirm` opens for a group.
The phase itself is run/confirm.py's; the commands are cli/sweeping.py's."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import typer

from sweeper.cli.common import err, out, resume_hint
from sweeper.errors import InputError, SweeperError

ALL = "all"  # `sweeper confirm --group all`: every group at once

if TYPE_CHECKING:
    from sweeper.run.confirm import ConfirmStart
    from sweeper.run.confirm_groups import GroupConfirm
    from sweeper.run.confirm_runs import VisitRuns
    from sweeper.run.progress import ConsoleReporter
    from sweeper.run.session import HostSession
    from sweeper.run.workers import HostPool, Worker
    from sweeper.study import StudySpec


def confirm_hosts(pool: HostPool) -> list[Worker]:
    """The host each group's confirm phase runs on: its first one still in the sweep, the
    groups in the order of their hosts (no host left: the first, for the one group)."""
    first: dict[str | None, Worker] = {}
    for w in pool.live:
        first.setdefault(w.group or None, w)
    return list(first.values()) or [pool.primary]


def _announce(sweep: HostSession, top: int, runs: int, rounds: int,
              exact: bool = False) -> VisitRuns:
    """Say what the confirm phase will measure; its runs per visit."""
    from sweeper.run.confirm_runs import visit_runs

    which = "the leader" if top == 1 else f"the top {top} configurations"
    visit = visit_runs(sweep.trials(), sweep.bench_spec, runs, rounds,
                       exact)
    # on the simulator, its modelled seconds: not a node's
    why = visit.why("on the simulated server" if sweep.summary.simulated else "on this node")
    if why:
        out.print(f"Confirm phase: {which} and the baseline, {rounds} interleaved fresh starts "
                  f"each of {visit.runs} runs ({why}).", markup=False, soft_wrap=True)
    else:
        out.print(f"Confirm phase: {which} and the baseline, {rounds} interleaved fresh starts "
                  f"each of {visit.runs} runs.")
    return visit


def confirm_at_once(groups: list[tuple[Worker, ConfirmStart]],
                     reporter: ConsoleReporter) -> None:
    """Each group's confirm phase on its own host, all at once (run/confirm_groups.py),
    then each group's table; the first group's error, if any, once every table is out."""
    from sweeper.run.confirm_groups import GroupConfirm

    reporter.close()  # the sweep's bar is done; the confirm phase gets its own
    out.print("Each group confirms its leaders on its own host, all groups at the same time.")
    jobs = []
    for w, start in groups:
        out.print(f"Group {w.group} ({w.label}):", markup=False)
        for note in start.notes:
            out.print(note)
        plan = start.plan
        visit = _announce(w.session, plan.top, plan.runs, plan.rounds)
        jobs.append(GroupConfirm(w.group or "", w.label, w.session, plan.top, plan.runs,
                                 plan.rounds, visit))
    _run_groups(jobs, reporter)


def confirm_every_group(sweeps: list[tuple[str, HostSession]], top: int, runs: int,
                        reporter: ConsoleReporter, exact: bool = False) -> None:
    """`sweeper confirm --group all`: each group's leaders on its own first host, all at
    once, as `optimize` ends a sweep of several groups."""
    from sweeper.run.confirm_groups import GroupConfirm
    from sweeper.run.hostview import Prefixed

    out.print(f"Confirming the leaders of {len(sweeps)} groups of hardware, each on its "
              "own host, all at the same time.")
    jobs = []
    for group, sweep in sweeps:
        label = sweep.spec.hosts[0].label  # as the sweep's lines and trials name it
        sweep.report = Prefixed(sweep.report, label, True)  # two groups' lines interleave
        out.print(f"Group {group} ({label}):", markup=False)
        visit = _announce(sweep, top, runs, 2, exact)
        jobs.append(GroupConfirm(group, label, sweep, top, runs, 2, visit))
    _run_groups(jobs, reporter)


def _run_groups(jobs: list[GroupConfirm], reporter: ConsoleReporter) -> None:
    from sweeper.run.confirm_groups import confirm_groups
    from sweeper.run.confirm_table import print_confirm

    try:
        confirm_groups(jobs, reporter)
    except KeyboardInterrupt:
        reporter.close()
        for j in jobs:  # what went wrong while stopping is said, not dropped
            if j.error is not None:
                err.print(f"{j.error_text()} (while stopping)", markup=False, soft_wrap=True)
        err.print("interrupted during the confirm phase: the measurements so far are kept, "
                  f"every group's server stopped. {resume_hint()}", markup=False,
                  soft_wrap=True)
        raise typer.Exit(130) from None
    reporter.close()
    for j in jobs:
        if j.outcome is not None:
            out.print(f"Group {j.group} ({j.label}):", markup=False)
            print_confirm(out, j.outcome)
        elif j.error is not None:  # once each, naming its group (not again by @errors)
            err.print(f"error: {j.error_text()}", markup=False, soft_wrap=True)
    first = next((j.error for j in jobs if j.error is not None), None)
    if isinstance(first, SweeperError):  # the exit code @errors gives it
        raise typer.Exit(2 if isinstance(first, InputError) else 1)
    if first is not None:
        raise first  # a bug: its traceback


def confirm_one(sweep: HostSession, top: int, runs: int, reporter: ConsoleReporter,
             rounds: int = 2, exact: bool = False) -> None:
    from sweeper.run.confirm import run_confirm
    from sweeper.run.confirm_table import print_confirm

    reporter.close()  # the sweep's bar is done; the confirm phase gets its own
    visit = _announce(sweep, top, runs, rounds, exact)
    try:
        outcome = run_confirm(sweep, top, runs, rounds, visit)
    except KeyboardInterrupt:
        from sweeper.run.ctrlc import cleaning_up

        reporter.close()
        with cleaning_up():  # another Ctrl-C does not leave the server running
            sweep.stop_server()
        err.print("interrupted during the confirm phase: the measurements so far are kept, "
                  f"its server stopped. {resume_hint()}", markup=False, soft_wrap=True)
        raise typer.Exit(130) from None
    reporter.close()
    print_confirm(out, outcome)


def check_group(spec: StudySpec, storage: str | None, group: str) -> list[str]:
    """``--group`` names a group that measured something in the stored study (the check
    export and report make), or is ``all``; the groups it stands for."""
    from sweeper.results.hosts import of_group, trial_groups
    from sweeper.results.storage import load_existing

    stored = load_existing(storage or spec.storage, spec.name, str(spec.path), spec.storage)
    trials = stored.get_trials(deepcopy=False)
    if group == ALL:
        groups = trial_groups(trials)
        if len(groups) < 2:
            raise InputError(f"--group all: study {spec.name!r} was measured on "
                             f"{'one group of hardware' if groups else 'no host yet'}; "
                             "confirm it without --group")
        return groups
    of_group(spec, trials, group)
    return [group]


def _host_group(sweep: HostSession) -> str:
    from sweeper.launch import LaunchConfig
    from sweeper.remote.groups import detect_group

    return sweep.spec.hosts[0].group or detect_group(
        sweep.host, LaunchConfig(sweep.spec.server.launcher).launcher_argv(sweep.python))


def open_host_of(spec: StudySpec, storage: str | None, reporter: ConsoleReporter,
                  group: str | None) -> HostSession:
    """The session of the host `sweeper confirm` runs on: the first host, or with
    ``group`` the first of that group (a host that names its group in the study file is
    not reached to ask; one that does not is asked its GPU type)."""
    from sweeper.run.common import SweepOptions
    from sweeper.run.hostview import host_view
    from sweeper.run.session import HostSession

    for i, h in enumerate(spec.hosts):
        if group is not None and h.group and h.group != group:
            continue
        sweep = HostSession(host_view(spec, i), SweepOptions(trials=0, storage=storage),
                            reporter)
        sweep.open(require_existing=True)
        try:
            if group is None or h.group or _host_group(sweep) == group:
                return sweep
        except BaseException:
            sweep.close()
            raise
        sweep.close()
    raise InputError(f"{spec.path}: hosts: none is of group {group!r}; add one of that "
                     "group (hosts[i].group) to confirm its leaders")


def confirm_group(sweep: HostSession, wanted: str | None = None) -> str | None:
    """The group whose leaders `sweeper confirm` measures: its host's (``--group``, else
    the study's first host's), when the study measured on several kinds of hardware
    (results are compared only within one); None with one group (every trial, as the
    sweep compared them)."""
    from sweeper.results.hosts import trial_groups

    groups = trial_groups(sweep.study.get_trials(deepcopy=False))
    if len(groups) < 2:
        return None
    group = wanted or _host_group(sweep)
    if group not in groups:
        raise InputError(f"{sweep.spec.path}: hosts[0] ({sweep.host.name}) is of group "
                         f"{group!r}, which measured nothing in study {sweep.spec.name!r}; "
                         f"its groups: {', '.join(groups)}. List first a host of the group "
                         "to confirm, or pass --group")
    others = [shlex.quote(g) for g in groups if g != group]
    which = "the other's" if len(others) == 1 else "another's"
    out.print(f"Confirming group {group}'s leaders on {sweep.host.name} (the study was "
              f"measured on {len(groups)} groups of hardware: {', '.join(groups)}; "
              f"{which} with --group {' | '.join(others)}, every group's at once with "
              f"--group {ALL}).", markup=False, soft_wrap=True)
    return group
