"""optuna-dashboard on the study's storage, bound to loopback by default. It only reads:
the study page's note naming the winner is written by the sweep (results/headline.py).
It reads through results/knobview.py: the user's knobs as parameters, the winner first."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from rich.console import Console

from sweeper.errors import InputError
from sweeper.results.knobview import KnobView
from sweeper.results.storage import artifact_store, load_existing, open_storage

if TYPE_CHECKING:
    from sweeper.study import StudySpec


def study_url(host: str, port: int, study_id: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/dashboard/studies/{study_id}"


def _check_port(host: str, port: int) -> None:
    """The address is free to listen on, as bottle's wsgiref server will (SO_REUSEADDR):
    else one line before the dashboard's URL is printed, not a traceback after it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise InputError(f"--port {port}: cannot listen on {host}:{port} "
                             f"({exc.strerror or exc}); pick another with --port") from None


def serve(spec: StudySpec, storage_url: str, host: str, port: int, console: Console) -> None:
    from bottle import run
    from optuna_dashboard import wsgi

    from sweeper.results.dashstyle import with_style

    # a clear error before serving
    load_existing(storage_url, spec.name, str(spec.path), spec.storage)
    _check_port(host, port)
    storage = open_storage(storage_url)
    study_id = storage.get_study_id_from_name(spec.name)
    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]warning: binding {host}: optuna-dashboard has write endpoints "
                      "and no authentication; prefer an SSH tunnel to 127.0.0.1[/]")
    console.print(f"optuna-dashboard for {spec.name!r}: {study_url(host, port, study_id)} "
                  "(Ctrl-C stops it)")
    # the user's knobs as parameters, the winner as the best trial (results/knobview.py)
    # (and its tables fitted to their cards: results/dashstyle.py); optuna_dashboard's
    # run_server is this, with bottle's wsgiref server
    app = wsgi(KnobView(storage, spec.benchmark.aggregate),
               artifact_store=artifact_store(storage_url, spec.name, spec.artifacts))
    run(with_style(app), host=host, port=port)
