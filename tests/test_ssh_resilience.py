"""The connection under stress: detached jobs outlive it, cuts heal, a dead server is reported."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sweeper.errors import ConnectionLost
from tests.sshd import Sshd
from tests.test_ssh_contract import pgid_members, wait_for
from tests.timeouts import scaled


def _session_port(host) -> str:  # noqa: ANN001
    """The client-side port of the current SSH connection, as the server sees it."""
    return host.run(["bash", "-c", "echo ${SSH_CONNECTION}"]).stdout.split()[1]


def test_detached_start_survives_disconnect(sshd: Sshd, tmp_path: Path) -> None:
    host = sshd.ssh_host()
    pgid = host.start_detached(
        ["sleep", "60"],
        env={},
        cwd=str(tmp_path),
        log_path=str(tmp_path / "log"),
        exit_path=str(tmp_path / "exit"),
    )
    try:
        host.close()  # a clean disconnect
        with sshd.ssh_host() as again:
            assert again.group_alive(pgid)
            assert sshd.kill_sessions() >= 1  # an abrupt cut
            again.check_alive()  # reconnects
            assert again.group_alive(pgid)
            again.stop_group(pgid, grace=2)
            assert not again.group_alive(pgid)
    finally:
        if pgid_members(pgid):
            sshd.ssh_host().stop_group(pgid, grace=0)


def test_cut_connection_is_re_established(sshd: Sshd) -> None:
    with sshd.ssh_host() as host:
        first = _session_port(host)
        assert sshd.kill_sessions() >= 1
        host.check_alive()  # a real round trip; re-connects within the retry budget
        assert host.run(["echo", "back"]).stdout == "back\n"
        assert _session_port(host) != first  # really a new connection


def test_next_command_after_a_cut_reconnects(sshd: Sshd) -> None:
    with sshd.ssh_host() as host:
        host.connect()
        transport = host.session.transport()
        sshd.kill_sessions()
        assert wait_for(lambda: not transport.is_active(), timeout=5)
        # The drop was noticed before the command: re-running is safe, so it just works.
        assert host.run(["echo", "ok"]).stdout == "ok\n"


def test_sshd_restart_then_reconnect(sshd_factory) -> None:  # noqa: ANN001
    server: Sshd = sshd_factory()
    with server.ssh_host() as host:
        first = _session_port(host)
        server.stop()
        server.start()  # same port, same keys
        host.check_alive()
        assert _session_port(host) != first


def test_connection_lost_when_server_stays_gone(sshd_factory) -> None:  # noqa: ANN001
    server: Sshd = sshd_factory()
    with server.ssh_host(retry_budget=1.5) as host:
        host.check_alive()
        server.stop()
        start = time.monotonic()
        with pytest.raises(ConnectionLost) as info:
            host.check_alive()
        assert info.value.kind == "ssh_lost"
        assert time.monotonic() - start < 1.5 + scaled(3.5)  # bounded by the retry budget
        with pytest.raises(ConnectionLost):
            host.run(["true"])


def test_sftp_put_and_get(sshd: Sshd, tmp_path: Path) -> None:
    src = tmp_path / "src.yaml"
    src.write_bytes(b"tp-size: 8\n" * 1000)
    remote_dir = tmp_path / "remote dir"
    with sshd.ssh_host() as host:
        host.makedirs(str(remote_dir))
        host.put_file(src, str(remote_dir / "launch.yaml"))
        assert (remote_dir / "launch.yaml").read_bytes() == src.read_bytes()
        host.get_file(str(remote_dir / "launch.yaml"), tmp_path / "back.yaml")
        assert (tmp_path / "back.yaml").read_bytes() == src.read_bytes()
        # SFTP survives a cut too: the next call re-opens connection and SFTP session.
        sshd.kill_sessions()
        host.check_alive()
        assert host.file_size(str(remote_dir / "launch.yaml")) == src.stat().st_size
        with pytest.raises(FileNotFoundError):
            host.get_file(str(remote_dir / "missing"), tmp_path / "x")


def test_forward_to_a_port_nobody_listens_on_keeps_the_connection(sshd: Sshd) -> None:
    """While a server starts, the tunnel's health polls are refused by the host ("Secsh
    channel open FAILED: Connection refused"). That refusal is about the port, not the
    connection: a command running on the same connection at that moment must finish (it
    was cut when a refusal dropped the connection, and the trial failed as ssh_lost)."""
    import threading

    import httpx

    from sweeper.remote import free_port

    host = sshd.ssh_host()
    host.check_alive()
    outcome: list[object] = []

    def long_command() -> None:
        try:
            outcome.append(host.run(["sleep", "1.5"], timeout=30).exit_code)
        except Exception as exc:  # noqa: BLE001 - the assertion below shows it
            outcome.append(exc)

    worker = threading.Thread(target=long_command, daemon=True)
    worker.start()
    with host.forward(free_port()) as url:
        for _ in range(5):
            with pytest.raises(httpx.HTTPError):
                httpx.get(f"{url}/health", timeout=5)
    worker.join(timeout=30)
    assert outcome == [0], outcome
    host.close()
