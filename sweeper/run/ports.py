"""The port a sweep's server listens on: ``--port``, the study's ``server.port``, or, for a
study on the simulator on this machine whose file sets no port, one chosen here.

Two demos at once on one machine (two clones, two storages) must not share a port, and a
port held by something else must not stop a demo. A port drawn afresh each run would
break what the port names besides the socket: the study's lock and its servers' marker
are per host and port (run/sweep.py), so a resumed sweep must find the port its killed
predecessor used, to stop the server that one left behind. So the choice is a function of
the storage and the study (the same sweep gets the same port every time, another storage
another port), moved on to the next port only when a stranger holds it.
"""

from __future__ import annotations

import dataclasses
import hashlib

from sweeper.remote.local import LocalHost
from sweeper.remote.workdir import marker_prefix, worker_marker
from sweeper.study import StudySpec
from sweeper.study.base import storage_key

# Below Linux's ephemeral range (32768-60999: outgoing connections take those) and SGLang's
# default 30000; 10000 ports make two storages' first choices collide 1 time in 10000.
AUTO_PORTS = range(20000, 30000)
TRIES = 50


@dataclasses.dataclass(frozen=True)
class PortChoice:
    spec: StudySpec  # the study with the port this run uses
    note: str | None  # what to tell the user about it (None: the study's own port)


def choose_port(spec: StudySpec, storage_url: str, port: int | None = None) -> PortChoice:
    """``--port`` when given, else a chosen port for a local simulated study that sets no
    ``server.port``, else the study as it is."""
    if port is not None:
        return PortChoice(_with_port(spec, port), None)
    if not _auto(spec):
        return PortChoice(spec, None)
    chosen = auto_port(storage_url, spec.name)
    return PortChoice(_with_port(spec, chosen),
                      f"port {chosen} (its own on this machine: the study sets no "
                      "server.port; --port picks one)")


def _auto(spec: StudySpec) -> bool:
    hosts = spec.hosts
    return (len(hosts) == 1 and hosts[0].is_local and hosts[0].port is None
            and "port" not in spec.server.model_fields_set
            and "sweeper.sim" in spec.server.launcher)


def _with_port(spec: StudySpec, port: int) -> StudySpec:
    return dataclasses.replace(spec, server=spec.server.model_copy(update={"port": port}))


def auto_port(storage_url: str, study: str, host: LocalHost | None = None) -> int:
    """The first port, from one derived from the storage and the study, that is free or
    held by a server of this very study (a killed sweep's: the next sweep stops it)."""
    host = host or LocalHost()
    key = storage_key(storage_url, study)
    start = int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(AUTO_PORTS)
    for i in range(TRIES):
        port = AUTO_PORTS[(start + i) % len(AUTO_PORTS)]
        if host.port_free(port, "127.0.0.1"):
            return port
        marker = worker_marker(storage_url, study, f"local:{port}")
        if host.marked_groups(marker_prefix(marker)):
            return port  # our own leftover: the sweep stops it before its first start
    return AUTO_PORTS[start]  # every one busy: the preflight says so, naming the port
