"""Secret flags (``--api-key``, a flag marked in ``server.secrets``) off the command line.

A process's command line is public on a shared GPU node (``ps``, ``/proc/*/cmdline``) for
its whole life. So a secret flag is left out of the server's argv and handed to SGLang
through its own ``--config FILE.yaml`` instead, the file being a FIFO (mode 0600, in a 0700
folder from mktemp) that holds the value only while SGLang reads it, once, at start-up.

Verified in SGLang 0.5.23's source: ``launch_server`` calls ``prepare_server_args`` once, in
the main process; ``ConfigArgumentMerger`` checks the path's suffix (.yaml) and that it
exists, then reads it with one ``open``/``yaml.safe_load``; the merged flags live in
memory (the process's command line shows only ``--config PATH``) and reach the scheduler
processes pickled, never on their command lines. The simulator follows the same rules
(sweeper/sim/config.py).

The value travels in the server's environment (``SECRET_FLAGS_VAR``: the private channel
every host type already has, envfile.py), which the shim below unsets before it execs the
server. It runs where the server runs (on the node, in the container, in the Slurm step),
so the FIFO is where SGLang reads it:

* a writer puts the YAML into the FIFO (blocked until SGLang opens it), then removes the
  folder: nothing of the secret stays on disk, not even a name;
* a watchdog drains and removes the FIFO if the server ends before reading it, so no
  writer lingers in the server's process group.
"""

from __future__ import annotations

import yaml

from sweeper.launch import LaunchConfig

SECRET_FLAGS_VAR = "SWEEPER_SECRET_FLAGS"

# sh -c SHIM sweeper-secrets ARGV...: runs ARGV --config <fifo>, the secret flags in it.
SHIM = r'''
d=$(umask 077 && mktemp -d "${TMPDIR:-/tmp}/sweeper-secrets.XXXXXX") || exit 125
f="$d/flags.yaml"
mkfifo -m 600 "$f" || { rm -rf -- "$d"; exit 125; }
s=$SWEEPER_SECRET_FLAGS
unset SWEEPER_SECRET_FLAGS
server=$$
( printf '%s\n' "$s" > "$f"; rm -rf -- "$d" ) > /dev/null 2>&1 &
( while [ -p "$f" ] && kill -0 "$server" 2> /dev/null; do sleep 1; done
  if [ -p "$f" ]; then cat -- "$f" > /dev/null; rm -rf -- "$d"; fi ) > /dev/null 2>&1 &
exec "$@" --config "$f"
'''


def secret_launch(config: LaunchConfig, python: str) -> tuple[list[str], dict[str, str]]:
    """The server's argv and the environment it needs beside the study's: with secret
    flags, the shim and the flags without them (plus the variable the shim reads); else
    the plain argv."""
    secret = config.secret_flags()
    if not secret:
        return config.argv(python), {}
    public = LaunchConfig(config.launcher,
                          {k: v for k, v in config.args.items() if k not in secret},
                          dict(config.env))
    flags = yaml.safe_dump({k: config.args[k] for k in secret}, sort_keys=False)
    return (["sh", "-c", SHIM, "sweeper-secrets", *public.argv(python)],
            {SECRET_FLAGS_VAR: flags})
