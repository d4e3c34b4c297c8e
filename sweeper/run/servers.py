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


def stop_strays(host: Host, storage_url: str, study: str, grace: float,
                line: Callable[[str], None], slot: str = "") -> list[int]:
    """Stop every live server of ``study`` in ``storage_url`` on ``host`` (on its port
    ``slot`` when given: another worker of the study may use another port there); their
    pgids."""
    prefix = marker_prefix(storage_url, study) + (f"{slot}:" if slot else "")
    pgids = sorted(host.marked_groups(prefix))
    for pgid in pgids:
        line(f"stopping a server of study {study!r} that an earlier sweeper left running on "
             f"{host.name} (process group {pgid})")
        host.stop_group(pgid, grace=grace)
    return pgids
