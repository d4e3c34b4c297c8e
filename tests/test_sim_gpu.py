"""GPU identity of a simulated host: ``python -m sweeper.sim.nvidia_smi`` and /get_server_info."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sweeper.sim.profiles import PROFILE_DIR


def smi(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sweeper.sim.nvidia_smi", *args],
                          capture_output=True, text=True, timeout=30)


def test_query_gpu_name_prints_one_line_per_gpu() -> None:
    out = smi("--sim-profile", "demo", "--query-gpu=name", "--format=csv,noheader")
    assert out.returncode == 0
    assert out.stdout.splitlines() == ["NVIDIA L40S (simulated)"] * 4


def test_list_gpus_like_nvidia_smi_with_stable_uuids() -> None:
    out = smi("--sim-profile", "kimi-k2.5-8xh200", "-L")
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) == 8
    assert lines[0].startswith("GPU 0: NVIDIA H200 (simulated) (UUID: GPU-")
    assert len({line.split("UUID: ")[1] for line in lines}) == 8
    assert smi("--sim-profile", "kimi-k2.5-8xh200", "-L").stdout == out.stdout


def test_csv_header_units_and_errors(tmp_path: Path) -> None:
    out = smi("--sim-profile", "demo", "--query-gpu=index,name,memory.total", "--format=csv")
    lines = out.stdout.splitlines()
    assert lines[0] == "index, name, memory.total [MiB]"
    assert lines[1].startswith("0, NVIDIA L40S (simulated), ") and lines[1].endswith(" MiB")
    bad = smi("--query-gpu=temperature.gpu")
    assert bad.returncode == 2 and 'Field "temperature.gpu" is not a valid field' in bad.stderr
    # a profile whose GPU name forgot to say so is still labelled simulated
    plain = tmp_path / "plain.yaml"
    plain.write_text((PROFILE_DIR / "demo.yaml").read_text().replace(
        "gpu_name: NVIDIA L40S (simulated)", "gpu_name: NVIDIA A100-SXM4-80GB"))
    named = smi("--sim-profile", str(plain), "--query-gpu=name", "--format=csv,noheader")
    assert named.stdout.splitlines()[0] == "NVIDIA A100-SXM4-80GB (simulated)"
