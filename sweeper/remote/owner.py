"""Whose server answers on a port: the one this sweeper started, or a stranger.

A 200 from ``/health`` says *a* server listens on the port, not that it is ours: another
process can take the port between the free-port check and our server's bind (ours then
exits with "address already in use" a moment later), and until then the stranger's
/health would pass for ours and the benchmark would measure it. SGLang's /health carries
nothing to tell servers apart, so the host is asked instead: does a process of the
server's process group hold a listening socket on that port? Linux answers without root
tools from ``/proc`` (a process's own sockets are readable by its user).

Only a listener we can see, outside the group, counts as a stranger; when the host cannot
tell, /health decides as before. A launcher whose server listens from outside its process
group (a container's port published by docker-proxy, seen by a root sweeper) is taken for
a stranger: the sweeper stops servers by process group, so it needs them in it anyway.
"""

from __future__ import annotations

from sweeper.errors import InfrastructureError
from sweeper.remote.host import Host

# Run on the host by the study's python. Prints "yes" (a process of the group listens),
# "no PID COMMAND" (another process we can see listens), or "unknown" (no /proc, or the
# socket is in no process this user can read: nothing to go on).
_PROBE = r"""
import os, sys
port, pgid = int(sys.argv[1]), int(sys.argv[2])
inodes = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        lines = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        f = line.split()
        if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
            inodes.add("socket:[%s]" % f[9])
other = None
for pid in os.listdir("/proc") if inodes else []:
    if not pid.isdigit():
        continue
    try:
        group = int(open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()[2])
        fds = os.listdir("/proc/%s/fd" % pid)
    except (OSError, ValueError, IndexError):
        continue
    for fd in fds:
        try:
            held = os.readlink("/proc/%s/fd/%s" % (pid, fd)) in inodes
        except OSError:
            continue
        if held and group == pgid:
            print("yes"); sys.exit(0)
        if held and other is None:
            try:
                cmd = open("/proc/%s/cmdline" % pid, "rb").read().replace(b"\0", b" ")
            except OSError:
                cmd = b""
            other = "%s %s" % (pid, cmd.decode(errors="replace").strip()[:80])
print("no " + other if other else "unknown")
"""


def stranger_on_port(host: Host, python: str, port: int, pgid: int) -> str | None:
    """``"PID COMMAND"`` of another process that listens on TCP ``port`` on ``host`` while
    no process of group ``pgid`` does; None when the group holds it or the host cannot
    tell (no /proc, a socket in no process this user can read, the probe failed): then
    /health is all there is to go on."""
    try:
        result = host.run([python, "-c", _PROBE, str(port), str(pgid)], timeout=30)
    except InfrastructureError:
        return None
    answer = result.stdout.strip()
    if result.exit_code != 0 or not answer.startswith("no "):
        return None
    return answer.removeprefix("no ")
