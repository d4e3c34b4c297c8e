"""The GPU host and the server on it: where commands run (Host: LocalHost, SSHHost), the
SSH target grammar, the SGLang server's lifecycle, and the preflight before the first
restart. Importing this package does not import paramiko (SSHHost loads on first use)."""

from sweeper.remote.host import CommandResult, Host, connect_address, free_port
from sweeper.remote.local import LocalHost

__all__ = ["CommandResult", "Host", "LocalHost", "connect_address", "free_port"]
