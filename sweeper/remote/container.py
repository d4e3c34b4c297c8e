"""ContainerHost: a host whose SGLang servers run in a container image (docker, or podman
with the same CLI), for a study host with a ``container:`` section (study/container.py).

It wraps the host the study names (LocalHost or SSHHost) and keeps the Host contract, so
the server lifecycle (server.py), the stray scan (run/servers.py), the reconciliation of a
killed sweep and the preflight work unchanged:

* ``start_detached`` starts, on that host, WRAPPER as the detached process. It writes the
  *names* of the server's environment variables into a 0600 env file, runs
  ``docker run -d --name N --label ... --env-file F --network host --pull never IMAGE argv``,
  removes the file, streams ``docker logs -f N`` into the start's log, waits for the
  container, reads its exit code and OOM state with ``docker inspect``, removes it and exits
  with its exit code (so the start's exit file holds the server's). The values are on no
  command line and never on disk: docker reads a bare NAME in an env file from its own
  environment, the wrapper's, which start_detached passes without a command line.
* The wrapper's process group stands for the server: it lives as long as the container
  (``docker wait``), and the container carries it as the label ``sweeper.pgid``, so
  ``stop_group(pgid)`` stops the container with the runtime (``stop -t grace``, then
  ``rm -f``), not only the client (a killed ``docker run`` leaves the container serving).
* ``marked_groups`` finds the wrappers by the study's marker in their environment, and the
  study's containers by label (``sweeper.server``, the same marker) whose wrapper is gone.
* ``run_launcher`` (the preflight's ``--help``) runs in the image with ``run --rm`` once
  ``image inspect`` has found the image on the node: never an implicit pull of a
  multi-GB image inside a timeout.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
import uuid
from collections.abc import Mapping, Sequence

from sweeper.errors import CommandTimeout, InfrastructureError, PreflightError
from sweeper.remote.host import CommandResult, Host
from sweeper.remote.workdir import MARKER
from sweeper.remote.wrapped import WrappedHost
from sweeper.study.container import ContainerSpec
from sweeper.study.slurm import SlurmSpec

# Labels every server container carries (``docker ps --filter label=...`` finds them).
LABEL_SERVER = "sweeper.server"  # <study key>@<host label>:<start>, as SWEEPER_SERVER
LABEL_STUDY = "sweeper.study"  # <study>-<hash of storage and study> (remote/workdir.py)
LABEL_TRIAL = "sweeper.trial"  # the start: trial-0003-a1, confirm-..., best-...
LABEL_PGID = "sweeper.pgid"  # the wrapper's process group on the host
# What the wrapper writes into the log when `docker inspect` says the kernel's OOM killer
# ended the container (server.py classifies the start as "oom" from it).
OOM_NOTE = "OOMKilled=true"
# ...and when `docker run` itself failed (no such GPU driver, a bad run_args...): the
# runtime's fault or the host's, not the configuration's (server.py: InfrastructureError).
NOT_STARTED_NOTE = "the container did not start"

# bash -c WRAPPER sweeper-container NAME ENV_FILE N RUNTIME... M NAMES... RUN_OPTIONS...
# (No `set -u`: an empty "${names[@]}" is an error under it before bash 4.4.)
WRAPPER = r"""
name=$1 env_file=$2 n=$3; shift 3
rt=("${@:1:$n}"); shift "$n"
n=$1; shift
names=("${@:1:$n}"); shift "$n"
pgid=$(awk '{sub(/^.*\) /, ""); print $3}' "/proc/$$/stat")
# names only: docker takes each value from this process's environment
(umask 077 && printf '%s\n' "${names[@]}" > "$env_file") || exit 125
out=$("${rt[@]}" run -d --name "$name" --label "sweeper.pgid=$pgid" --env-file "$env_file" \
  "$@" 2>&1)
rc=$?
rm -f -- "$env_file"
if [ "$rc" -ne 0 ]; then
  printf '%s\n' "$out"
  echo "[sweeper] ${rt[0]} run failed (exit $rc), the container did not start:" \
       "$(printf '%s\n' "$out" | grep -m1 .)"
  exit "$rc"
