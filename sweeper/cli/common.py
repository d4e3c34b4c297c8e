"""What every command shares: the consoles, the study and storage options, and the map
from error types to exit codes and one clear line."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

from sweeper import __version__
from sweeper.errors import InputError, SweeperError, one_line

if TYPE_CHECKING:
    from sweeper.study import StudySpec


# No locals in tracebacks: they could show a secret from the study's environment.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  pretty_exceptions_show_locals=False,
                  help="Find the fastest speculative-decoding configuration for an SGLang "
                       "server, automatically.")


def _version(value: bool) -> None:
    if value:
        print(f"sweeper {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")]
        = False) -> None:
    """Find the fastest speculative-decoding configuration for an SGLang server."""


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 160  # a log file or a pipe: do not fold tables at 80 columns
    return console


def table_console() -> Console:
    """The console for a command whose output is a table to read (``status``): a pipe
    gets $COLUMNS, else 80 columns, as a terminal would, not the log width."""
    if not out.is_terminal and "COLUMNS" not in os.environ:
        return Console(highlight=False, soft_wrap=True, width=80)
    return out


out = _console()
err = _console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

StudyOpt = Annotated[str, typer.Option("--study", "-s", help="Study name (studies/NAME.yaml) "
                                                            "or path to a study file.")]
StorageOpt = Annotated[str | None, typer.Option(
    help="Storage URL (default: the study file's storage:, else sqlite:///DIR/NAME.db with "
         "DIR the study file's folder: studies/ for a study given by name).")]


def export_command(study: str, storage: str | None, spec: StudySpec) -> str:
    """``sweeper export`` exactly as it reads back what this command used: the study as it
    was given (a path stays a path), ``--storage`` when it is not the study file's own.
    A password in the URL is shown as ``***`` (never printed), so such a URL needs it
    filled in again."""
    from sweeper.study.base import public_url

    words = ["sweeper", "export", "--study", study]
    if storage is not None and storage != spec.storage:
        words += ["--storage", public_url(storage)]
    return shlex.join([*words, "-o", "best.yaml"])


class Began:
    """Whether a command's body has begun. A Ctrl-C before it (its options being parsed)
    has done nothing, and ``main`` says so; after it, the command speaks for itself."""

    body = False


def errors(fn: F) -> F:
    """Map the error types to exit codes and one clear line."""
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        Began.body = True
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err.print(f"error: {one_line(str(exc))}", markup=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except SweeperError as exc:
            err.print(f"error: {one_line(str(exc))}", markup=False, soft_wrap=True)
            raise typer.Exit(1) from None
    return wrapper  # type: ignore[return-value]


def load(study: str) -> StudySpec:
    from sweeper.study import load_study  # imported here: `--help` stays fast

    return load_study(study)


def simulated_note() -> str:
    return ("[dim]Server: the built-in SIMULATED SGLang server (a test double); its tok/s "
            "are not measurements of real hardware.[/]")


def resume_hint() -> str:
    """The command that resumes what this one was doing: the same command, without the
    options that would start over (``--fresh`` deletes what it should resume)."""
    words = [w for w in sys.argv[1:] if w not in ("--fresh", "--yes")]
    return "Resume with the same command: sweeper " + shlex.join(words)


def again_hint() -> str:
    """The command as typed: what to give again when it was stopped before it began."""
    return "Run the same command again: sweeper " + shlex.join(sys.argv[1:])
