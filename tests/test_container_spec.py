"""A host's container: and slurm: sections: what a study may say, and the one line it gets
when it says something else (exit 2, nothing written or started)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sweeper.errors import InputError
from sweeper.remote import LocalHost
from sweeper.remote.container import ContainerHost, container_name, wrap_host
from sweeper.remote.slurm import SlurmHost
from sweeper.study import parse_study
from sweeper.study.container import ContainerSpec

from .conftest import demo_study_data, run_cli
from .test_cli_errors import assert_one_line_error


def study(tmp: Path, entry: dict[str, Any], **server: Any) -> dict[str, Any]:
    data = demo_study_data(tmp)
    data["hosts"] = [{"ssh": "local", **entry}]
    data["server"].update(server)
    return data


def error_of(tmp: Path, data: dict[str, Any]) -> str:
    with pytest.raises(InputError) as err:
        parse_study(data, tmp / "t.yaml")
    return str(err.value)


@pytest.mark.parametrize(("container", "key", "needle"), [
    ({"image": "img", "run_args": ["-e", "NCCL_ALGO=Ring"]}, "run_args", "server.env"),
    ({"image": "img", "run_args": ["--env=X=1"]}, "run_args", "server.env"),
    ({"image": "img", "run_args": ["--network=bridge"]}, "run_args", "--network host"),
    ({"image": "img", "run_args": ["--name", "x"]}, "run_args", "names each container"),
    ({"image": "img", "run_args": ["--pull=always"]}, "run_args", "never pulls"),
    ({"image": "-v /:/host"}, "image", "not an image reference"),
    ({"image": "img; rm -rf ~"}, "image", "not an image reference"),
    ({"image": "img", "gpus": "all --privileged"}, "gpus", "not a --gpus value"),
    ({"image": "img", "runtime": "nerdctl"}, "runtime", "docker"),
    ({"run_args": []}, "image", "missing"),
    ({"image": "img", "gpu": "all"}, "gpu", "gpus"),
])
def test_bad_container_section_is_one_line_naming_the_key(
        tmp_path: Path, container: dict[str, Any], key: str, needle: str) -> None:
    msg = error_of(tmp_path, study(tmp_path, {"container": container}))
    assert f"hosts[0].container.{key}" in msg and needle in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize(("slurm", "key", "needle"), [
    ({"partition": "gpu", "job": 12}, "slurm", "not both"),
    ({"srun_args": ["--job-name=x"]}, "slurm.srun_args", "sets it"),
    ({"srun_args": ["--export", "NONE"]}, "slurm.srun_args", "sets it"),
    ({"queue_timeout": "soon"}, "slurm.queue_timeout", "soon"),
])
def test_bad_slurm_section_is_one_line_naming_the_key(
        tmp_path: Path, slurm: dict[str, Any], key: str, needle: str) -> None:
    msg = error_of(tmp_path, study(tmp_path, {"slurm": slurm}, host="0.0.0.0"))
    assert f"hosts[0].{key}" in msg and needle in msg, msg


def test_slurm_needs_a_server_the_login_node_reaches(tmp_path: Path) -> None:
    msg = error_of(tmp_path, study(tmp_path, {"slurm": {"partition": "gpu"}}))
    assert "server.host" in msg and "0.0.0.0" in msg


def test_container_and_slurm_together_are_refused(tmp_path: Path) -> None:
    msg = error_of(tmp_path, study(tmp_path, {"slurm": {}, "container": {"image": "img"}},
                                   host="0.0.0.0"))
    assert "not both" in msg


def test_a_container_host_uses_the_images_python_by_default(tmp_path: Path) -> None:
    spec = parse_study(study(tmp_path, {"container": {"image": "lmsysorg/sglang:v0.5.6"}}),
                       tmp_path / "t.yaml")
    assert spec.hosts[0].python == "python3"  # not this machine's interpreter
    local = parse_study(study(tmp_path, {}), tmp_path / "t.yaml")
    assert local.hosts[0].python == sys.executable


def test_gpu_flags() -> None:
    assert ContainerSpec(image="i").gpu_args() == ["--gpus", "all"]
    assert ContainerSpec(image="i", gpus="none").gpu_args() == []
    assert ContainerSpec(image="i", gpus="device=0,1").gpu_args() == ["--gpus", "device=0,1"]
    assert ContainerSpec(image="i", devices=["nvidia.com/gpu=all"]).gpu_args() == [
        "--device", "nvidia.com/gpu=all"]


def test_container_names_are_valid_and_one_per_start() -> None:
    a = container_name("t-0123456789@gpu-node-1:30000:trial-0003-a1")
    b = container_name("t-0123456789@gpu-node-2:30000:trial-0003-a1")
    assert a.startswith("sweeper-trial-0003-a1-") and a != b
    assert all(c.isalnum() or c in "_.-" for c in a)


def test_the_study_chooses_the_launch() -> None:
    from sweeper.study.slurm import SlurmSpec

    host = LocalHost()
    assert wrap_host(host) is host
    assert isinstance(wrap_host(host, ContainerSpec(image="i")), ContainerHost)
    assert isinstance(wrap_host(host, slurm=SlurmSpec(partition="p")), SlurmHost)


def test_optimize_refuses_env_in_run_args_before_anything_starts(tmp_path: Path) -> None:
    data = study(tmp_path, {"container": {"image": "img", "run_args": ["-e", "HF_TOKEN=x"]}})
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli("optimize", "--study", str(path), "--trials", "1")
    assert_one_line_error(proc, str(path), "hosts[0].container.run_args")
    assert not (tmp_path / "t.db").exists()


def test_a_runtime_that_does_not_answer_is_one_line_before_anything_starts(
        tmp_path: Path) -> None:
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI (apt-get install -y docker.io)")
    absent = tmp_path / "no-daemon.sock"
    data = study(tmp_path, {"container": {"image": "img", "gpus": "none",
                                          "runtime_args": ["-H", f"unix://{absent}"]},
                            "workdir": str(tmp_path / "host")})
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli("optimize", "--study", str(path), "--trials", "1")
    assert_one_line_error(proc, "host local", str(absent), "start the container runtime")
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "host").exists()
