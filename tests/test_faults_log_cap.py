"""A chatty server's log is capped per start, on the host and in the stored artifact: its
beginning and its end are kept with one line saying how much was cut (issue 25). Real
parts: the CLI, the simulator printing megabytes of filler (``--sim-chatty``), SQLite; the
same wrapper over a real sshd on loopback."""

from __future__ import annotations

import re
import shlex
import stat
import sys
from pathlib import Path

from sweeper.launch import LaunchConfig
from sweeper.remote.server import ServerManager

from .conftest import SIM_LAUNCHER, kill_group, run_cli, wait_for

KEEP_MB = 0.05  # 50 kB of each end
CHATTY_MB = 6
CUT = re.compile(r"^\[sweeper: ([0-9.]+) MB cut here\]$", re.M)


def _check_capped(text: str, keep: int, *, host_side: bool) -> float:
    """One cut line, the server's first line before it, its last lines after it; the
    size within the cap. Returns the MB the line says were cut."""
    cuts = CUT.findall(text)
    assert len(cuts) == 1, f"{len(cuts)} cut lines"
    head, tail = CUT.split(text, maxsplit=1)[0], text[CUT.search(text).end():]
    assert "SIMULATED SGLang server" in head, "the start of the log was kept"
    assert len(head) <= keep + 200
    # the host keeps at most twice the tail before it rewrites; the artifact exactly it
    assert len(tail) <= (2 * keep if host_side else keep) + 1
    assert len(text) < 4 * keep, "far less than the server printed"
    return float(cuts[0])


def test_chatty_server_log_capped_on_the_host_and_in_the_artifact(make_study,
                                                                  tmp_path: Path) -> None:
    study_file = make_study(server={
        "launcher": SIM_LAUNCHER + f" --sim-chatty {CHATTY_MB}", "log_keep_mb": KEEP_MB})
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "2")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    keep = int(KEEP_MB * 1_000_000)
    logs = sorted((tmp_path / "host").rglob("*.log"))
    assert logs, "the starts' logs are on the host"
    for log in logs:
        text = log.read_text()
        cut = _check_capped(text, keep, host_side=True)
        assert cut > CHATTY_MB * 0.8, f"{log.name}: {cut} MB said cut"
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        # the end of the log is the server's last words, after the filler
        assert "[SIM chatty]" not in text.splitlines()[-1]
    artifacts = [p for p in (tmp_path / "t.artifacts").rglob("*")
                 if p.is_file() and b"SIMULATED SGLang server" in p.read_bytes()]
    assert artifacts, "the trials' logs were stored"
    for art in artifacts:
        cut = _check_capped(art.read_text(), keep, host_side=False)
        assert cut > CHATTY_MB * 0.9


def test_cap_over_ssh_keeps_head_tail_and_the_exit_code(sshd, tmp_path: Path) -> None:
    host = sshd.ssh_host("gpu-test")
    keep = 20_000
    manager = ServerManager(host, str(tmp_path / "host"), sys.executable, log_keep=keep)
    script = ("import sys\nprint('FIRST LINE')\n"
              "for i in range(60000): print(f'filler {i:06d} ' + '.' * 30)\n"
              "print('LAST LINE'); sys.exit(7)")
    handle = manager.start(LaunchConfig(launcher="{python} -c " + shlex.quote(script)), "t-0001")
    try:
        wait_for(lambda: host.exit_code(handle.exit_path) is not None, 60, "the exit code")
        wait_for(lambda: not host.group_alive(handle.pgid), 30, "the capper's end")
        assert host.exit_code(handle.exit_path) == 7, "the server's exit code, not the pipe's"
        text = Path(handle.log_path).read_text()
        assert text.startswith("FIRST LINE\n") and text.endswith("LAST LINE\n")
        assert len(CUT.findall(text)) == 1 and len(text) < 4 * keep
        assert stat.S_IMODE(Path(handle.log_path).stat().st_mode) == 0o600
    finally:
        kill_group(handle.pgid)
        host.close()
