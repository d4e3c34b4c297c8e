"""Commands that start no sweep: ``validate``, ``bench``, ``trust-host``."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import typer

from sweeper.cli.common import StudyOpt, app, err, errors, load, out


@app.command()
@errors
def validate(study: StudyOpt) -> None:
    """Check a study file and show what it will search. Starts nothing."""
    from sweeper.search.space import SearchSpace

    spec = load(study)
    space = SearchSpace(spec)
    out.print(f"{spec.path}: ok — study {spec.name!r}, storage {spec.storage}")
    for h in spec.hosts:
        note = " (placeholder: set it before `optimize`)" if h.is_placeholder else ""
        out.print(f"  host: {h.ssh}{note}")
    out.print(f"  baseline: {'yes' if spec.baseline else 'no'}; "
              f"start_from: {len(spec.start_from)}; parameters: {', '.join(spec.space)}")
    out.print(f"  concurrency: {', '.join(map(str, spec.objective.levels))} (each trial "
              f"measures every level on one server start); objective: "
              f"{spec.objective.describe()}", markup=False)
    out.print(f"  flags SGLang must accept: {', '.join(sorted(space.emitted_flags()))}")


@app.command()
@errors
def bench(
    url: Annotated[str, typer.Option(help="Base URL of a running SGLang server.")],
    max_tokens: Annotated[int, typer.Option(min=1)] = 500,
    runs: Annotated[int, typer.Option(min=1)] = 5,
    warmup: Annotated[int, typer.Option(min=0)] = 1,
    concurrency: Annotated[int, typer.Option(min=1)] = 1,
    api: Annotated[Literal["chat", "generate"], typer.Option(
        help="The API to stream from.")] = "chat",
    prompts: Annotated[str, typer.Option(help="builtin or a .jsonl file")] = "builtin",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Benchmark one running server (the same code the sweep's trials use)."""
    from sweeper.measure import BenchSpec, format_table, load_prompts, run_benchmark

    spec = BenchSpec(api=api, max_tokens=max_tokens, runs=runs, warmup=warmup,
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
