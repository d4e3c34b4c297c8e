"""What the container and Slurm hosts share (remote/wrapped.py), run through both: stopping
a server (its container or step ended first, then the wrapper's process group), a command
of the runtime or Slurm that fails, a preflight whose commands are not installed.

The runtime and Slurm are stand-ins here: one shell script on PATH, called as ``docker``,
``squeue`` and ``scancel``, which lists the server's container or step from a file until it
is removed or cancelled (tests/test_container.py and tests/test_slurm.py run the real ones
when a Docker daemon and Slurm are installed). The wrapper's process group is real: a
detached process on this machine, carrying the study's marker, stopped by LocalHost."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from sweeper.errors import InfrastructureError, PreflightError
from sweeper.remote import LocalHost
from sweeper.remote.container import ContainerHost
from sweeper.remote.host import Host
from sweeper.remote.slurm import SlurmHost
from sweeper.remote.workdir import MARKER
from sweeper.study.container import ContainerSpec
from sweeper.study.slurm import SlurmSpec

from .conftest import group_alive

FAKE = r"""#!/bin/sh
# a stand-in for docker / squeue / scancel: the server's unit lives in $FAKE_DIR/units
me=$(basename "$0")
echo "$me $*" >> "$FAKE_DIR/calls"
if [ -n "$FAKE_FAIL" ]; then printf 'first line\n%s\n' "$FAKE_FAIL" >&2; exit 3; fi
case "$me $1" in
  "docker ps"|"squeue "*) cat "$FAKE_DIR/units" 2>/dev/null ;;
  "docker rm"|"scancel "*) rm -f "$FAKE_DIR/units" ;;
esac
exit 0
"""
MARKED = "demo-1a2b@local:30000:trial-0001-a1"


def _container(inner: Host) -> Host:
    return ContainerHost(inner, ContainerSpec(image="img"))


def _slurm(inner: Host) -> Host:
    return SlurmHost(inner, SlurmSpec(partition="p"))


# (the host, its server's unit as the stand-in lists it, the calls that end it)
Kind = tuple[Callable[[Host], Host], Callable[[int], str], Callable[[int], list[str]]]
KINDS: dict[str, Kind] = {
    "container": (_container, lambda pgid: "c1",
                  lambda pgid: ["docker stop -t 2 c1", "docker rm -f c1"]),
    "slurm": (_slurm, lambda pgid: f"7|sweeper:{pgid}:{MARKED}|node-1|RUNNING",
              lambda pgid: ["scancel 7"]),
}


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("docker", "squeue", "scancel"):
        script = bin_dir / name
        script.write_text(FAKE)
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    monkeypatch.delenv("FAKE_FAIL", raising=False)
    return tmp_path


def _calls(tmp: Path) -> list[str]:
    path = tmp / "calls"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("kind", KINDS)
def test_stopping_a_server_ends_its_unit_then_its_wrapper(fake: Path, kind: str) -> None:
    make, unit, ending = KINDS[kind]
    local = LocalHost()  # the one that started the wrapper reaps it
    # the wrapper (docker run / srun) as the sweeper leaves it: a detached group, marked
    pgid = local.start_detached(["sleep", "300"], env={MARKER: MARKED}, cwd=str(fake),
                                log_path=str(fake / "w.log"), exit_path=str(fake / "w.exit"))
    try:
        assert group_alive(pgid)
        (fake / "units").write_text(unit(pgid) + "\n")
        make(local).stop_group(pgid, grace=2)
        assert not (fake / "units").exists(), "the container / step was ended"
        assert all(c in _calls(fake) for c in ending(pgid)), _calls(fake)
        assert not group_alive(pgid), "the wrapper's process group was stopped too"
    finally:
        if group_alive(pgid):
            os.killpg(pgid, 9)


@pytest.mark.parametrize(("kind", "words"), [("container", "docker ps -a"),
                                             ("slurm", "squeue -h")])
def test_a_failing_command_names_its_words_and_its_last_line(
        fake: Path, monkeypatch: pytest.MonkeyPatch, kind: str, words: str) -> None:
    monkeypatch.setenv("FAKE_FAIL", "cannot reach the daemon")
    host = KINDS[kind][0](LocalHost())
    with pytest.raises(InfrastructureError) as err:
        if isinstance(host, ContainerHost):
            host.containers(f"{MARKER}=demo")
        else:
            host.marked_groups(f"{MARKER}=demo")
    assert str(err.value) == (f"local: `{words} ...` failed (exit 3): "
                              "cannot reach the daemon")


@pytest.mark.parametrize(("kind", "says"), [
    ("container", "host local: docker is not installed there; install it or set "
                  "hosts[].container.runtime"),
    ("slurm", "host local: Slurm's commands (squeue, sinfo, srun) are not installed there; "
              "use the cluster's login node"),
])
def test_a_preflight_without_the_commands_says_so(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch, kind: str,
                                                  says: str) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither docker nor sinfo there
    host = KINDS[kind][0](LocalHost())
    with pytest.raises(PreflightError) as err:
        if isinstance(host, ContainerHost):
            host.check_image()
        elif isinstance(host, SlurmHost):
            host.check_place()
    assert str(err.value) == says
