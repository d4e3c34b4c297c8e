"""SSH to GPU nodes with paramiko, the way OpenSSH would do it: ~/.ssh/config and
ProxyJump resolved (config.py), host keys checked with a refusing policy (hostkeys.py,
trust.py for ``sweeper trust-host``), one reused connection with bounded reconnects
(connect.py, session.py), transport faults mapped to sweeper's errors in one place
(faults.py), and the Host contract on top (host.py, shell.py, procnet.py, tunnel.py).
"""

from sweeper.remote.ssh.config import Hop, load_ssh_config, resolve_chain, resolve_hop
from sweeper.remote.ssh.host import SSHHost
from sweeper.remote.ssh.hostkeys import fingerprint_sha256
from sweeper.remote.ssh.trust import fetch_host_key, trust_host
from sweeper.remote.target import SSHTarget, parse_target

__all__ = ["Hop", "SSHHost", "SSHTarget", "fetch_host_key", "fingerprint_sha256",
           "load_ssh_config", "parse_target", "resolve_chain", "resolve_hop", "trust_host"]
