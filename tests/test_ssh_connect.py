"""Connecting: targets, ~/.ssh/config, host keys, ProxyJump, auth and reachability errors."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from sweeper.errors import HostKeyUnknown, HostUnreachable, InputError
from sweeper.remote import free_port
from sweeper.remote.ssh import (
    SSHHost,
    SSHTarget,
    fetch_host_key,
    load_ssh_config,
    parse_target,
    resolve_chain,
    trust_host,
)
from tests.sshd import JumpSetup, Sshd
from tests.timeouts import scaled


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("gpu-node-1", SSHTarget("gpu-node-1")),
        ("root@gpu-1", SSHTarget("gpu-1", "root")),
        ("ubuntu@10.0.0.5:2222", SSHTarget("10.0.0.5", "ubuntu", 2222)),
        ("node:22", SSHTarget("node", None, 22)),
        ("me@[::1]:2200", SSHTarget("::1", "me", 2200)),
        ("::1", SSHTarget("::1")),
        ("ssh://u@h:7", SSHTarget("h", "u", 7)),
    ],
)
def test_parse_target(spec: str, expected: SSHTarget) -> None:
    assert parse_target(spec) == expected
    assert parse_target(str(expected)) == expected  # str() round-trips


@pytest.mark.parametrize("spec", ["", "a b", "@host", "u@host:0", "u@host:http", "u@[::1", "u@"])
def test_parse_target_rejects(spec: str) -> None:
    with pytest.raises(InputError):
        parse_target(spec)


def test_config_resolution_and_jump_chain(tmp_path: Path) -> None:
    key = tmp_path / "k"
    key.write_text("not used")
    config = tmp_path / "config"
    config.write_text(f"""\
Host gpu
    HostName 10.1.2.3
    User ubuntu
    Port 2222
    IdentityFile {key}
    IdentityFile {tmp_path}/missing
    UserKnownHostsFile {tmp_path}/kh
    ProxyJump bastion,me@inner:2022
Host bastion
    HostName b.example.org
    ProxyJump gateway
Host inner
    ProxyJump ignored-for-later-jumps
