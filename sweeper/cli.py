"""The command layer: parse, call, print. No logic of its own.

Exit codes: 0 success, 1 a sweep that stopped on failures, 2 bad input (one line on
stderr naming the file, key or host; nothing written or started), 130 interrupted.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from sweeper.errors import InputError, SweeperError

# No locals in tracebacks: they could show a secret from the study's environment.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  pretty_exceptions_show_locals=False,
                  help="Find the fastest speculative-decoding configuration for an SGLang "
                       "server, automatically.")


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 160  # a log file or a pipe: do not fold tables at 80 columns
    return console


out = _console()
err = _console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

StudyOpt = Annotated[str, typer.Option("--study", "-s", help="Study name (studies/NAME.yaml) "
                                                            "or path to a study file.")]
StorageOpt = Annotated[str | None, typer.Option(help="Storage URL (default: the study's, "
                                                     "sqlite:///studies/NAME.db).")]


def _errors(fn: F) -> F:
    """Map the error types to exit codes and one clear line."""
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err.print(f"error: {exc}", markup=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except SweeperError as exc:
            err.print(f"error: {exc}", markup=False, soft_wrap=True)
            raise typer.Exit(1) from None
    return wrapper  # type: ignore[return-value]


def _load(study: str):  # noqa: ANN202 - StudySpec, imported lazily for a fast --help
    from sweeper.study import load_study

    return load_study(study)


@app.command()
@_errors
def validate(study: StudyOpt) -> None:
    """Check a study file and show what it will search. Starts nothing."""
    from sweeper.search.space import SearchSpace

    spec = _load(study)
    space = SearchSpace(spec)
    out.print(f"{spec.path}: ok — study {spec.name!r}, storage {spec.storage}")
    for h in spec.hosts:
        note = " (placeholder: set it before `optimize`)" if h.is_placeholder else ""
        out.print(f"  host: {h.ssh}{note}")
    out.print(f"  baseline: {'yes' if spec.baseline else 'no'}; "
              f"start_from: {len(spec.start_from)}; parameters: {', '.join(spec.space)}")
    out.print(f"  flags SGLang must accept: {', '.join(sorted(space.emitted_flags()))}")


@app.command()
@_errors
def optimize(
    study: StudyOpt,
    trials: Annotated[int, typer.Option(min=1, help="Run this many more finished trials.")] = 40,
    timeout: Annotated[float | None, typer.Option(help="Stop starting trials after this many "
                                                       "seconds.")] = None,
    storage: StorageOpt = None,
    sampler: Annotated[str | None, typer.Option(help="tpe (default) or random.")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampler seed.")] = None,
    keep_best: Annotated[bool, typer.Option("--keep-best", help="Leave the best configuration "
                                                                "running at the end.")] = False,
    confirm: Annotated[int | None, typer.Option(
        "--confirm", min=0, help="End with a confirm phase over the top K configurations "
                                 "(default: the study's sweep.confirm_top).")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Delete this study's trials in the "
                                                        "storage first (demo use).")] = False,
) -> None:
    """Run the sweep: restart SGLang with each proposed configuration and benchmark it."""
    import optuna

    import sweeper.results.verdict as R
    from sweeper.results.status import print_summary
    from sweeper.run.progress import ConsoleReporter
    from sweeper.run.sweep import Sweep, SweepAborted, SweepOptions

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # we report trials ourselves
    spec = _load(study)
    opts = SweepOptions(trials=trials, timeout=timeout, storage=storage, sampler=sampler,
                        seed=seed, keep_best=keep_best)
    reporter = ConsoleReporter(out)
    sweep = Sweep(spec, opts, reporter)
    sweep.open(fresh=fresh)
    if sweep.summary.simulated:
        out.print("[dim]Server: the built-in SIMULATED SGLang server (a test double); "
                  "its tok/s are not measurements of real hardware.[/]")
    if len(spec.hosts) > 1:
        err.print(f"warning: {spec.path}: hosts: this version drives one host per sweep; "
                  f"using {spec.hosts[0].ssh}, not {', '.join(h.ssh for h in spec.hosts[1:])}",
                  markup=False, soft_wrap=True)
    out.print(f"Study {spec.name!r} in {sweep.storage_url}, server on {sweep.host.name}. "
              "Ctrl-C stops cleanly; the same command resumes.")
    try:
        summary = sweep.run()
    except KeyboardInterrupt:
        reporter.close()
        err.print(f"interrupted: the current trial was recorded as failed and queued again, "
                  f"its server stopped. Resume with the same command: sweeper optimize "
                  f"--study {study} --trials {trials}", markup=False, soft_wrap=True)
        raise typer.Exit(130) from None
    except SweepAborted as exc:
        reporter.close()
        print_summary(out, sweep.summary)
        err.print(f"error: sweep stopped: {exc}", markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    confirm = spec.sweep.confirm_top if confirm is None else confirm
    if confirm > 0 and summary.stopped_because != "interrupted":
        _confirm(sweep, confirm, spec.sweep.confirm_runs, reporter)
        v = R.verdict(sweep.study, spec.benchmark.objective)
        summary.best, summary.baseline = v.best, v.baseline
    reporter.close()
    print_summary(out, summary)


def _confirm(sweep, top: int, runs: int, reporter) -> None:  # noqa: ANN001
    from sweeper.run.confirm import print_confirm, run_confirm

    out.print(f"Confirm phase: the top {top} configurations and the baseline, {runs} runs "
              "each, interleaved.")
    try:
        outcome = run_confirm(sweep, top, runs)
    except KeyboardInterrupt:
        reporter.close()
        sweep.stop_server()
        err.print("interrupted during the confirm phase; measurements so far are kept. "
                  "Run `sweeper confirm` again to redo it.", markup=False)
        raise typer.Exit(130) from None
    reporter.close()
    print_confirm(out, outcome)


@app.command()
@_errors
def confirm(study: StudyOpt, storage: StorageOpt = None,
            top: Annotated[int, typer.Option(min=1, help="How many top configurations.")] = 3,
            runs: Annotated[int | None, typer.Option(min=1, help="Runs per configuration "
                                                           "(default: the study's)")] = None
            ) -> None:
    """Re-measure the top configurations and the baseline, interleaved, and pick the
    winner on those fresh runs (what `export` then writes)."""
    from sweeper.run.progress import ConsoleReporter
    from sweeper.run.sweep import Sweep, SweepOptions

    spec = _load(study)
    reporter = ConsoleReporter(out)
    sweep = Sweep(spec, SweepOptions(trials=0, storage=storage), reporter)
    sweep.open(require_existing=True)
    try:
        _confirm(sweep, top, runs or spec.sweep.confirm_runs, reporter)
    finally:
        sweep.stop_server()


@app.command()
@_errors
def stop(study: StudyOpt, storage: StorageOpt = None) -> None:
    """Stop the server that `optimize --keep-best` left running."""
    from sweeper.run.sweep import Sweep, SweepOptions

    spec = _load(study)
    sweep = Sweep(spec, SweepOptions(trials=0, storage=storage))
    sweep.open(require_existing=True)
    try:
        handle = sweep.stop_kept()
    finally:
        sweep.host.close()
    if handle is None:
        out.print(f"no server left running by study {spec.name!r}")
    else:
        out.print(f"stopped the server on {handle.host} port {handle.port} "
                  f"(process group {handle.pgid})")


@app.command()
@_errors
def bench(
    url: Annotated[str, typer.Option(help="Base URL of a running SGLang server.")],
    max_tokens: Annotated[int, typer.Option(min=1)] = 500,
    runs: Annotated[int, typer.Option(min=1)] = 5,
    warmup: Annotated[int, typer.Option(min=0)] = 1,
    concurrency: Annotated[int, typer.Option(min=1)] = 1,
    api: Annotated[str, typer.Option(help="chat or generate")] = "chat",
    prompts: Annotated[str, typer.Option(help="builtin or a .jsonl file")] = "builtin",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Benchmark one running server (the same code the sweep's trials use)."""
    import json

    from sweeper.measure import BenchSpec, format_table, load_prompts, run_benchmark

    if api not in ("chat", "generate"):
        raise InputError(f"--api {api}: use chat or generate")
    spec = BenchSpec(api=api, max_tokens=max_tokens, runs=runs, warmup=warmup,  # type: ignore[arg-type]
                     concurrency=concurrency, prompts=prompts)
    prompt_set = load_prompts(prompts)
    progress = (lambda m: None) if as_json else (lambda m: err.print(f"[dim]{m}[/]"))
    result = run_benchmark(url.rstrip("/"), spec, on_progress=progress, prompts=prompt_set)
    simulated = _is_simulated(url.rstrip("/"))
    if as_json:
        print(json.dumps({**result.to_dict(), "simulated": simulated}, indent=2, default=str))
    else:
        out.print(format_table(result))
        if simulated:
            out.print("[dim]This server is the SIMULATED SGLang server (a test double): these "
                      "figures are not measurements of real hardware.[/]")


