"""optuna-dashboard on the study's storage, bound to loopback by default."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from sweeper.results.storage import artifact_store, load_existing, open_storage

if TYPE_CHECKING:
    from sweeper.study import StudySpec


def serve(spec: StudySpec, storage_url: str, host: str, port: int, console: Console) -> None:
    from optuna_dashboard import run_server

    load_existing(storage_url, spec.name, str(spec.path))  # a clear error before serving
    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]warning: binding {host}: optuna-dashboard has write endpoints "
                      "and no authentication; prefer an SSH tunnel to 127.0.0.1[/]")
    console.print(f"optuna-dashboard for {spec.name!r}: http://{host}:{port}/dashboard/ "
                  "(Ctrl-C stops it)")
    run_server(open_storage(storage_url), host=host, port=port,
               artifact_store=artifact_store(storage_url, spec.name))
