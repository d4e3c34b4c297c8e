"""A server's environment, handed over through a private file instead of a command line.

A command line is public on a shared GPU node: every user reads it in ``ps`` or
``/proc/*/cmdline`` for the whole life of the process, and an ``env HF_TOKEN=...`` prefix
would put the token there. So the environment is written to a file readable by its owner
only (0600), which the detached wrapper (``DETACH_WRAPPER``) reads, exports to the server
and removes before it starts the server. Any launcher that starts a process on a host
(plain, or a container's ``--env-file`` adapted from ``encode``) can reuse this.

The file holds ``NAME=value`` entries separated by NUL: a value is data, never parsed by a
shell (it may hold quotes, ``$``, newlines; a study value cannot hold a NUL).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from sweeper.errors import InputError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Runs argv with the environment read from a private file, then records the exit code.
# Usage: bash -c DETACH_WRAPPER sweeper-wrap EXIT_PATH ENV_FILE ARGV...  (ENV_FILE "": none)
# An env file that cannot be read is the wrapper's failure (exit 125, said in the log),
# never a server started without its environment.
DETACH_WRAPPER = (
    'exit_path="$1"; env_file="$2"; shift 2; '
    'if [ -n "$env_file" ]; then '
    'if [ ! -r "$env_file" ]; then echo "sweeper: cannot read the environment file '
    '$env_file" >&2; echo 125 > "$exit_path"; exit 125; fi; '
    'while IFS= read -r -d "" kv; do export "$kv"; done < "$env_file"; '
    'rm -f -- "$env_file"; fi; '
    '"$@"; echo $? > "$exit_path"'
)


def encode(env: Mapping[str, str]) -> bytes:
    """``NAME=value\\0`` per variable; InputError for a name no shell could export."""
    for key, value in env.items():
        if not _ENV_NAME.match(key):
            raise InputError(f"environment variable name {key!r} is not a valid shell name")
        if "\0" in value:
            raise InputError(f"environment variable {key}: its value holds a NUL character")
    return b"".join(f"{k}={v}\0".encode() for k, v in env.items())


def env_path_for(log_path: str) -> str:
    """The private file beside a start's log: ``.<start>.env`` (hidden, removed on start)."""
    folder, name = posixpath.split(log_path)
    stem = name[:-4] if name.endswith(".log") else name
    return posixpath.join(folder, f".{stem}.env")
