"""The Host contract, run on LocalHost and on SSHHost (a real sshd on loopback).

The "remote" side is this machine, so a test may check a result directly on disk.
"""

from __future__ import annotations

import json
import socket
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from sweeper.errors import CommandTimeout
from sweeper.remote.host import Host, free_port
from tests.timeouts import scaled

PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
ECHO_ARGV = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('HOSTILE')]))"


def wait_for(condition, timeout: float = 10.0, interval: float = 0.05) -> bool:
    """Poll ``condition`` until true or the deadline passes."""
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


def hostile_values(marker: Path) -> list[str]:
    return [
        "/models/my model (v2)",
        'it\'s a "quoted" path',
        f"x; touch {marker}",
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"x && touch {marker} || touch {marker}",
        "line1\nline2",
        "*",
        "~",
        "$HOME",
        "-n",
    ]


def pgid_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a group, read from /proc directly."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # field 5 pgrp; field 3 state
            members.append(int(stat.parent.name))
    return members


def test_run_exit_code_and_streams(any_host: Host) -> None:
    result = any_host.run(["bash", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert any_host.run(["true"]).exit_code == 0


def test_run_large_output_is_drained(any_host: Host) -> None:
    # More than an SSH window (2 MiB) on both streams: a reader that waits for the exit
    # status before draining would deadlock here.
    script = "import sys; sys.stdout.write('o'*3000000); sys.stderr.write('e'*3000000)"
    result = any_host.run([PY, "-c", script], timeout=30)
    assert result.exit_code == 0
    assert len(result.stdout) == 3_000_000 and len(result.stderr) == 3_000_000


def test_run_timeout(any_host: Host) -> None:
    start = time.monotonic()
    with pytest.raises(CommandTimeout):
        any_host.run(["sleep", f"{scaled(6):g}"], timeout=0.5)
    assert time.monotonic() - start < 0.5 + scaled(2)  # cut at its timeout, not run to the end
    any_host.check_alive()  # the host is still usable afterwards


def test_run_timeout_kills_the_command_and_its_children(any_host: Host) -> None:
    """Past its timeout a command is killed on the host with its whole process group: a
    child it started does not run on either."""
    token = f"sleep 9{uuid.uuid4().int % 10**6}.5"  # a duration nothing else sleeps
    script = f"{token} & {token}; true"
    with pytest.raises(CommandTimeout):
        any_host.run(["sh", "-c", script], timeout=0.5)

    def leftovers() -> list[str]:
        ps = any_host.run(["ps", "-eo", "pid=,args="], timeout=20).stdout
        return [line for line in ps.splitlines() if token in line and "ps -eo" not in line]
    assert wait_for(lambda: not leftovers(), timeout=15), leftovers()


def test_hostile_values_reach_argv_verbatim(any_host: Host, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    values = hostile_values(marker)
    result = any_host.run([PY, "-c", ECHO_ARGV, *values], env={"HOSTILE": values[3] + values[2]})
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == [values, values[3] + values[2]]
    assert not marker.exists()


def test_hostile_values_in_detached_start(any_host: Host, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    values = hostile_values(marker)
    cwd = tmp_path / "work dir; $(touch pwned)"
    cwd.mkdir()
    log = cwd / "server log.txt"
    exit_path = cwd / "exit code"
    pgid = any_host.start_detached(
        [PY, "-c", ECHO_ARGV, *values],
        env={"HOSTILE": f"`touch {marker}`"},
        cwd=str(cwd),
        log_path=str(log),
        exit_path=str(exit_path),
    )
    assert wait_for(lambda: any_host.exit_code(str(exit_path)) is not None)
    assert any_host.exit_code(str(exit_path)) == 0
    assert json.loads(log.read_text()) == [values, f"`touch {marker}`"]
    assert not marker.exists() and not (cwd / "pwned").exists()
    any_host.stop_group(pgid, grace=2)


def test_env_is_for_that_process_only(any_host: Host) -> None:
    result = any_host.run(["bash", "-c", 'echo "${NCCL_ALGO-unset}"'], env={"NCCL_ALGO": "Ring"})
    assert result.stdout == "Ring\n"
    assert any_host.run(["bash", "-c", 'echo "${NCCL_ALGO-unset}"']).stdout == "unset\n"


def test_detached_exit_code_file(any_host: Host, tmp_path: Path) -> None:
    exit_path = str(tmp_path / "exit")
    pgid = any_host.start_detached(
        ["bash", "-c", "echo started; exit 7"],
        env={},
        cwd=str(tmp_path),
        log_path=str(tmp_path / "logs" / "a.log"),
        exit_path=exit_path,
    )
    assert wait_for(lambda: any_host.exit_code(exit_path) is not None)
    assert any_host.exit_code(exit_path) == 7
    assert wait_for(lambda: not any_host.group_alive(pgid))
    assert any_host.read_file(str(tmp_path / "logs" / "a.log")) == "started\n"


def test_stop_group_kills_children_too(any_host: Host, tmp_path: Path) -> None:
    # A parent that ignores TERM and two children: stop_group must escalate to KILL and
    # take the whole process group, not just the leader.
    script = "trap '' TERM; sleep 60 & sleep 60 & echo ready; wait"
    log = tmp_path / "log"
    pgid = any_host.start_detached(
        ["bash", "-c", script],
        env={},
        cwd=str(tmp_path),
        log_path=str(log),
        exit_path=str(tmp_path / "exit"),
    )
    try:
        assert wait_for(lambda: len(pgid_members(pgid)) >= 4)  # wrapper, bash, 2 x sleep
        assert any_host.group_alive(pgid)
        start = time.monotonic()
        any_host.stop_group(pgid, grace=0.5)
        assert time.monotonic() - start < 0.5 + scaled(4.5)
        assert not any_host.group_alive(pgid)
        assert pgid_members(pgid) == []
    finally:
        if pgid_members(pgid):
            any_host.stop_group(pgid, grace=0)


def test_read_file_tail_and_size(any_host: Host, tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"a" * 1000 + b"tail\xff")
    assert any_host.read_file(str(path), 5) == "tail\ufffd"
    assert any_host.file_size(str(path)) == 1005
    assert any_host.read_file(str(tmp_path / "missing")) is None
    assert any_host.file_size(str(tmp_path / "missing")) is None


def test_makedirs_expands_home(any_host: Host) -> None:
    name = f".cache/sweeper-test-{uuid.uuid4().hex[:8]}/a b"
    made = any_host.makedirs(f"~/{name}")
    try:
        assert made == str((Path.home() / name).resolve())
        assert Path(made).is_dir()
    finally:
        Path(made).rmdir()
        Path(made).parent.rmdir()


@pytest.mark.parametrize("bind_host", ["127.0.0.1", "0.0.0.0"])
def test_port_free(any_host: Host, bind_host: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert not any_host.port_free(port, bind_host)
    assert any_host.port_free(port, bind_host)


def test_forward_reaches_a_server_on_the_host(any_host: Host, tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hello through the tunnel")
    port = free_port()
    pgid = any_host.start_detached(
        [PY, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        env={},
        cwd=str(tmp_path),
        log_path=str(tmp_path / "http.log"),
        exit_path=str(tmp_path / "http.exit"),
    )
    try:
        assert wait_for(lambda: not any_host.port_free(port))
        with any_host.forward(port) as url:
            assert url.startswith("http://127.0.0.1:")
            with httpx.Client(timeout=10) as client:
                for _ in range(3):  # several connections through one tunnel
                    response = client.get(f"{url}/hello.txt")
                    assert response.text == "hello through the tunnel"
    finally:
        any_host.stop_group(pgid, grace=2)
    assert not any_host.group_alive(pgid)


def test_forward_closed_on_exit(sshd) -> None:  # noqa: ANN001 - fixture from tests.sshd
    host = sshd.ssh_host()
    try:
        with host.forward(sshd.port) as url:
            local_port = int(url.rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", local_port), timeout=5) as sock:
                sock.settimeout(5)
                # Through the tunnel we reach the sshd itself: its banner proves the path.
                assert sock.recv(4).startswith(b"SSH-")
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", local_port), timeout=2).close()
    finally:
        host.close()
