"""Argv -> the remote shell, quoted in exactly one place: a value from a study file is
data on the remote side and never runs as shell."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from sweeper.errors import InputError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def remote_path(path: str) -> str:
    """Quote a path for the remote shell, keeping a leading ``~`` expandable there."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def sftp_path(path: str) -> str:
    # The SFTP server starts in the login directory, so "~/x" is just "x" there.
    if path == "~":
        return "."
    return path[2:] if path.startswith("~/") else path


def env_argv(env: Mapping[str, str] | None) -> list[str]:
    """``env K=V ...`` as argv words: the variables reach that one process only."""
    if not env:
        return []
    for key in env:
        if not _ENV_NAME.match(key):
            raise InputError(f"environment variable name {key!r} is not a valid shell name")
    return ["env", *(f"{k}={v}" for k, v in env.items())]



def host_timeout(seconds: float) -> list[str]:
    """GNU ``timeout`` on the host: it leads its own process group and, past the deadline,
    signals the whole group (TERM, then KILL 5 s later), exit status 124 (137 after KILL)."""
    return ["timeout", "--kill-after=5", f"{max(seconds, 1.0):g}s"]
