"""Commands that drive servers: ``optimize``, ``confirm``, ``stop``."""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from sweeper.cli.common import (
    StorageOpt,
    StudyOpt,
    again_hint,
    app,
    err,
    errors,
    export_command,
    load,
    one_line,
    out,
    resume_hint,
    simulated_note,
)
from sweeper.cli.confirm_phase import (
    ALL,
    check_group,
    confirm_at_once,
    confirm_every_group,
    confirm_group,
    confirm_hosts,
    confirm_one,
    open_host_of,
)
from sweeper.errors import InputError
from sweeper.results import attrs as A
from sweeper.results.storage import shared_without_store
from sweeper.search.sampler import SAMPLERS
from sweeper.study.base import public_url

PortOpt = Annotated[int | None, typer.Option(
    min=1, max=65535, help="The server's port on the host (default: the study's "
                           "server.port; a study on the simulator on this machine that sets "
                           "none gets a port of its own).")]

if TYPE_CHECKING:
    from sweeper.run.progress import ConsoleReporter
    from sweeper.run.session import HostSession
    from sweeper.run.workers import HostPool
    from sweeper.study import StudySpec


def _allow_delete(yes: bool, study: str, storage: str) -> Callable[[int], bool]:
    """``--fresh`` on a study that has trials: ``--yes``, or a yes at the terminal."""
    def ask(n: int) -> bool:
        if yes:
            return True
        trials = f"{n} trial{'' if n == 1 else 's'}"
        if not sys.stdin.isatty():
            raise InputError(f"--fresh would delete the {trials} of study {study!r} in "
                             f"{storage}; add --yes to confirm (no terminal to ask)")
        return typer.confirm(f"--fresh deletes the {trials} of study {study!r} in "
                             f"{storage}. Delete them?", default=False)
    return ask


@app.command()
@errors
def optimize(
    study: StudyOpt,
    trials: Annotated[int, typer.Option(min=1, help="Run this many more finished trials.")] = 40,
    timeout: Annotated[float | None, typer.Option(help="Stop starting trials after this many "
                                                       "seconds.")] = None,
    storage: StorageOpt = None,
    # a plain string checked by make_sampler: a bad name is one line, not a usage block
    sampler: Annotated[str | None, typer.Option(
        help=f"The search algorithm: {', '.join(SAMPLERS)} (default: the study's "
             "sweep.sampler).")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampler seed.")] = None,
    keep_best: Annotated[bool, typer.Option("--keep-best", help="Leave the best configuration "
                                                                "running at the end.")] = False,
    confirm: Annotated[int | None, typer.Option(
        "--confirm", min=0, help="End with a confirm phase over the top K configurations "
                                 "(default: the study's sweep.confirm_top).")] = None,
    no_confirm: Annotated[bool, typer.Option("--no-confirm", help="Skip the confirm "
                                                                  "phase.")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Delete this study's trials in the "
                                                        "storage first (demo use).")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="With --fresh: delete without "
                                                    "asking.")] = False,
    port: PortOpt = None,
) -> None:
    """Run the sweep: restart SGLang with each proposed configuration and benchmark it."""
    run = _Run(study, storage)  # what a Ctrl-C would interrupt, from the first second on
    try:
        from sweeper.run import ctrlc
        from sweeper.run.ctrlc import sigterm_as_interrupt

        # a Ctrl-C a finalizer drops is raised again at the next check; SIGTERM and a
        # closed terminal take the Ctrl-C path in every phase, the confirm phase's too
        # (killed by default there, its server was left holding the GPUs)
        with ctrlc.kept(), sigterm_as_interrupt():
            _optimize(run, study, trials, timeout, storage, sampler, seed, keep_best,
                      confirm, no_confirm, fresh, yes, port)
    except KeyboardInterrupt:
        run.interrupted()
        raise typer.Exit(130) from None


