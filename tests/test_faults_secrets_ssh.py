"""Over SSH the server's environment never appears on a command line: it travels through
a 0600 file the wrapper reads and removes. Every process's command line on the node (the
loopback sshd's node is this machine) is read while a trial runs, and holds no secret
value; the server still has it in its environment; its log is the owner's only."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from .conftest import streaming_trial, wait_for
from .test_sweep_ssh import opened, ssh_study, sweep

TOKEN = "hf_tok_" + "Zq9" * 8  # a made-up token: what must never be on a command line


def _cmdlines() -> list[bytes]:
    found = []
    for f in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found.append(f.read_bytes())
        except OSError:
            continue  # gone meanwhile
    return found


def _group_environ(pgid: int) -> bytes:
    """The environments of the group's processes (the server is the wrapper's child)."""
    found = b""
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                found += (stat_file.parent / "environ").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
    return found


def test_ssh_server_env_never_on_a_command_line(sshd, tmp_path: Path) -> None:
    spec = ssh_study(tmp_path, server={"env": {"HF_TOKEN": TOKEN, "NCCL_DEBUG": "WARN"}},
                     benchmark={"max_tokens": 400, "runs": 2, "warmup": 1})
    host = sshd.ssh_host("gpu-test")
    pool = opened(spec, 1, host)
    seen: dict[str, object] = {}

    def watcher() -> None:
        t = wait_for(lambda: streaming_trial(tmp_path / "t.db"), 60, "a streaming trial")
        seen["lines"] = [c for c in _cmdlines() if TOKEN.encode() in c]
        seen["environ"] = _group_environ(int(t.user_attrs["server"]["pgid"]))
        seen["log"] = t.user_attrs["server"]["log_path"]

    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    sweep(pool)
    thread.join(timeout=5)
    assert "lines" in seen, "the trial was never seen streaming"
    assert seen["lines"] == [], "a secret value on a process's command line"
    assert f"HF_TOKEN={TOKEN}".encode() in seen["environ"], "the server got its environment"
    log = Path(str(seen["log"]))
    assert stat.S_IMODE(log.stat().st_mode) == 0o600, oct(log.stat().st_mode)
    assert not list(log.parent.glob(".*.env")), "the env file was removed"
