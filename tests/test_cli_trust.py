"""`sweeper trust-host`: show the fingerprint, record the key, and only then connect."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sweeper.remote import LocalHost

from .conftest import run_cli


def test_trust_host_records_the_key_it_showed(sshd, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    known = home / ".ssh" / "known_hosts"
    (home / ".ssh" / "config").write_text(
        f"Host node\n    HostName 127.0.0.1\n    Port {sshd.port}\n    User root\n"
        f"    IdentityFile {sshd.client_key}\n    UserKnownHostsFile {known}\n")
    env = {"HOME": str(home)}
    # unknown key: refused, with the way out in the message
    before = run_cli("trust-host", "node", env=env, timeout=60)
    assert before.returncode == 1 and "Trust this key?" in before.stdout
    assert not known.exists() or "ssh-ed25519" not in known.read_text()
    proc = run_cli("trust-host", "node", "--yes", env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    expected = subprocess.run(["ssh-keygen", "-lf", str(sshd.host_key_pub)], capture_output=True,
                              text=True, check=True).stdout.split()[1]
    assert expected in proc.stdout  # the fingerprint the user approved ...
    assert "ssh-ed25519" in known.read_text()  # ... is the key recorded
    assert LocalHost().run(["ssh-keygen", "-F", f"[127.0.0.1]:{sshd.port}", "-f",
                            str(known)]).exit_code == 0
