"""Which results may be compared: a host's group.

tok/s measured on an H200 node says nothing about an A100 node, so every trial carries the
group of the host that measured it and the verdict is decided within a group. A study may
name a host's group (``hosts[i].group``); by default it is the GPU type the host reports:
``nvidia-smi --query-gpu=name --format=csv,noheader``. A host without nvidia-smi that runs
the simulated server asks the simulator's stand-in for it, run as a command on the host
like the launcher itself (the sweeper imports nothing of the simulator).
"""

from __future__ import annotations

from sweeper.errors import CommandTimeout
from sweeper.remote.host import Host

QUERY = ["--query-gpu=name", "--format=csv,noheader"]
UNKNOWN = "unknown-gpu"  # no nvidia-smi and not simulated: one group for all such hosts
SIM_MODULE = "sweeper.sim"


def group_from_names(output: str) -> str | None:
    """One group name from nvidia-smi's per-GPU lines: the type (``NVIDIA H200``), or the
    sorted distinct types joined by ``+`` for a mixed node. None when no line names a GPU."""
    names = sorted({line.strip() for line in output.splitlines() if line.strip()})
    return "+".join(names) if names else None


def sim_query_argv(launcher_argv: list[str]) -> list[str] | None:
    """The simulated nvidia-smi for a launcher ``PY -m sweeper.sim [--sim-profile P] ...``:
    the same python and profile. None when the launcher is not the simulator."""
    if "-m" not in launcher_argv:
        return None
    i = launcher_argv.index("-m")
    if i + 1 >= len(launcher_argv) or launcher_argv[i + 1] != SIM_MODULE:
        return None
    argv = [*launcher_argv[:i], "-m", f"{SIM_MODULE}.nvidia_smi"]
    rest = launcher_argv[i + 2:]
    for j, word in enumerate(rest):
        if word == "--sim-profile" and j + 1 < len(rest):
            argv += ["--sim-profile", rest[j + 1]]
        elif word.startswith("--sim-profile="):
            argv.append(word)
    return [*argv, *QUERY]


def detect_group(host: Host, launcher_argv: list[str], timeout: float = 60.0) -> str:
    """The GPU type ``host`` reports (see the module's docstring). Never raises for a host
    without GPUs: such hosts share the group ``unknown-gpu``. Transport faults propagate
    (InfrastructureError): the caller retires an unreachable host."""
    for argv in (["nvidia-smi", *QUERY], sim_query_argv(launcher_argv)):
        if argv is None:
            continue
        try:
            result = host.run(argv, timeout=timeout)
        except CommandTimeout:
            continue
        if result.exit_code == 0:
            found = group_from_names(result.stdout)
            if found:
                return found
    return UNKNOWN
