"""Where one study's servers write on a host: a folder of its own per storage and study.

``<host workdir>/<study>-<hash of the storage URL and study>/``, and in it one log and one
exit file per server start, named by trial (or confirm visit) and attempt:
``trial-0003-a1.log``, ``trial-0003-a1.exit``. Nothing is ever appended to another start's
file, so the failure classifier, the hang watchdog and the accept-length window read that
start's output only: not the lines of a run before ``--fresh``, nor those of another
checkout sweeping a study of the same name into another storage.

Every server also carries ``SWEEPER_SERVER=<key>:<start>`` in its environment: a server
started by a sweeper killed before it could record it is still found on the host
(``Host.marked_groups``) and stopped by the next sweeper of that study.
"""

from __future__ import annotations

from sweeper.remote.host import Host
from sweeper.results.storage import storage_key

MARKER = "SWEEPER_SERVER"


def run_dir(host_workdir: str | None, storage_url: str, study: str) -> str:
    """The study's own folder under the host's workdir (``~`` kept for the host to expand)."""
    base = (host_workdir or "~/.sweeper").rstrip("/") or "/"
    return f"{base}/{storage_key(storage_url, study)}"


def marker_prefix(storage_url: str, study: str) -> str:
    """What every server of this study in this storage has in its environment."""
    return f"{MARKER}={storage_key(storage_url, study)}:"


def marker_env(storage_url: str, study: str, start: str) -> dict[str, str]:
    return {MARKER: f"{storage_key(storage_url, study)}:{start}"}


def next_start(host: Host, directory: str, tag: str) -> str:
    """``<tag>-a<n>`` for the first n whose log does not exist yet. Only one sweeper works in
    a study's folder at a time (run/lock.py), so nobody else takes that n meanwhile."""
    n = 1
    while host.file_size(f"{directory}/{tag}-a{n}.log") is not None:
        n += 1
    return f"{tag}-a{n}"


def remove_run_dir(host: Host, directory: str) -> None:
    """Delete the study's folder on the host (``--fresh``), and nothing beside it."""
    if directory.startswith("~/"):
        host.run(["sh", "-c", 'rm -rf -- "$HOME/$1"', "sh", directory[2:]], timeout=60)
    else:
        host.run(["rm", "-rf", "--", directory], timeout=60)