def _is_simulated(url: str) -> bool:
    """The simulator says what it is in /get_model_info; real SGLang does not."""
    import httpx

    try:
        return bool(httpx.get(f"{url}/get_model_info", timeout=5).json().get("simulated"))
    except (httpx.HTTPError, ValueError, AttributeError):
        return False


@app.command()
@_errors
def status(study: StudyOpt, storage: StorageOpt = None,
           all_trials: Annotated[bool, typer.Option("--all", help="Show every trial, not only "
                                                          "the last 40.")] = False) -> None:
    """A table of the trials, the best configuration so far, and its speedup."""
    from sweeper.results.status import print_status

    spec = _load(study)
    print_status(out, spec, storage or spec.storage, limit=None if all_trials else 40)


@app.command()
@_errors
def export(study: StudyOpt,
           output: Annotated[Path, typer.Option("-o", "--output", help="The launch YAML.")] =
           Path("best.yaml"),
           storage: StorageOpt = None) -> None:
    """Write the best configuration as a YAML for `sglang.launch_server --config`."""
    from sweeper.results.export import export_best

    spec = _load(study)
    written = export_best(spec, storage or spec.storage, output)
    for line in written.lines:
        out.print(line, markup=False, soft_wrap=True)


@app.command()
@_errors
def dashboard(study: StudyOpt, storage: StorageOpt = None,
              port: Annotated[int, typer.Option(help="Local port.")] = 8080,
              host: Annotated[str, typer.Option(help="Bind address (keep 127.0.0.1: the "
                                                     "dashboard has no authentication).")]
              = "127.0.0.1") -> None:
    """optuna-dashboard on the study's storage, with its artifacts."""
    from sweeper.results.dash import serve

    spec = _load(study)
    serve(spec, storage or spec.storage, host, port, out)


@app.command(name="trust-host")
@_errors
def trust_host(host: Annotated[str, typer.Argument(help="~/.ssh/config alias or "
                                                        "user@host[:port]")],
               yes: Annotated[bool, typer.Option("--yes", help="Record without asking.")]
               = False) -> None:
    """Show an SSH host's key fingerprint and record it in ~/.ssh/known_hosts."""
    from sweeper.remote.ssh import fetch_host_key, parse_target
    from sweeper.remote.ssh import trust_host as record

    target = parse_target(host)
    key_type, fingerprint, key = fetch_host_key(target)
    out.print(f"{host}: {key_type} key SHA256:{fingerprint.removeprefix('SHA256:')}")
    if not yes and not typer.confirm("Trust this key?", default=False):
        raise typer.Exit(1)
    out.print(record(target, key=key), markup=False)  # the key the user saw, not a refetch


def main() -> None:
    import logging

    # retries of a dropped SSH connection and the like: one readable line each
    logging.basicConfig(level=logging.WARNING, format="sweeper: %(message)s")
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