class _Run:
    """The sweep a Ctrl-C interrupts: nothing yet, an open study, a loop with trials in
    flight. Whatever the moment, the user gets one line (run/interrupted.stopped_line)."""

    def __init__(self, study: str, storage: str | None) -> None:
        self.study, self.storage = study, storage
        self.pool: HostPool | None = None
        self.reporter: ConsoleReporter | None = None
        self.done = False  # finished and stored: only its summary was being printed

    def interrupted(self) -> None:
        from sweeper.run.interrupted import stopped_line

        if self.reporter is not None:
            self.reporter.close()
        if self.done:  # "resume" would start another --trials on top of a finished sweep
            words = ["sweeper", "status", "--study", self.study]
            if self.storage is not None:
                words += ["--storage", public_url(self.storage)]
            err.print("interrupted while printing the summary of a finished sweep: every "
                      f"trial is stored, nothing to resume; see it with: {shlex.join(words)}",
                      markup=False, soft_wrap=True)
            return
        pool = self.pool
        sessions = [w.session for w in pool.workers] if pool is not None else []
        opened = any(s.opened for s in sessions)
        finished = None
        if pool is not None and opened:
            from sweeper.run.reconcile import finished_count

            with contextlib.suppress(Exception):  # the storage may be what failed
                finished = finished_count(pool.study)
        deleted = next((s.deleted for s in sessions if s.deleted), None)
        from sweeper.run.ctrlc import abandoned

        err.print(stopped_line(opened=opened, running=pool.interrupted if pool else (),
                               finished=finished, deleted=deleted, resume=resume_hint(),
                               again=again_hint(), abandoned=abandoned()),
                  markup=False, soft_wrap=True)