fi
# a TERM to this group (not through ContainerHost) still stops the container
halt() { "${rt[@]}" stop -t 10 "$name"; "${rt[@]}" rm -f "$name"; exit 143; } >/dev/null 2>&1
trap halt TERM HUP INT
"${rt[@]}" logs -f "$name" 2>&1 &
logs=$!
"${rt[@]}" wait "$name" >/dev/null
wait "$logs"
state=$("${rt[@]}" inspect -f '{{.State.ExitCode}} {{.State.OOMKilled}}' "$name" 2>&1)
read -r code oom <<<"$state"
case "$code" in ''|*[!0-9]*)
  echo "[sweeper] ${rt[0]} inspect $name failed: $state"; exit 125 ;;
esac
if [ "$oom" = true ]; then
  echo "[sweeper] container $name was killed by the kernel's out-of-memory killer" \
       "(${rt[0]} inspect: OOMKilled=true, exit code $code)"
fi
"${rt[@]}" rm -f "$name" >/dev/null 2>&1
exit "$code"
"""

_NOT_FOUND = re.compile(r"no such image|image not known|not found", re.I)
_NO_DAEMON = re.compile(r"cannot connect|is the docker daemon running|connection refused", re.I)


def container_name(marker: str) -> str:
    """``sweeper-<start>-<12 hex>``: readable in ``docker ps``, unique per study, storage,
    host entry and start (the hash is of the whole marker)."""
    start = marker.rsplit(":", 1)[-1] if marker else "server"
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", start)[:60] or "server"
    digest = hashlib.sha256((marker or uuid.uuid4().hex).encode()).hexdigest()[:12]
    return f"sweeper-{safe}-{digest}"


class ContainerHost(WrappedHost):
    """``inner`` (LocalHost or SSHHost) whose detached servers run in ``spec``'s image."""

    def __init__(self, inner: Host, spec: ContainerSpec) -> None:
        super().__init__(inner)
        self.spec = spec

    @property
    def runtime(self) -> list[str]:
        return [self.spec.runtime, *self.spec.runtime_args]

    # --- the server's container ---------------------------------------------------------
    def start_detached(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str,
                       log_path: str, exit_path: str, log_keep: int = 0) -> int:
        marker = env.get(MARKER, "")
        name = container_name(marker)
        key = marker.split("@", 1)[0] if marker else ""
        start = marker.rsplit(":", 1)[-1] if marker else name
        env_file = f"{log_path.removesuffix('.log')}.env"
        names = sorted(k for k in env if k != MARKER)  # the marker stays with the wrapper
        options = ["--network", "host", "--pull", "never",
                   "--label", f"{LABEL_SERVER}={marker}", "--label", f"{LABEL_STUDY}={key}",
                   "--label", f"{LABEL_TRIAL}={start}", *self.spec.gpu_args(),
                   *self.spec.run_args, self.spec.image, *argv]
        wrapper = ["bash", "-c", WRAPPER, "sweeper-container", name, env_file,
                   str(len(self.runtime)), *self.runtime, str(len(names)), *names, *options]
        return self.inner.start_detached(wrapper, env=env, cwd=cwd, log_path=log_path,
                                         exit_path=exit_path,
                                         log_keep=log_keep)

    def stop_group(self, pgid: int, *, grace: float = 15.0) -> None:
        """Stop the container labelled with ``pgid`` (``stop -t grace``, then ``rm -f``),
        then the wrapper's group, unless that group is no longer a sweeper server's."""
        label = f"{LABEL_PGID}={pgid}"
        ids = self._ids(label)
        for cid in ids:
            # the wrapper removes its container once it has ended: either may win the rm
            self.inner.run([*self.runtime, "stop", "-t", str(math.ceil(grace)), cid],
                           timeout=grace + 60)
            self.inner.run([*self.runtime, "rm", "-f", cid], timeout=60)
        self.stop_wrapper(pgid, ids, lambda: bool(self._ids(label)), seconds=30, poll=0.2,
                          survived=f"the container of process group {pgid} survived "
                                   f"`{self.spec.runtime} rm -f`", grace=grace)

    def marked_groups(self, needle: str) -> set[int]:
        found = set(self.inner.marked_groups(needle))
        try:
            labelled = self._labelled()
        except InfrastructureError as exc:  # the first runtime call of a sweep: the user's
            raise PreflightError(f"host {exc}; start the container runtime there or fix "
                                 "hosts[].container.runtime_args") from exc
        for server, pgid in labelled:
            if needle in f"{MARKER}={server}" and pgid.isdigit() and int(pgid) > 1:
                found.add(int(pgid))
        return found

    def containers(self, needle: str) -> list[str]:
        """Names of the containers (running or not) whose server label matches ``needle``
        (``SWEEPER_SERVER=<marker>:``, as marked_groups)."""
        result = self._runtime(["ps", "-a", "--filter", f"label={LABEL_SERVER}",
                                "--format", "{{.Names}}"], 60)
        names = result.stdout.split()
        if not names:
            return []
        labels = self._runtime(["inspect", "-f", f'{{{{index .Config.Labels "{LABEL_SERVER}"}}}}',
                                *names], 60).stdout.splitlines()
        return [n for n, server in zip(names, labels, strict=False)
                if needle in f"{MARKER}={server}"]

    def _ids(self, label: str) -> list[str]:
        return self._runtime(["ps", "-a", "-q", "--filter", f"label={label}"], 60).stdout.split()

    def _labelled(self) -> list[tuple[str, str]]:
        """(server label, pgid label) of every sweeper server container on the host."""
        ids = self._ids(LABEL_SERVER)
        if not ids:
            return []
        fmt = (f'{{{{index .Config.Labels "{LABEL_SERVER}"}}}}\t'
               f'{{{{index .Config.Labels "{LABEL_PGID}"}}}}')
        out = self._runtime(["inspect", "-f", fmt, *ids], 60).stdout
        return [tuple(line.split("\t", 1)) for line in out.splitlines()  # type: ignore[misc]
                if "\t" in line]

    def _runtime(self, args: list[str], timeout: float) -> CommandResult:
        """A runtime command that must work (WrappedHost.checked)."""
        return self.checked([*self.runtime, *args], timeout, len(self.runtime) + 2)

    # --- the preflight --------------------------------------------------------------------
    def check_image(self) -> None:
        """PreflightError unless the runtime answers and the image is on the node."""
        argv = [*self.runtime, "image", "inspect", "--format", "{{.Id}}", self.spec.image]
        result, text = self.preflight_run(
            argv, silent="is the container runtime's daemon up?",
            missing=f"{self.spec.runtime} is not installed there; install it or set "
                    "hosts[].container.runtime")
        last = text[-1][:300] if text else ""
        if result.exit_code != 0 and _NOT_FOUND.search(last) and not _NO_DAEMON.search(last):
            raise PreflightError(
                f"host {self.name}: image {self.spec.image} is not on the node ({last}); "
                f"pull it there first (`{self.spec.runtime} pull {self.spec.image}`): the "
                "sweeper never pulls an image inside a timeout")
        if result.exit_code != 0:
            raise PreflightError(f"host {self.name}: `{' '.join(argv)}` failed: {last}; start "
                                 "the container runtime or fix hosts[].container.runtime_args")

    def run_launcher(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """``argv`` in a throwaway container of the image (``run --rm``), no GPU needed.
        A container still running past the timeout is removed, not left behind."""
        self.check_image()
        name = f"sweeper-help-{uuid.uuid4().hex[:12]}"
        run = [*self.runtime, "run", "--rm", "--name", name, "--label", "sweeper.help=1",
               "--network", "host", "--pull", "never", *self.spec.run_args, self.spec.image,
               *argv]
        try:
            return self.inner.run(run, timeout=timeout)
        except CommandTimeout:
            with contextlib.suppress(InfrastructureError):
                self.inner.run([*self.runtime, "rm", "-f", name], timeout=60)
            raise

def wrap_host(host: Host, container: ContainerSpec | None = None,
              slurm: SlurmSpec | None = None) -> Host:
    """``host`` itself, or the host that starts its servers in a container (ContainerHost)
    or as Slurm job steps (remote/slurm.py) when the study's host entry says so."""
    if container is not None:
        return ContainerHost(host, container)
    if slurm is not None:
        from sweeper.remote.slurm import SlurmHost

        return SlurmHost(host, slurm)
    return host
