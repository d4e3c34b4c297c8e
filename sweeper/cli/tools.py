"""Commands that start no sweep: ``validate``, ``bench``, ``trust-host``."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from sweeper.cli.common import StudyOpt, app, err, errors, load, out

if TYPE_CHECKING:
    from sweeper.study import StudySpec


ValidateStorageOpt = Annotated[str | None, typer.Option(
    help="The storage URL optimize will be given (its --storage; default: the study file's "
         "storage:, else sqlite:///DIR/NAME.db with DIR the study file's folder). Checked: "
         "it opens, and a study of this name in it has the same space and objective. "
         "Nothing is created in it.")]


@app.command()
@errors
def validate(study: StudyOpt, storage: ValidateStorageOpt = None) -> None:
    """Check a study file and show what it will search. Starts nothing (a study on this
    machine: its flags are checked against the launcher's --help)."""
    from sweeper.measure.prompts import coverage_note, study_prompts
    from sweeper.search.space import SearchSpace
    from sweeper.study.base import public_url
    from sweeper.study.decode_log import decode_log_warning

    spec = load(study)
    space = SearchSpace(spec)
    flags = sorted(space.emitted_flags())
    if _checks_here(spec):
        _check_flags_here(spec, flags)
    b = spec.benchmark
    prompts = study_prompts(spec.path, b.prompts, b.input_tokens)  # refused before "ok"
    url, peeked = _check_storage(spec, storage, space)  # refused before "ok" too
    out.print(f"{spec.path}: ok — study {spec.name!r}", markup=False)
    out.print(f"  storage: {public_url(url)}: {peeked}", markup=False)
    for h in spec.hosts:
        note = " (placeholder: set it before `optimize`)" if h.is_placeholder else ""
        out.print(f"  host: {h.ssh}{note}")
    out.print(f"  baseline: {'yes' if spec.baseline else 'no'}; "
              f"start_from: {len(spec.start_from)}; parameters: {', '.join(spec.space)}")
    out.print(f"  concurrency: {', '.join(map(str, spec.objective.levels))} (each trial "
              f"measures every level on one server start); objective: "
              f"{spec.objective.describe()}", markup=False)
    out.print(f"  flags SGLang must accept: {', '.join(flags)}")
    if _checks_here(spec):
        out.print("  every flag is in this machine's launcher --help, every value in its choices")
    else:
        out.print("  (checked against the node's `launcher --help` when optimize starts, "
                  "before any server)")
    cats = sorted({c for c in prompts.categories if c is not None})
    out.print(f"  prompts: {prompts.source}, {len(prompts)} ("
              f"{f'{len(cats)} categories' if cats else 'no categories'}; one fixed order "
              f"for every trial), temperature {b.temperature:g}", markup=False)
    for level in spec.objective.levels:
        coverage = coverage_note(prompts, b.runs, level)
        if coverage:
            err.print(f"warning: {coverage}", markup=False)
    short = decode_log_warning(b.max_tokens, spec.server.args)
    if short:
        err.print(f"warning: {spec.path}: {short}", markup=False, soft_wrap=True)
    count = _space_size(space)
    over = model_limit_note(spec.sweep.sampler, count)
    if over:
        err.print(f"warning: {spec.path}: {over}", markup=False, soft_wrap=True)
    out.print(f"  {_plan_text(spec, space, count)}", markup=False)


def _space_size(space: Any) -> int | None:
    """Distinct configurations, counted up to one past the model sampler's limit; None
    for a continuous range."""
    from sweeper.search.model.candidates import MAX_CANDIDATES

    seen: set[str] = set()
    try:
        for _, eff in space.configurations():
            seen.add(repr(sorted(eff.items())))
            if len(seen) > MAX_CANDIDATES:
                break
    except TypeError:
        return None
    return len(seen)


def model_limit_note(sampler: str, count: int | None) -> str | None:
    """The model sampler scores every configuration of the space; past its limit it hands
    the whole study to TPE, which searches far worse: say so before anything starts."""
    from sweeper.search.model.candidates import MAX_CANDIDATES

    if sampler != "model" or count is None or count <= MAX_CANDIDATES:
        return None
    return (f"sweep.sampler model: the space has more than {MAX_CANDIDATES:,} configurations, "
            "more than the model sampler scores, so TPE samples it alone; fix dimensions "
            "that do not matter (server.args) or narrow their choices")


def _plan_text(spec: Any, space: Any, count: int | None, trials: int = 40) -> str:
    """The space's size and the node time of the study as written (``optimize``'s
    default of 40 trials, the confirm phase the study asks for)."""
    from sweeper.run.confirm import confirm_plan
    from sweeper.search.model.candidates import MAX_CANDIDATES
    from sweeper.search.nodetime import Costs, plan_seconds

    if count is None:
        size = "a continuous range (not countable)"
    else:
        size = f"{count:,}{'+' if count > MAX_CANDIDATES else ''} configurations"
    b, sw = spec.benchmark, spec.sweep
    plan = confirm_plan(spec)
    restarts = trials + plan.restarts  # the baseline is one of the trials
    runs = b.runs * len(spec.objective.levels)
    top = b.max_runs if b.extends and b.max_runs else b.runs
    text = (f"space: {size}; as written (--trials {trials}, confirm "
            f"{plan.restarts} restarts): {restarts} restarts, "
            f"{_span(restarts * runs, restarts * top * len(spec.objective.levels), ',')} runs")
    if sw.restart_cost is None or sw.run_cost is None:
        return text + "; set sweep.restart_cost and sweep.run_cost to see the node-hours"
    costs = Costs(sw.restart_cost, sw.run_cost)
    confirm_runs = plan.runs * (plan.top + 1) if plan.top else 0
    # a confirm visit runs as long as a start is worth, up to max_runs (confirm_runs.visit_runs)
    confirm_max = plan.restarts * top if plan.top else 0
    low, high = plan_seconds(costs, trials, runs, b.warmup, top * len(spec.objective.levels),
                             plan.restarts, confirm_runs, confirm_max)
    return text + (f"; node time {_span(low / 3600, high / 3600, '.1f')} h at "
                   f"{sw.restart_cost:g} s a restart and {sw.run_cost:g} s a run "
                   f"(sweep.stop_when_sure {sw.stop_when_sure:g} may end it sooner)")


def _span(low: float, high: float, fmt: str) -> str:
    """``low-high``, or one figure when they read the same ("40 runs", not "40-40")."""
    a, b = format(low, fmt), format(high, fmt)
    return a if a == b else f"{a}-{b}"


def _check_storage(spec: StudySpec, storage: str | None, space: Any) -> tuple[str, str]:
    """The storage optimize will use (``--storage``, else the study file's), checked as
    optimize would open it, creating nothing: its URL, and what it holds. A study already
    in it must have this file's space and objective (optimize refuses it otherwise)."""
    from sweeper.remote.preflight import optional_dimensions
    from sweeper.results.storage import check_objective, check_space, peek, space_signature
    from sweeper.study.values import check_storage

    url = check_storage("--storage", storage, key="") if storage is not None \
        else spec.storage
    peeked, stored = peek(url, spec.name)
    if stored is not None:
        # a dimension only some builds have is dropped at optimize's preflight: the stored
        # space may lack it by right, so only a study without one is compared here
        if not optional_dimensions(spec):
            check_space(stored, space_signature(space.distributions()), str(spec.path), url)
        check_objective(stored, spec.objective, str(spec.path), url)
    return url, peeked


def _checks_here(spec: StudySpec) -> bool:
    """This machine runs the launcher itself (no SSH, no container image, no Slurm node):
    asking its ``--help`` costs no connection and starts nothing."""
    h = spec.hosts[0]
    return h.is_local and h.container is None and h.slurm is None


def _check_flags_here(spec: StudySpec, flags: list[str]) -> None:
    """A flag the local launcher's ``--help`` lacks (a typo in server.args) is refused
    now, with a did-you-mean (remote/preflight.py), not at the first restart."""
    from sweeper.errors import InputError, PreflightError
    from sweeper.launch import LaunchConfig
    from sweeper.remote.local import LocalHost
    from sweeper.remote.preflight import flag_values, require_flags

    python = spec.hosts[0].python or sys.executable
    try:
        require_flags(LocalHost(), LaunchConfig(spec.server.launcher).launcher_argv(python),
                      flags, values=flag_values(spec))
    except PreflightError as exc:
        raise InputError(f"{spec.path}: {exc}") from None


@app.command()
@errors
def bench(
    url: Annotated[str, typer.Option(help="Base URL of a running SGLang server.")],
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens to generate per "
                                                     "request.")] = 500,
    runs: Annotated[int, typer.Option(min=1, help="Measured runs (the table gives their "
                                                 "mean and 95% interval).")] = 5,
    warmup: Annotated[int, typer.Option(min=0, help="Unmeasured runs first (CUDA graphs, "
                                                   "caches).")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight at "
                                                        "once.")] = 1,
    api: Annotated[Literal["chat", "generate"], typer.Option(
        help="The API to stream from.")] = "chat",
    prompts: Annotated[str, typer.Option(help="builtin, synthetic, or a JSONL file (sweeper's "
                                               "messages, ShareGPT or MT-Bench)")] = "builtin",
    input_tokens: Annotated[int | None, typer.Option(
        min=1, help="With --prompts synthetic: prompts of about this many tokens.")] = None,
    temperature: Annotated[float, typer.Option(
        min=0, max=2, help="Sampling temperature of the measured runs.")] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Benchmark one running server (the same code the sweep's trials use)."""
    from urllib.parse import urlsplit

    from sweeper.errors import InputError
    from sweeper.measure import BenchSpec, format_table, load_prompts, run_benchmark

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"--url {url}: give the server's base URL, such as "
                         "http://127.0.0.1:30000")
    spec = BenchSpec(api=api, max_tokens=max_tokens, runs=runs, warmup=warmup,
                     concurrency=concurrency, prompts=prompts, input_tokens=input_tokens,
                     temperature=temperature)
    prompt_set = load_prompts(prompts, input_tokens)
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
    """The simulator says what it is in /model_info; real SGLang does not. (/model_info is
    0.5.23's name; /get_model_info, which it logs a deprecation for, only on older builds.)"""
    import httpx

    for path in ("/model_info", "/get_model_info"):
        try:
            r = httpx.get(f"{url}{path}", timeout=5)
            if r.status_code == 200:
                return bool(r.json().get("simulated"))
        except (httpx.HTTPError, ValueError, AttributeError):
            return False
    return False


@app.command(name="trust-host")
@errors
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
