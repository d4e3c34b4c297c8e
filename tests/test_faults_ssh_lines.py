"""Library log lines reach the user as the sweeper's own: one line per SSH retry naming the
host and the cause (not tenacity's "Retrying ...connect_chain in 0.25 seconds" nor
paramiko's "Secsh channel N open FAILED"). A real sshd on loopback, stopped mid-session."""

from __future__ import annotations

import logging

import pytest

from sweeper.errors import ConnectionLost


def test_one_sweeper_line_per_retry_and_no_raw_library_lines(sshd_factory,
                                                             caplog: pytest.LogCaptureFixture
                                                             ) -> None:
    server = sshd_factory()
    host = server.ssh_host(retry_budget=2.0)
    host.run(["true"])  # connected once: a drop now gets retries, each said
    server.stop()
    host.session.drop()
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConnectionLost):
        host.session.transport()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings, "each retry is said"
    for r in warnings:
        text = r.getMessage()
        assert r.name == "sweeper.remote.ssh", (r.name, text)
        assert text.startswith(f"ssh {host.name}: connection failed") and "\n" not in text
        assert "Retrying" not in text and "connect_chain" not in text
    assert not [r for r in caplog.records if r.name.startswith("paramiko")
                and r.levelno >= logging.WARNING]
