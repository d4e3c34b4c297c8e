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
# Usage: bash -c DETACH_WRAPPER sweeper-wrap EXIT_PATH ENV_FILE LOG_PATH KEEP ARGV...
# (ENV_FILE "": none). An env file that cannot be read is the wrapper's failure (exit 125,
# said in the log), never a server started without its environment.
#
# KEEP > 0 caps the log (logcap.py): argv's output goes through a pipe to `sweeper_cap`,
# which appends its first KEEP bytes to LOG_PATH, then keeps at most the last 2*KEEP; each
# time the rest outgrows that, the file is rewritten as the head, one line saying how much
# was cut, and the last KEEP bytes. `head -c` under `stdbuf -o0` writes every read at once, so
# the log stays live for the hang watchdog and the decode lines. The capper ignores TERM: a
# stopped server's last lines (its shutdown, a traceback) still reach the log; it ends at
# the pipe's end of file, when the server's whole tree has closed its output.
DETACH_WRAPPER = r'''
sweeper_cap() {
  local log=$1 keep=$2 head=0 cut=0 mark=0 size before
  local ub=""  # head -c reads no byte past its count; unbuffered, it writes each read at once
  command -v stdbuf > /dev/null && ub="stdbuf -o0"
  $ub head -c "$keep" >> "$log" || { cat > /dev/null; return; }
  head=$(wc -c < "$log")
  while :; do
    before=$(wc -c < "$log")
    $ub head -c "$keep" >> "$log" || { cat > /dev/null; return; }
    size=$(wc -c < "$log")
    [ $((size - before)) -lt "$keep" ] && break
    [ $((size - head - mark)) -lt $((2 * keep)) ] && continue
    cut=$((cut + size - head - mark - keep))
    { head -c "$head" -- "$log"
      awk -v n="$cut" 'BEGIN { printf "\n[sweeper: %.1f MB cut here]\n", n / 1e6 }'
      tail -c "$keep" -- "$log"; } > "$log.cut" && mv -f -- "$log.cut" "$log" ||
      { cat > /dev/null; return; }
    mark=$(( $(wc -c < "$log") - head - keep ))
  done
}
exit_path="$1"; env_file="$2"; log="$3"; keep="$4"; shift 4
if [ -n "$env_file" ]; then
  if [ ! -r "$env_file" ]; then
    echo "sweeper: cannot read the environment file $env_file" >&2
    echo 125 > "$exit_path"; exit 125
  fi
  while IFS= read -r -d "" kv; do export "$kv"; done < "$env_file"
  rm -f -- "$env_file"
fi
if [ "$keep" -gt 0 ] 2>/dev/null; then
  "$@" 2>&1 | ( trap "" TERM INT HUP; umask 077; sweeper_cap "$log" "$keep" )
  code=${PIPESTATUS[0]}
else
  "$@"; code=$?
fi
echo "$code" > "$exit_path"
'''


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