""")
    chain = resolve_chain("gpu", load_ssh_config(config))
    assert [(h.name, h.hostname, h.port) for h in chain] == [
        ("gateway", "gateway", 22),
        ("bastion", "b.example.org", 22),
        ("me@inner:2022", "inner", 2022),
        ("gpu", "10.1.2.3", 2222),
    ]
    target = chain[-1]
    assert (target.user, target.identity_files, target.known_hosts_files) == (
        "ubuntu",
        (str(key),),
        (f"{tmp_path}/kh",),
    )
    assert target.known_hosts_name == "[10.1.2.3]:2222"
    # What the user wrote wins over the config.
    assert resolve_chain("root@gpu:22", load_ssh_config(config))[-1].port == 22


def test_alias_from_ssh_config(sshd: Sshd) -> None:
    with sshd.ssh_host("gpu-test") as host:
        result = host.run(["bash", "-c", 'echo "$USER ${SSH_CONNECTION##* }"'])
        assert result.stdout.split() == ["root", str(sshd.port)]


def test_explicit_user_host_port(sshd: Sshd, tmp_path: Path) -> None:
    # user@host:port with the key coming from a `Host 127.0.0.1` block, known_hosts given.
    config = tmp_path / "config"
    config.write_text(f"Host 127.0.0.1\n    IdentityFile {sshd.client_key}\n")
    with SSHHost(
        sshd.spec,
        ssh_config_path=str(config),
        known_hosts_path=str(sshd.known_hosts),
        connect_timeout=5,
        retry_budget=2,
    ) as host:
        assert host.run(["echo", "ok"]).stdout == "ok\n"


def _fingerprint(pub: Path) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True
    )
    return out.stdout.split()[1]


def test_fetch_host_key(sshd: Sshd) -> None:
    key_type, fingerprint, key = fetch_host_key("gpu-test", ssh_config_path=str(sshd.ssh_config))
    assert key_type == "ssh-ed25519"
    assert fingerprint == _fingerprint(sshd.host_key_pub)
    assert key.get_base64() == sshd.host_key_pub.read_text().split()[1]


@pytest.mark.parametrize("hashed", [False, True])
def test_unknown_host_key_refused_then_trusted(sshd: Sshd, tmp_path: Path, hashed: bool) -> None:
    config = tmp_path / "config"  # no UserKnownHostsFile: the key is unknown
    config.write_text(
        f"Host fresh\n    HostName 127.0.0.1\n    Port {sshd.port}\n"
        f"    User root\n    IdentityFile {sshd.client_key}\n"
    )
    known = tmp_path / "known_hosts"
    host = SSHHost(
        "fresh",
        ssh_config_path=str(config),
        known_hosts_path=str(known),
        connect_timeout=5,
        retry_budget=scaled(5),  # above the bound below, however loaded
    )
    start = time.monotonic()
    with pytest.raises(HostKeyUnknown) as info:
        host.run(["true"])
    assert time.monotonic() - start < scaled(3)  # refused at once, not retried
    message = str(info.value)
    assert "sweeper trust-host fresh" in message
    assert _fingerprint(sshd.host_key_pub) in message

    report = trust_host("fresh", str(known), hashed=hashed, ssh_config_path=str(config))
    assert _fingerprint(sshd.host_key_pub) in report
    line = known.read_text()
    assert (
        line.startswith("|1|")
        if hashed
        else line.startswith(f"[127.0.0.1]:{sshd.port} ssh-ed25519 ")
    )
    # OpenSSH itself accepts the file we wrote.
    out = subprocess.run(
        ["ssh-keygen", "-F", f"[127.0.0.1]:{sshd.port}", "-f", str(known)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0
    _, _, key = fetch_host_key("fresh", ssh_config_path=str(config))
    assert "already trusted" in trust_host(
        "fresh", str(known), ssh_config_path=str(config), key=key
    )
    assert known.read_text() == line
    try:
        assert host.run(["echo", "trusted"]).stdout == "trusted\n"
    finally:
        host.close()


def test_changed_host_key_refused(sshd: Sshd, tmp_path: Path) -> None:
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    known.write_text(
        f"[127.0.0.1]:{sshd.port} {' '.join(other.with_suffix('.pub').read_text().split()[:2])}\n"
    )
    config = tmp_path / "config"
    config.write_text(sshd.config_block().replace(str(sshd.known_hosts), str(known)))
    with (
        pytest.raises(HostKeyUnknown, match="CHANGED"),
        SSHHost("gpu-test", ssh_config_path=str(config), retry_budget=5) as host,
    ):
        host.check_alive()


def test_wrong_key_is_an_input_error_not_retried(sshd: Sshd, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    config = tmp_path / "config"
    config.write_text(sshd.config_block().replace(str(sshd.client_key), str(stranger)))
    start = time.monotonic()
    with (
        pytest.raises(InputError, match="authentication"),
        SSHHost("gpu-test", ssh_config_path=str(config), retry_budget=scaled(10)) as host,
    ):
        host.check_alive()
    assert time.monotonic() - start < scaled(5)  # half the retry budget: not retried


def test_unreachable_host_within_budget() -> None:
    port = free_port()  # nothing listens there
    start = time.monotonic()
    with (
        pytest.raises(HostUnreachable) as info,
        SSHHost(f"root@127.0.0.1:{port}", connect_timeout=1, retry_budget=1) as host,
    ):
        host.check_alive()
    assert info.value.kind == "host_unreachable"
    assert time.monotonic() - start < 1 + scaled(3)  # the budget, plus slack for a loaded machine


def _direct_tcpip_requests(jump: Sshd) -> int:
    return jump.log.read_text(errors="replace").count("server_request_direct_tcpip")


def test_proxy_jump(sshd_jump: JumpSetup) -> None:
    before = _direct_tcpip_requests(sshd_jump.jump)
    with SSHHost(
        "gpu-behind", ssh_config_path=str(sshd_jump.ssh_config), connect_timeout=5
    ) as host:
        result = host.run(["bash", "-c", "echo ${SSH_CONNECTION##* }"])
        assert result.stdout.strip() == str(sshd_jump.target.port)
        assert [h.name for h in host.hops] == ["jump-test", "gpu-behind"]
    assert _direct_tcpip_requests(sshd_jump.jump) == before + 1  # it went through the jump


def test_proxy_jump_chain(sshd_jump: JumpSetup) -> None:
    # Two jumps (the same server twice): jump -> jump -> target, each via direct-tcpip.
    config = sshd_jump.ssh_config.with_name("chain_config")
    config.write_text(
        sshd_jump.ssh_config.read_text().replace(
            "ProxyJump jump-test", "ProxyJump jump-test,jump-test"
        )
    )
    before = _direct_tcpip_requests(sshd_jump.jump)
    with SSHHost("gpu-behind", ssh_config_path=str(config), connect_timeout=5) as host:
        assert host.run(["echo", "deep"]).stdout == "deep\n"
        assert len(host.hops) == 3
    assert _direct_tcpip_requests(sshd_jump.jump) == before + 2


def test_proxy_jump_trust_host(sshd_jump: JumpSetup, tmp_path: Path) -> None:
    # The jump is trusted, the target behind it is not yet: trust_host goes through the jump.
    known = tmp_path / "known_hosts"
    known.write_text(sshd_jump.jump.host_key_line())
    config = tmp_path / "config"
    config.write_text(
        sshd_jump.ssh_config.read_text().replace(str(sshd_jump.known_hosts), str(known))
    )
    with (
        pytest.raises(HostKeyUnknown, match="trust-host gpu-behind"),
        SSHHost("gpu-behind", ssh_config_path=str(config)) as host,
    ):
        host.check_alive()
    assert _fingerprint(sshd_jump.target.host_key_pub) in trust_host(
        "gpu-behind", ssh_config_path=str(config)
    )
    with SSHHost("gpu-behind", ssh_config_path=str(config)) as host:
        host.check_alive()
