"""Where one study's servers write on a host: a folder of its own per storage and study.

``<host workdir>/<study>-<hash of the storage URL and study>/``, and in it one log and one
exit file per server start, named by trial (or confirm visit) and attempt:
``trial-0003-a1.log``, ``trial-0003-a1.exit``. Nothing is ever appended to another start's
file, so the failure classifier, the hang watchdog and the accept-length window read that
start's output only: not the lines of a run before ``--fresh``, nor those of another
checkout sweeping a study of the same name into another storage.

Every server also carries ``SWEEPER_SERVER=<key>@<host label>:<start>`` in its environment: a server
started by a sweeper killed before it could record it is still found on the host
(``Host.marked_groups``) and stopped by the next sweeper of that study.
"""

from __future__ import annotations

import re

from sweeper.errors import HostStorageError
from sweeper.remote.host import Host
from sweeper.study.base import storage_key

MARKER = "SWEEPER_SERVER"
# Free space a start needs in the run folder: a server's log grows by megabytes a minute
# at SGLang's default verbosity, and a start whose log cannot be written leaves nothing to
# classify (no output, no exit code), which must never be blamed on its configuration.
MIN_FREE_BYTES = 16 * 1024 * 1024

# Writes a byte in the folder (creating a file is not enough: a full disk still has
# inodes), removes it, prints the free kilobytes there.
_PROBE = ('cd -- "$1" || exit 3; t=$(mktemp ./.sweeper-probe.XXXXXX) || exit 4; '
          'printf x > "$t" || { rm -f -- "$t"; exit 5; }; rm -f -- "$t"; '
          'df -Pk . | awk \'NR == 2 {print $4}\'')


def run_dir(host_workdir: str | None, storage_url: str, study: str) -> str:
    """The study's own folder under the host's workdir (``~`` kept for the host to expand)."""
    base = (host_workdir or "~/.sweeper").rstrip("/") or "/"
    return f"{base}/{storage_key(storage_url, study)}"


def worker_marker(storage_url: str, study: str, host_label: str) -> str:
    """``<study key>@<host label>``: the servers of one study's worker on one host (two
    workers may share a machine, on two ports; each stops only its own strays)."""
    return f"{storage_key(storage_url, study)}@{re.sub(r'[^A-Za-z0-9._:@-]', '_', host_label)}"


def marker_prefix(marker: str) -> str:
    """What every server of that worker has in its environment: ``SWEEPER_SERVER=<marker>:``.
    (``SWEEPER_SERVER=<study key>@`` matches every worker of the study.)"""
    return f"{MARKER}={marker}:"


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


def check_run_dir(host: Host, directory: str, min_free: int = MIN_FREE_BYTES) -> None:
    """Before a start: the run folder takes a write and has ``min_free`` bytes free, else
    HostStorageError naming the host, the folder and which ("disk full on the node")."""
    result = host.run(["sh", "-c", _PROBE, "sh", directory], timeout=30)
    where = f"{host.name}: the run folder {directory}"
    text = result.stdout.strip()
    if result.exit_code == 5 or (result.exit_code == 0 and text.isdigit()
                                 and int(text) * 1024 < min_free):
        free = f"{int(text) // 1024} MiB free" if text.isdigit() else "no space left"
        raise HostStorageError(f"{where}: disk full on the node ({free}, a start needs "
                               f"{min_free // (1024 * 1024)} MiB): free space there")
    if result.exit_code != 0:
        raise HostStorageError(f"{where} cannot be written (exit {result.exit_code}: "
                               f"{result.stderr.strip()[-200:] or 'no message'}): check its "
                               "permissions and attributes (chattr), and the disk")
