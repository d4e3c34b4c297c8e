"""Servers of this study that nobody recorded: found on the host by their marker.

A sweeper killed between starting a server and writing it into the study (or during the
confirm phase, or with a storage that went away) leaves a server no trial names. Each
server carries its study's marker in its environment (remote/workdir.py), so the next
sweeper of that study, holding the study's lock (run/lock.py) and therefore the only one
that may own such servers, finds and stops them before it checks the port.
"""

from __future__ import annotations

from collections.abc import Callable

from sweeper.remote.host import Host
from sweeper.remote.workdir import marker_prefix


def stop_strays(host: Host, marker: str, study: str, grace: float,
                line: Callable[[str], None]) -> list[int]:
    """Stop every live server carrying ``marker`` (remote/workdir.py ``worker_marker``: this
    study, this storage, this host entry) on ``host``; their pgids."""
    pgids = sorted(host.marked_groups(marker_prefix(marker)))
    for pgid in pgids:
        line(f"stopping a server of study {study!r} that an earlier sweeper left running on "
             f"{host.name} (process group {pgid})")
        host.stop_group(pgid, grace=grace)
    return pgids
