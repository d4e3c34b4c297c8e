"""A real Docker daemon of the tests' own, and an image built without a registry.

``dockerd`` (session fixture) starts Debian's ``docker.io`` daemon with all its state in a
temporary folder (``--data-root``, ``--exec-root``, ``--pidfile``, a unix socket there),
no iptables rules and no bridge (``--network host`` is all the tests use), in its own
process group; it is stopped by its pid at the end of the session, also when tests fail,
after every container it ran has been removed. Nothing under /etc or /var is touched.

The image (``sweeper-sim:test``) is a ``docker import`` of a root file system of a few
empty directories (10 KiB); the host's /usr, Python and this checkout (with its .venv) are
bind-mounted read-only at the same paths (``Dockerd.mounts``), so the simulated server
runs in the container as ``<this python> -m sweeper.sim ...``.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.timeouts import scaled

DOCKERD = "/usr/sbin/dockerd"
IMAGE = "sweeper-sim:test"
ROOT = Path(__file__).resolve().parent.parent


def docker_client() -> str | None:
    """The docker CLI on PATH (Debian's /usr/bin/docker, or a newer one)."""
    return shutil.which("docker")


@dataclass
class Dockerd:
    dir: Path
    proc: subprocess.Popen[bytes]

    @property
    def sock(self) -> Path:
        return self.dir / "docker.sock"

    @property
    def runtime_args(self) -> list[str]:
        """What a study's ``container.runtime_args`` says to reach this daemon."""
        return ["-H", f"unix://{self.sock}"]

    @property
    def mounts(self) -> list[str]:
        """``-v`` options that make this machine's Python and this checkout run inside."""
        paths = {"/usr", sys.base_prefix, sys.prefix, str(ROOT)}
        keep = sorted(p for p in paths
                      if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in paths))
        return [w for p in keep for w in ("-v", f"{p}:{p}:ro")]

    def docker(self, *args: str, timeout: float = 60, check: bool = True
               ) -> subprocess.CompletedProcess[str]:
        client = docker_client()
        assert client is not None
        out = subprocess.run([client, *self.runtime_args, *args], capture_output=True,
                             text=True, timeout=scaled(timeout), stdin=subprocess.DEVNULL)
        if check and out.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)}: {out.stderr.strip()}")
        return out

    def containers(self, label: str = "sweeper.server", running_only: bool = False
                   ) -> list[str]:
        """Names of the containers carrying ``label`` (``key`` or ``key=value``)."""
        args = ["ps", "--filter", f"label={label}", "--format", "{{.Names}}"]
        return self.docker(*(args if running_only else [args[0], "-a", *args[1:]])
                           ).stdout.split()

    def remove_all(self) -> None:
        ids = self.docker("ps", "-aq", check=False).stdout.split()
        if ids:
            self.docker("rm", "-f", *ids, check=False)


def _rootfs_tar() -> bytes:
    """A root file system of empty mount points and the usual /usr symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, mode in (("usr", 0o755), ("tmp", 0o1777), ("proc", 0o555), ("sys", 0o555),
                           ("dev", 0o755), ("etc", 0o755), ("root", 0o700), ("run", 0o755)):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        for link in ("bin", "lib", "lib64", "sbin"):
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, f"usr/{link}"
            tar.addfile(info)
    return buf.getvalue()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=scaled(20))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def start_dockerd(root: Path) -> Dockerd:
    if os.geteuid() != 0:
        pytest.skip("dockerd needs root (the tests' daemon runs with its own state folder)")
    if not os.path.exists(DOCKERD) or docker_client() is None:
        pytest.skip(f"{DOCKERD} or the docker CLI is missing (apt-get install -y docker.io)")
    log = open(root / "dockerd.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [DOCKERD, "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
         "--pidfile", str(root / "docker.pid"), "-H", f"unix://{root / 'docker.sock'}",
         "--iptables=false", "--ip6tables=false", "--bridge=none",
         "--containerd-namespace", f"sweeper-test-{os.getpid()}",
         "--containerd-plugins-namespace", f"sweeper-test-{os.getpid()}-plugins"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)  # its own group: stopped by pid, never by name
    log.close()
    daemon = Dockerd(root, proc)
    deadline = time.monotonic() + scaled(60)
    while daemon.docker("version", check=False).returncode != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            tail = (root / "dockerd.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"dockerd did not come up: {tail}")
        time.sleep(0.1)
    return daemon


@pytest.fixture(scope="session")
def dockerd() -> Iterator[Dockerd]:
    """A Docker daemon of the tests' own with ``sweeper-sim:test`` imported."""
    root = Path(tempfile.mkdtemp(prefix="sweeper-dockerd-"))
    daemon = start_dockerd(root)
    try:
        tar = root / "rootfs.tar"
        tar.write_bytes(_rootfs_tar())
        daemon.docker("import", str(tar), IMAGE)
        yield daemon
    finally:
        with contextlib.suppress(Exception):
            daemon.remove_all()
        _stop(daemon.proc)
        _unmount_under(root)
        shutil.rmtree(root, ignore_errors=True)


def _unmount_under(root: Path) -> None:
    """What dockerd leaves mounted in its exec root (the host netns at exec/netns/default),
    deepest first, so the folder can be removed."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


@pytest.fixture
def clean_containers(dockerd: Dockerd) -> Iterator[Dockerd]:
    """The daemon, with no container left behind by the test, whatever happens."""
    yield dockerd
    dockerd.remove_all()
