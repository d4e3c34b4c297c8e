"""A process group whose members have all exited is stopped, even while they wait as
zombies for PID 1 to reap them (some inits take seconds: every server stop of a sweep
waited for that). Real processes; no mock."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sweeper.remote import LocalHost

from .conftest import group_alive, wait_for


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rsplit(")", 1)[1].split()[0]  # after the command's closing parenthesis


def test_a_group_of_zombies_is_not_alive_but_a_live_member_is() -> None:
    # bash exits at once and stays a zombie (this test, its parent, does not reap it yet);
    # its background `sleep` is a live member until it ends
    proc = subprocess.Popen(["bash", "-c", "sleep 1 & exit 0"], start_new_session=True)
    pgid = proc.pid
    host = LocalHost()  # not its parent: LocalHost reaps only the children it started
    try:
        wait_for(lambda: _state(pgid) == "Z", 10, "bash to exit")
        assert host.group_alive(pgid), "its sleep still runs"
        wait_for(lambda: not group_alive(pgid), 20, "the sleep to end")
        os.killpg(pgid, 0)  # the kernel still knows the group: the zombie leader
        assert not host.group_alive(pgid)
        host.stop_group(pgid, grace=5)  # returns at once: nothing left to stop
    finally:
        proc.wait()
