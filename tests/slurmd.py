"""A real single-node Slurm cluster of the tests' own (Debian's slurm-wlm).

``slurm`` (session fixture) writes a slurm.conf under a temporary folder (its state and
spool folders, pid and log files there; free ports; ``auth/none``, so no munge daemon;
``proctrack/pgid``, so no cgroup set-up), starts ``slurmctld -D`` and ``slurmd -D`` in their
own process groups, and waits until the node is idle. Clients find it through
``SLURM_CONF``. At the end: every job cancelled, then both daemons stopped by pid, also when
tests fail. Nothing under /etc is read or written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sweeper.remote import free_port
from tests.timeouts import scaled

SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
PARTITION = "sweep"


@dataclass
class Slurm:
    dir: Path
    procs: list[subprocess.Popen[bytes]]

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env,
                              timeout=scaled(30), stdin=subprocess.DEVNULL)

    def jobs(self) -> list[str]:
        """``id|name|state`` of every job the controller knows and has not purged."""
        out = self.run("squeue", "-h", "-o", "%i|%j|%T")
        assert out.returncode == 0, out.stderr
        return out.stdout.split()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=scaled(20))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _conf(root: Path, node: str) -> str:
    cpus = os.cpu_count() or 1
    return f"""\
ClusterName=sweepertest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
ReturnToService=2
KillWait=5
MinJobAge=2
SchedulerParameters=sched_interval=1,bf_interval=1
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


@pytest.fixture(scope="session")
def slurm() -> Iterator[Slurm]:
    if os.geteuid() != 0:
        pytest.skip("the test cluster's slurmd runs as root")
    if not (os.path.exists(SLURMCTLD) and os.path.exists(SLURMD) and shutil.which("srun")):
        pytest.skip("Slurm is missing (apt-get install -y slurm-wlm)")
    root = Path(tempfile.mkdtemp(prefix="sweeper-slurm-"))
    (root / "state").mkdir()
    (root / "spool").mkdir()
    node = socket.gethostname().split(".")[0]
    (root / "slurm.conf").write_text(_conf(root, node))
    cluster = Slurm(root, [])
    try:
        for daemon in (SLURMCTLD, SLURMD):
            with open(root / f"{Path(daemon).name}.out", "ab") as out:
                cluster.procs.append(subprocess.Popen(
                    [daemon, "-D", "-f", str(cluster.conf)], stdin=subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT, env=cluster.env,
                    start_new_session=True))  # own group: stopped by pid
        deadline = time.monotonic() + scaled(60)
        while True:
            out = cluster.run("sinfo", "-h", "-o", "%T")
            if out.returncode == 0 and out.stdout.strip() == "idle":
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in cluster.procs):
                logs = "".join((root / f).read_text(errors="replace")[-1500:]
                               for f in ("slurmctld.out", "slurmd.out") if (root / f).exists())
                raise RuntimeError(f"the test Slurm cluster did not come up: {logs}")
            time.sleep(0.2)
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.run("scancel", "--full", "--partition", PARTITION)
            deadline = time.monotonic() + scaled(30)
            while cluster.jobs() and time.monotonic() < deadline:
                time.sleep(0.2)
        for proc in reversed(cluster.procs):
            _stop(proc)
        shutil.rmtree(root, ignore_errors=True)
