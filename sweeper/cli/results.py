"""Commands that read a study and never write it: ``status``, ``export``, ``dashboard``,
``report``. A study that never ran is one line and exit 2, and no storage is created."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sweeper.cli.common import StorageOpt, StudyOpt, app, errors, load, out, table_console
from sweeper.errors import InputError

if TYPE_CHECKING:
    from sweeper.study import StudySpec


@app.command()
@errors
def status(study: StudyOpt, storage: StorageOpt = None,
           all_trials: Annotated[bool, typer.Option("--all", help="Show every trial, not only "
                                                          "the last 40.")] = False,
           as_csv: Annotated[bool, typer.Option("--csv", help="Every trial as CSV (one "
                                                              "column per knob).")] = False,
           as_json: Annotated[bool, typer.Option("--json", help="Every trial as JSON "
                                                                "records.")] = False) -> None:
    """A table of the trials, the best configuration so far, and its speedup."""
    from sweeper.results.status import print_status

    if as_csv and as_json:
        raise InputError("--csv and --json: choose one")
    spec = load(study)
    fmt = "csv" if as_csv else "json" if as_json else "table"
    print_status(table_console(), spec, storage or spec.storage,
                 limit=None if all_trials else 40, fmt=fmt)


@app.command()
@errors
def export(study: StudyOpt,
           output: Annotated[Path, typer.Option("-o", "--output", help="The launch YAML.")] =
           Path("best.yaml"),
           storage: StorageOpt = None,
           at: Annotated[int | None, typer.Option(
               "--at", help="The winner at this concurrency level (a study of several "
                            "levels).")] = None,
           adaptive: Annotated[bool, typer.Option(
               "--adaptive", help="The per-level winners as SGLang's adaptive mode (steps by "
                                  "batch size; JSON beside the YAML), when they differ only "
                                  "in steps.")] = False,
           group: Annotated[str | None, typer.Option(
               "--group", help="The winner of this group of hosts (a study measured on "
                               "several kinds of hardware has one per group).")] = None,
           simplest: Annotated[bool, typer.Option(
               "--simplest", help="The simplest configuration tied with the winner within "
                                  "the noise (fewest settings away from SGLang's defaults), "
                                  "when status names one.")] = False
           ) -> None:
    """Write the best configuration as a YAML for `sglang.launch_server --config`."""
    from sweeper.results.export import export_best

    spec = load(study)
    with _writing(f"--output {output}", output, "give another path"):
        written = export_best(spec, storage or spec.storage, output, at=at, adaptive=adaptive,
                              group=group, simplest=simplest,
                              check_flags=lambda flags: _host_has(spec, flags))
    for line in written.lines:
        out.print(line, markup=False, soft_wrap=True)


@app.command()
@errors
def dashboard(study: StudyOpt, storage: StorageOpt = None,
              port: Annotated[int, typer.Option(help="Local port.")] = 8080,
              host: Annotated[str, typer.Option(help="Bind address (keep 127.0.0.1: the "
                                                     "dashboard has no authentication).")]
              = "127.0.0.1") -> None:
    """optuna-dashboard on the study's storage, with its artifacts."""
    from sweeper.results.dash import serve

    spec = load(study)
    serve(spec, storage or spec.storage, host, port, out)


@app.command()
@errors
def report(study: StudyOpt, storage: StorageOpt = None,
           output: Annotated[Path | None, typer.Option(
               "-o", "--output", help="Directory for report.html, the figures and "
                                      "trials.csv (default: beside the storage).")] = None,
           group: Annotated[str | None, typer.Option(
               "--group", help="The report of this group of hosts (a study measured on "
                               "several kinds of hardware has one per group).")] = None
           ) -> None:
    """The campaign as pictures and tables: report.html (opens from disk), PNGs, CSV."""
    from sweeper.results.report import write_report

    spec = load(study)
    with _writing("report", output, "give another folder with --output"):
        written = write_report(spec, storage or spec.storage, output, group)
    for line in written.lines:
        out.print(line, markup=False, soft_wrap=True)


@contextlib.contextmanager
def _writing(what: str, output: Path | None, instead: str) -> Iterator[None]:
    """A write the OS refuses (the folder read-only, full, not ours) as one line naming
    the path it refused, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise InputError(f"{what}: cannot write {exc.filename or output} "
                         f"({exc.strerror or exc}); {instead}") from None


def _host_has(spec: StudySpec, flags: list[str]) -> None:
    """The study's host's SGLang has ``flags`` (its ``--help``), else PreflightError."""
    from sweeper.launch import LaunchConfig
    from sweeper.remote.preflight import require_flags
    from sweeper.run.common import open_host

    host, python = open_host(spec)
    try:
        require_flags(host, LaunchConfig(spec.server.launcher).launcher_argv(python),
                      {f: "export --adaptive" for f in flags})
    finally:
        host.close()