def _optimize(run: _Run, study: str, trials: int, timeout: float | None, storage: str | None,
              sampler: str | None, seed: int | None, keep_best: bool, confirm: int | None,
              no_confirm: bool, fresh: bool, yes: bool, port: int | None) -> None:
    if timeout is not None and not timeout > 0:  # NaN too: it would never stop the sweep
        raise InputError(f"--timeout {timeout:g}: give a positive number of seconds, or leave "
                         "it out to run until the trials are done")
    spec = load(study)  # first: bad input is refused before the heavy imports
    from sweeper.measure.prompts import study_prompts  # refused here, not after a start
    study_prompts(spec.path, spec.benchmark.prompts, spec.benchmark.input_tokens)
    from sweeper.study.decode_log import decode_log_warning  # said before any start

    short = decode_log_warning(spec.benchmark.max_tokens, spec.server.args)
    if short:
        err.print(f"warning: {spec.path}: {short}", markup=False, soft_wrap=True)
    if spec.objective.multi and sampler == "model":
        raise InputError(f"{spec.path}: objective: pareto has two objectives; --sampler model "
                         "predicts one: use tpe or random")
    if spec.objective.multi and (confirm or keep_best):
        raise InputError(f"{spec.path}: objective: pareto has a front, not one winner; "
                         f"{'--confirm' if confirm else '--keep-best'} needs {{at: LEVEL}} "
                         "or {mix: ...}")
    import optuna

    from sweeper.errors import SweepAborted
    from sweeper.results.headline import Headline
    from sweeper.results.hosts import print_hosts, trial_groups
    from sweeper.results.status import print_summary
    from sweeper.run import ctrlc
    from sweeper.run.common import SweepOptions
    from sweeper.run.confirm import after_sweep
    from sweeper.run.ports import choose_port
    from sweeper.run.progress import ConsoleReporter
    from sweeper.run.workers import HostPool
    from sweeper.search.nodetime import study_spent

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # we report trials ourselves
    choice = choose_port(spec, storage or spec.storage, port)
    spec = choice.spec
    opts = SweepOptions(trials=trials, timeout=timeout, storage=storage,
                        sampler=sampler, seed=seed,
                        keep_best=keep_best)
    reporter = run.reporter = ConsoleReporter(out)
    pool = run.pool = HostPool(spec, opts, reporter)  # one worker per host (one host: one)
    pool.open(fresh=fresh,
              allow_delete=_allow_delete(yes, spec.name, public_url(pool.storage_url)))
    ctrlc.raise_pending()  # one pressed while the study opened
    export = export_command(study, storage, spec)  # exactly this sweep, read back
    pool.study.set_user_attr(A.EXPORT, export)  # the dashboard note's hint
    if pool.summary.simulated:
        out.print(simulated_note())
    note = shared_without_store(pool.storage_url, spec.artifacts)
    if note is not None:  # once per run, not per host
        out.print(note, markup=False, soft_wrap=True)
    where = "server on" if len(pool.live) == 1 else f"{len(pool.live)} servers on"
    port_note = f", {choice.note}" if choice.note else ""
    out.print(f"Study {spec.name!r} in {public_url(pool.storage_url)}, {where} "
              f"{pool.describe_hosts()}{port_note}. Ctrl-C stops cleanly. {resume_hint()}",
              markup=False, soft_wrap=True)
    try:
        summary = pool.run()
    except SweepAborted as exc:
        reporter.close()
        measured = pool.study.get_trials(deepcopy=False)
        # as at a sweep's end: several groups have no one winner (each group's is below)
        print_summary(out, pool.summary, Headline.of(pool.study, spec.benchmark.aggregate,
                                                     measured), export, trial_groups(measured))
        if len(spec.hosts) > 1:
            print_hosts(out, pool.study, spec.benchmark.aggregate, measured)
        err.print(f"error: sweep stopped: {one_line(str(exc))}", markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    # each group of hardware confirms its own leaders (results are compared only within
    # one) on its first host still in the sweep (not one retired), the groups at once
    hosts = confirm_hosts(pool)
    starts = [(w, after_sweep(w.study, spec, sampler, confirm, no_confirm,
                              summary.stopped_because == "interrupted", w.session.trials()))
              for w in hosts]
    jobs = [(w, start) for w, start in starts if start.run]
    for w, start in starts:
        if len(jobs) > 1 and start.run:
            continue  # said with its group's announcement (confirm_at_once)
        if len(hosts) > 1 and (start.run or start.notes):
            out.print(f"Group {w.group} ({w.label}):", markup=False)
        for note in start.notes:
            out.print(note)
    if jobs:
        # a kill from here on resumes the confirm phase, not a new batch of trials
        assert pool.budget is not None
        pool.budget.save(pool.study, trials, phase="confirm")
    if len(jobs) == 1:
        plan = jobs[0][1].plan
        confirm_one(jobs[0][0].session, plan.top, plan.runs, reporter, plan.rounds)
    elif jobs:
        confirm_at_once(jobs, reporter)
    sweep = hosts[0].session
    pool.done()
    run.done = True
    reporter.close()
    measured = pool.study.get_trials(deepcopy=False)  # read once for the lines below
    if jobs:  # the node time the live line last said, with the confirm phase's added
        summary.node_seconds, summary.node_source = study_spent(spec, measured,
                                                                summary.simulated)
    print_summary(out, summary, Headline.of(sweep.study, spec.benchmark.aggregate, measured),
                  export, trial_groups(measured))
    if len(spec.hosts) > 1:  # each host's state, and each group's winner when several
        print_hosts(out, pool.study, spec.benchmark.aggregate, measured)


@app.command()
@errors
def confirm(study: StudyOpt, storage: StorageOpt = None,
            top: Annotated[int, typer.Option(min=1, help="How many top configurations.")] = 3,
            runs: Annotated[int | None, typer.Option(min=1, help=(
                "Runs per configuration, split evenly over its two fresh starts and "
                "rounded up (3: 2 on each); without it, the study's confirm_runs, or "
                "more when one server start is worth more on this node"))] = None,
            group: Annotated[str | None, typer.Option(
                "--group", help="On a study measured on several kinds of hardware: confirm "
                                "this group's leaders, on its first host (default: the "
                                "first host's group); all: every group's at once, each on "
                                "its own host.")] = None,
            port: PortOpt = None) -> None:
    """Re-measure the top configurations and the baseline on fresh, interleaved starts,
    and pick the winner on every start of each, the sweep's and these (what `export`
    then writes)."""
    from sweeper.measure.prompts import study_prompts
    from sweeper.results.headline import group_export
    from sweeper.results.hosts import trial_groups
    from sweeper.run.ctrlc import sigterm_as_interrupt
    from sweeper.run.ports import choose_port
    from sweeper.run.progress import ConsoleReporter

    spec = load(study)
    study_prompts(spec.path, spec.benchmark.prompts, spec.benchmark.input_tokens)
    spec = choose_port(spec, storage or spec.storage, port).spec
    groups = check_group(spec, storage, group) if group is not None else []  # no host yet
    reporter = ConsoleReporter(out)
    export = export_command(study, storage, spec)
    if group == ALL:
        _confirm_all(spec, storage, groups, top, runs, reporter, export)
        return
    sweep = open_host_of(spec, storage, reporter, group)
    try:
        sweep.group = confirm_group(sweep, group)
        spent = _ConfirmSpent(spec, sweep)
        with sigterm_as_interrupt():  # SIGTERM, SIGHUP: the Ctrl-C path, the server stopped
            confirm_one(sweep, top, runs or spec.sweep.confirm_runs, reporter,
                     exact=runs is not None)
        spent.say()
        if sweep.group and len(trial_groups(sweep.study.get_trials(deepcopy=False))) > 1:
            export = group_export(export, sweep.group)  # several: export needs the group
        out.print(f"Export it: {export}", markup=False, soft_wrap=True)
    finally:
        sweep.stop_server()
        sweep.close()


class _ConfirmSpent:
    """What a `confirm` command cost the node, said at its end beside the study's total
    (a sweep's summary says its own, confirm phase included)."""

    def __init__(self, spec: StudySpec, sweep: HostSession) -> None:
        from sweeper.search.nodetime import study_spent

        self.spec, self.sweep = spec, sweep
        self.before = study_spent(spec, sweep.study.get_trials(deepcopy=False),
                                  sweep.summary.simulated)[0]

    def say(self) -> None:
        from sweeper.search.nodetime import study_spent

        after, source = study_spent(self.spec, self.sweep.study.get_trials(deepcopy=False),
                                    self.sweep.summary.simulated)
        out.print(f"Node time: {(after - self.before) / 3600:.2f} node-hours this confirm "
                  f"phase, {after / 3600:.2f} in all ({source})", markup=False, soft_wrap=True)


def _confirm_all(spec: StudySpec, storage: str | None, groups: list[str], top: int,
                 runs: int | None, reporter: ConsoleReporter, export: str) -> None:
    from sweeper.results.headline import group_export
    from sweeper.run.ctrlc import sigterm_as_interrupt

    sweeps: list[tuple[str, HostSession]] = []
    try:
        for g in groups:  # every host reached before any server starts
            sweep = open_host_of(spec, storage, reporter, g)
            sweep.group = g
            sweeps.append((g, sweep))
        spent = _ConfirmSpent(spec, sweeps[0][1])  # one study: every group's trials
        with sigterm_as_interrupt():
            confirm_every_group(sweeps, top, runs or spec.sweep.confirm_runs, reporter,
                                exact=runs is not None)
        spent.say()
        out.print(f"Export one: {group_export(export, 'NAME')}", markup=False,
                  soft_wrap=True)
    finally:
        for _, sweep in sweeps:
            sweep.stop_server()
            sweep.close()


@app.command()
@errors
def stop(study: StudyOpt, storage: StorageOpt = None) -> None:
    """Stop the server that `optimize --keep-best` left running."""
    from sweeper.run.common import SweepOptions
    from sweeper.run.hostview import host_view
    from sweeper.run.session import HostSession

    spec = load(study)
    sweep = HostSession(host_view(spec, 0), SweepOptions(trials=0, storage=storage))
    sweep.open(require_existing=True)
    try:
        handle = sweep.stop_kept()
    finally:
        sweep.host.close()
        sweep.close()
    if handle is None:
        out.print(f"no server left running by study {spec.name!r}")
    else:
        out.print(f"stopped the server on {handle.host} port {handle.port} "
                  f"(process group {handle.pgid})")
