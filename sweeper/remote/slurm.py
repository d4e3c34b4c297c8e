"""SlurmHost: a host whose SGLang servers run as Slurm job steps on a compute node, for a
study host with a ``slurm:`` section (study/slurm.py). The wrapped host (LocalHost or
SSHHost) is the login node, where srun, squeue and scancel run.

It keeps the Host contract, so the server lifecycle, the stray scan and the reconciliation
of a killed sweep work unchanged:

* ``start_detached`` starts ``srun`` on the login node as the detached process (its output
  is the step's, into the start's log; its exit code the server's). The step's name is
  ``sweeper:<pgid of that srun>:<the study's marker>``: a step is found by name (``squeue``)
  and tied to the process group that stands for it. The environment reaches the step
  through srun's own (``--export=ALL``), on no command line. It returns once Slurm runs the
  step, within ``queue_timeout``: the wait in the queue is not charged to the server's
  ``startup_timeout`` (server.py starts that clock when this returns).
* It resolves the node the step runs on (``squeue %N``, then its ``NodeAddr``): ``forward``
  reaches the server there (a tunnel from the login node when that is an SSH host).
* ``stop_group`` cancels the step with ``scancel`` and waits until Slurm has ended it;
  ``marked_groups`` finds the study's steps by name as well as their srun by marker.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence

from sweeper.errors import InfrastructureError, PreflightError
from sweeper.remote.host import WILDCARDS, CommandResult, Host
from sweeper.remote.workdir import MARKER
from sweeper.remote.wrapped import WrappedHost
from sweeper.study.slurm import SlurmSpec

PREFIX = "sweeper:"  # every step's (or job's) name: sweeper:<pgid>:<marker>
POLL_SECONDS = 0.5

# bash -c WRAPPER <marker> SRUN_OPTIONS... -- ARGV...: srun (exec: the same pid and group)
# named after its own process group, which it cannot know before it runs.
WRAPPER = ('pgid=$(awk \'{sub(/^.*\\) /, ""); print $3}\' "/proc/$$/stat"); '
           'exec srun --job-name "sweeper:$pgid:$0" "$@"')


class SlurmHost(WrappedHost):
    """``inner`` (the login node) whose detached servers run as Slurm steps per ``spec``."""

    def __init__(self, inner: Host, spec: SlurmSpec) -> None:
        super().__init__(inner)
        self.spec = spec
        self.node_addr: str | None = None  # where the current step runs

    # --- the server's step ---------------------------------------------------------------
    def _place(self) -> list[str]:
        if self.spec.job is not None:
            return ["--jobid", str(self.spec.job), "--overlap"]
        return ["--partition", self.spec.partition] if self.spec.partition else []

    def start_detached(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str,
                       log_path: str, exit_path: str, log_keep: int = 0) -> int:
        marker = env.get(MARKER, "")
        # the marker stays with srun (found on the login node); the step is found by name
        srun = [*self._place(), "--nodes=1", "--ntasks=1", "--export=ALL", "--unbuffered",
                *self.spec.srun_args, "--", "env", "-u", MARKER, *argv]
        pgid = self.inner.start_detached(["bash", "-c", WRAPPER, marker, *srun], env=env,
                                         cwd=cwd, log_path=log_path, exit_path=exit_path,
                                         log_keep=log_keep)
        try:
            self.node_addr = self._wait_running(pgid, exit_path)
        except BaseException:  # the queue timeout, Ctrl-C: no job left pending or running
            with contextlib.suppress(Exception):
                self.stop_group(pgid, grace=5)
            raise
        return pgid

    def _wait_running(self, pgid: int, exit_path: str) -> str | None:
        """The address of the node once the step runs; None when srun ended first (its
        log says why: server.py classifies it)."""
        deadline = time.monotonic() + self.spec.queue_timeout
        state = "not submitted yet"
        while True:
            if self.inner.exit_code(exit_path) is not None:
                return None
            unit = next((u for u in self._units() if u[1] == pgid), None)
            if unit is not None:
                state = unit[3]
                if state == "RUNNING" and unit[4] and unit[4] != "(null)":
                    return self._address(unit[4])
            if time.monotonic() > deadline:
                raise InfrastructureError(
                    f"{self.name}: Slurm did not start the server within hosts[].slurm."
                    f"queue_timeout ({self.spec.queue_timeout:.0f}s; last state: {state}); "
                    "the wait in the queue is not charged to server.startup_timeout")
            time.sleep(POLL_SECONDS)

    def _address(self, node: str) -> str:
        out = self._slurm(["scontrol", "show", "node", node.split(",")[0]], 60).stdout
        addr = next((w.split("=", 1)[1] for w in out.split() if w.startswith("NodeAddr=")), "")
        return addr or node

    def _units(self) -> list[tuple[str, int, str, str, str]]:
        """(id, pgid, marker, state, node) of every sweeper step (``job`` given) or job."""
        if self.spec.job is not None:
            argv = ["squeue", "-h", "-s", "-j", str(self.spec.job), "-o", "%i|%j|%N"]
        else:
            argv = ["squeue", "-h", "--me", "-o", "%i|%j|%N|%T"]
        out: list[tuple[str, int, str, str, str]] = []
        for line in self._slurm(argv, 60).stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) < 3 or not parts[1].startswith(PREFIX):
                continue
            pgid, _, marker = parts[1][len(PREFIX):].partition(":")
            if pgid.isdigit():
                state = parts[3] if len(parts) > 3 else "RUNNING"  # a listed step runs
                out.append((parts[0], int(pgid), marker, state, parts[2]))
        return out

    def _slurm(self, argv: list[str], timeout: float) -> CommandResult:
        """A Slurm command that must work (WrappedHost.checked)."""
        return self.checked(argv, timeout, 2)

    def stop_group(self, pgid: int, *, grace: float = 15.0) -> None:
        """``scancel`` the step (or job) named after ``pgid``, wait until Slurm has ended
        it (its KillWait included), then the srun on the login node."""
        ids = [u[0] for u in self._units() if u[1] == pgid]
        if ids:
            self._slurm(["scancel", *ids], 60)
        self.stop_wrapper(pgid, ids, lambda: any(u[1] == pgid for u in self._units()),
                          seconds=grace + 60, poll=POLL_SECONDS,
                          survived=f"Slurm step {', '.join(ids)} is still there after scancel",
                          grace=grace)

    def marked_groups(self, needle: str) -> set[int]:
        found = set(self.inner.marked_groups(needle))
        found |= {u[1] for u in self._units() if needle in f"{MARKER}={u[2]}" and u[1] > 1}
        return found

    # --- where things run ------------------------------------------------------------------
    def _on_node(self, argv: Sequence[str]) -> list[str]:
        """argv as a step of the allocation (``job``), next to the server."""
        return ["srun", "--jobid", str(self.spec.job), "--overlap", "--nodes=1", "--ntasks=1",
                "--", *argv]

    def run(self, argv: Sequence[str], *, timeout: float = 60.0,
            env: Mapping[str, str] | None = None) -> CommandResult:
        if argv and argv[0] == "nvidia-smi":
            # the GPUs are on the compute node: asked there in an allocation; with a
            # partition no node is chosen before a start (and a job would queue)
            if self.spec.job is None:
                return CommandResult(127, "", "nvidia-smi: not asked before a Slurm job runs")
            argv = self._on_node(argv)
        return self.inner.run(argv, timeout=timeout, env=env)

    def run_launcher(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """The preflight's ``--help``: in the allocation (``job``), else on the login node
        (SGLang's help needs no GPU, and a job for it could wait in the queue for hours)."""
        self.check_place()
        if self.spec.job is not None:
            argv = self._on_node(argv)
        return self.inner.run(argv, timeout=timeout)

    def check_place(self) -> None:
        """PreflightError unless Slurm answers and the partition or the allocation is there."""
        if self.spec.job is not None:
            argv = ["squeue", "-h", "-j", str(self.spec.job), "-o", "%T"]
            what = f"job {self.spec.job} is not running"
        else:
            argv = ["sinfo", "-h", "-o", "%P"] + (["-p", self.spec.partition]
                                                   if self.spec.partition else [])
            what = f"partition {self.spec.partition or '(default)'} does not exist"
        result, text = self.preflight_run(
            argv, silent="is slurmctld reachable?",
            missing="Slurm's commands (squeue, sinfo, srun) are not installed there; use "
                    "the cluster's login node")
        if result.exit_code != 0 or not result.stdout.strip() or \
                (self.spec.job is not None and result.stdout.strip() != "RUNNING"):
            detail = f" ({text[-1][:200]})" if text else ""
            raise PreflightError(f"host {self.name}: {what}{detail}; fix hosts[].slurm")

    def port_free(self, port: int, bind_host: str = "127.0.0.1") -> bool:
        if self.spec.job is None:
            # the next job may land on any node: a port taken there fails that start as
            # "address already in use" (PortBusy, retried), not the configuration
            return True
        from sweeper.remote.ssh.procnet import port_listened

        out = self.inner.run(self._on_node(["cat", "/proc/net/tcp", "/proc/net/tcp6"]),
                             timeout=60).stdout
        return not port_listened(out, port, bind_host)

    def forward(self, port: int,
                bind_host: str = "127.0.0.1") -> contextlib.AbstractContextManager[str]:
        target = self.node_addr if bind_host in WILDCARDS and self.node_addr else bind_host
        return self.inner.forward(port, target)
