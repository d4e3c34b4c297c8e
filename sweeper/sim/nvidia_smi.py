"""``python -m sweeper.sim.nvidia_smi``: what ``nvidia-smi`` would print for a profile's GPUs.

A test double beside the simulated server, so hosts can be grouped by GPU type without GPUs.
Names come from the profile's ``hardware.gpu_name`` and always say "simulated"; nothing here
queries a real device. Formats follow nvidia-smi's:

    python -m sweeper.sim.nvidia_smi --sim-profile demo -L
    GPU 0: NVIDIA L40S (simulated) (UUID: GPU-...)
    python -m sweeper.sim.nvidia_smi --sim-profile demo --query-gpu=name --format=csv,noheader
    NVIDIA L40S (simulated)
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable, Sequence

from sweeper.sim.profiles import Profile, ProfileError, load_profile

# field -> (csv header, value per GPU index)
FieldFn = Callable[[Profile, int, bool], str]


def gpu_name(profile: Profile) -> str:
    name = profile.hardware.gpu_name
    return name if "simulated" in name.lower() else f"{name} (simulated)"


def gpu_uuid(profile: Profile, index: int) -> str:
    digest = hashlib.sha256(f"{profile.name}:{index}".encode()).hexdigest()
    return (f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-"
            f"{digest[20:32]}")


def _memory(profile: Profile, units: bool) -> str:
    mib = int(profile.hardware.gpu_memory_gb * 1024**3 / 2**20 * 0.97)  # less the reserved
    return f"{mib} MiB" if units else str(mib)


FIELDS: dict[str, tuple[str, FieldFn]] = {
    "index": ("index", lambda p, i, u: str(i)),
    "name": ("name", lambda p, i, u: gpu_name(p)),
    "uuid": ("uuid", lambda p, i, u: gpu_uuid(p, i)),
    "memory.total": ("memory.total [MiB]", lambda p, i, u: _memory(p, u)),
    "count": ("count", lambda p, i, u: str(p.hardware.num_gpus)),
    "driver_version": ("driver_version", lambda p, i, u: "0.0.0-simulated"),
}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sweeper.sim.nvidia_smi",
        description="SIMULATED nvidia-smi (sweeper.sim test double): the GPUs of a sim profile.")
    ap.add_argument("--sim-profile", default="demo",
                    help="built-in profile name or a profile YAML path")
    ap.add_argument("-L", "--list-gpus", action="store_true")
    ap.add_argument("--query-gpu", default=None, help="comma-separated fields, e.g. name")
    ap.add_argument("--format", default="csv", help="csv[,noheader][,nounits]")
    ns = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        profile = load_profile(ns.sim_profile)
    except ProfileError as exc:
        print(f"python -m sweeper.sim.nvidia_smi: error: {exc}", file=sys.stderr)
        return 2
    gpus = range(profile.hardware.num_gpus)
    if ns.query_gpu:
        fields = [f.strip() for f in ns.query_gpu.split(",") if f.strip()]
        for f in fields:
            if f not in FIELDS:
                print(f'Field "{f}" is not a valid field to query.', file=sys.stderr)
                return 2
        opts = {o.strip() for o in ns.format.split(",")}
        if "csv" not in opts:
            print(f'"{ns.format}" is not a valid format.', file=sys.stderr)
            return 2
        units = "nounits" not in opts
        if "noheader" not in opts:
            print(", ".join(FIELDS[f][0] if units else FIELDS[f][0].split(" [")[0]
                            for f in fields))
        for i in gpus:
            print(", ".join(FIELDS[f][1](profile, i, units) for f in fields))
        return 0
    if ns.list_gpus:
        for i in gpus:
            print(f"GPU {i}: {gpu_name(profile)} (UUID: {gpu_uuid(profile, i)})")
        return 0
    # no query: a short summary instead of nvidia-smi's full table
    print(f"SIMULATED nvidia-smi (sweeper.sim test double, profile {profile.name}): "
          "no real GPU was queried")
    for i in gpus:
        print(f"GPU {i}: {gpu_name(profile)}, {_memory(profile, True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
