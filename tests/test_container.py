"""SGLang in a container: the simulated server runs in a real Docker daemon's container
(tests/dockerd.py: the tests' own daemon, an image imported without a registry), started,
watched and stopped by the sweeper through the runtime, locally and over a real sshd."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from sweeper.errors import ConfigurationFailure, InfrastructureError
from sweeper.launch import LaunchConfig
from sweeper.remote import LocalHost, free_port
from sweeper.remote.container import ContainerHost
from sweeper.remote.server import ServerManager
from sweeper.study import parse_study
from sweeper.study.base import storage_key
from sweeper.study.container import ContainerSpec

from .conftest import (
    ROOT,
    SIM_LAUNCHER,
    demo_study_data,
    group_alive,
    run_cli,
    streaming_trial,
    wait_for,
)
from .dockerd import IMAGE, Dockerd, clean_containers, dockerd  # noqa: F401 - fixtures
from .test_sweep_ssh import opened, sweep
from .timeouts import duration, scaled

RING = {"speculative-num-steps": 2, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 3, "env.NCCL_ALGO": "Ring"}
# no CollNet on the simulated hardware: "NCCL error" in the server's log, exit 1
COLLNET = {**RING, "env.NCCL_ALGO": "CollNetDirect"}


def container_section(d: Dockerd, **extra: Any) -> dict[str, Any]:
    return {"image": IMAGE, "runtime_args": d.runtime_args, "run_args": d.mounts,
            "gpus": "none", **extra}


def container_study(tmp: Path, d: Dockerd, mark: str, **overrides: Any) -> dict[str, Any]:
    data = demo_study_data(tmp, **overrides)
    data["hosts"] = [{"ssh": "local", "python": sys.executable, "workdir": str(tmp / "host"),
                      "container": container_section(d)}]
    data["server"]["launcher"] = (SIM_LAUNCHER + " --sim-echo-env NCCL_ALGO"
                                  " --sim-echo-env SIM_MARK")
    data["server"]["env"] = {"SIM_MARK": mark}
    data["space"]["env.NCCL_ALGO"] = {"choices": ["unset", "Ring", "Tree", "CollNetDirect"]}
    return data


def write(tmp: Path, data: dict[str, Any]) -> Path:
    path = tmp / "t.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def load(db: Path) -> optuna.Study:
    return optuna.load_study(study_name="t", storage=f"sqlite:///{db}")


class CommandLines:
    """Every process command line on this machine (what `ps` shows), sampled until
    stopped: the ones that mention the runtime are kept as evidence of what was seen."""

    def __init__(self, needles: list[str]) -> None:
        self.needles = needles
        self.leaks: list[str] = []
        self.docker_runs: list[str] = []
        self.help_runs: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for f in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    line = f.read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if any(n in line for n in self.needles):
                    self.leaks.append(line)
                if " run -d --name sweeper-" in line:
                    self.docker_runs.append(line)
                if " run --rm --name sweeper-help-" in line and " --help" in line:
                    self.help_runs.append(line)
            self._stop.wait(0.05)


def test_sweep_in_a_container_env_inside_never_on_a_command_line(
        clean_containers: Dockerd, tmp_path: Path) -> None:  # noqa: F811
    d = clean_containers
    mark = f"mark-{uuid.uuid4().hex}"
    data = container_study(tmp_path, d, mark, start_from=[RING, COLLNET])
    path = write(tmp_path, data)
    with CommandLines([mark, "NCCL_ALGO=Ring", "NCCL_ALGO=CollNet"]) as ps:
        proc = run_cli("optimize", "--study", str(path), "--trials", "3", timeout=240)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # the environment reached the server inside, through no command line
    assert not ps.leaks, ps.leaks[:3]
    assert ps.docker_runs, "no `docker run` was seen: the sampler saw nothing"
    assert all("--env-file" in line for line in ps.docker_runs)
    # the preflight asked the image's launcher, not the host's
    assert any(f" {IMAGE} {sys.executable} -m sweeper.sim" in line for line in ps.help_runs)

    trials = {t.number: t for t in load(tmp_path / "t.db").get_trials()}
    ring = next(t for t in trials.values() if t.params.get("env.NCCL_ALGO") == "Ring")
    assert ring.state == TrialState.COMPLETE
    ring_log = Path(ring.user_attrs["server"]["log_path"]).read_text()
    assert "NCCL_ALGO=Ring" in ring_log and f"SIM_MARK={mark}" in ring_log
    assert "Decode batch" in ring_log  # the container's output streamed into the start's log
    # a server crash, classified from the container's log (exit code from the runtime)
    crash = next(t for t in trials.values() if t.params.get("env.NCCL_ALGO") == "CollNetDirect")
    assert crash.state == TrialState.PRUNED and crash.user_attrs["failure"] == "nccl"
    crash_log = Path(crash.user_attrs["server"]["log_path"]).read_text()
    assert "NCCL error" in crash_log
    assert Path(crash.user_attrs["server"]["exit_path"]).read_text().strip() == "1"
    # every container stopped and removed, no env file left beside the logs
    assert d.containers() == []
    assert not list((tmp_path / "host").rglob("*.env"))


def test_kill_9_then_resume_finds_the_container_by_label(
        clean_containers: Dockerd, tmp_path: Path) -> None:  # noqa: F811
    d = clean_containers
    data = container_study(tmp_path, d, "m", benchmark={"max_tokens": 800, "runs": 2,
                                                       "warmup": 0})
    path = write(tmp_path, data)
    db = tmp_path / "t.db"
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", "--study", str(path),
                             "--trials", "2"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        victim = wait_for(lambda: streaming_trial(db), 90, "a trial serving in a container")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # its labels name the study with its storage, the trial's start and the wrapper
    orphan = d.containers(running_only=True)
    assert len(orphan) == 1
    labels = yaml.safe_load(d.docker("inspect", "-f", "{{json .Config.Labels}}",
                                     orphan[0]).stdout)
    key = storage_key(data["storage"], "t")
    start = Path(victim.user_attrs["server"]["log_path"]).stem
    assert labels["sweeper.study"] == key and labels["sweeper.trial"] == start
    assert labels["sweeper.server"].startswith(f"{key}@local:")
    assert labels["sweeper.server"].endswith(f":{start}")
    assert labels["sweeper.pgid"] == str(victim.user_attrs["server"]["pgid"])
    # and its wrapper (`docker logs`/`docker wait`) too: only the label can find it now
    os.killpg(victim.user_attrs["server"]["pgid"], signal.SIGKILL)
    wait_for(lambda: not group_alive(victim.user_attrs["server"]["pgid"]), 10, "the wrapper gone")
    assert d.containers(running_only=True) == orphan, "a killed client leaves it serving"

    again = run_cli("optimize", "--study", str(path), "--trials", "2", timeout=240)
    assert again.returncode == 0, again.stderr + again.stdout
    assert "left running" in again.stdout
    assert orphan[0] not in d.containers(), "the stray container was removed"
    assert d.containers() == []
    trials = load(db).get_trials()
    assert trials[victim.number].user_attrs["failure"] == "interrupted"
    assert sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials) == 2


def test_a_container_the_oom_killer_ended_is_an_oom(
        clean_containers: Dockerd, tmp_path: Path) -> None:  # noqa: F811
    d = clean_containers
    # a server that wants 1 GiB in a container allowed 64 MiB: the kernel's OOM killer
    spec = ContainerSpec(**container_section(
        d, run_args=[*d.mounts, "--memory", "64m", "--memory-swap", "64m"]))
    host = ContainerHost(LocalHost(), spec)
    manager = ServerManager(host, str(tmp_path / "host"), sys.executable, marker="k@local:1")
    port = free_port()
    config = LaunchConfig("{python} -c 'x = bytearray(1 << 30)'", args={"port": port})
    handle = manager.start(config, "trial-0000")
    with pytest.raises(ConfigurationFailure) as err, host.forward(port) as url:
        manager.wait_healthy(handle, url, startup_timeout=scaled(60), hang_timeout=scaled(60))
    assert err.value.kind == "oom", err.value
    assert "OOMKilled=true" in str(err.value) and "exit code 137" in str(err.value)
    wait_for(lambda: d.containers() == [], 30, "the container removed after its exit")


def test_an_image_missing_on_the_node_is_one_line_and_nothing_starts(
        clean_containers: Dockerd, tmp_path: Path) -> None:  # noqa: F811
    d = clean_containers
    data = container_study(tmp_path, d, "m")
    data["hosts"][0]["container"]["image"] = "sweeper-absent:1"
    proc = run_cli("optimize", "--study", str(write(tmp_path, data)), "--trials", "1")
    assert proc.returncode == 2, proc.stderr + proc.stdout
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "image sweeper-absent:1 is not on the node" in err and "docker pull" in err
    assert d.docker("ps", "-aq").stdout.split() == []  # not even the --help container
    assert d.docker("images", "-q", "sweeper-absent").stdout.strip() == ""  # never pulled


def test_sweep_in_a_container_over_ssh(sshd, clean_containers: Dockerd,  # noqa: F811
                                       tmp_path: Path) -> None:
    d = clean_containers
    data = container_study(tmp_path, d, "ssh-mark", baseline=False, start_from=[RING, COLLNET])
    data["hosts"] = [{"ssh": "gpu-test", "python": sys.executable,
                      "workdir": str(tmp_path / "remote"), "container": container_section(d)}]
    data["server"]["startup_timeout"] = duration(60)
    spec = parse_study(data, tmp_path / "t.yaml")
    host = ContainerHost(sshd.ssh_host("gpu-test"), spec.hosts[0].container)
    summary = sweep(opened(spec, 2, host))
    assert summary.finished == 2
    trials = {t.params["env.NCCL_ALGO"]: t for t in load(tmp_path / "t.db").get_trials()}
    assert trials["Ring"].state == TrialState.COMPLETE
    assert "NCCL_ALGO=Ring" in Path(trials["Ring"].user_attrs["server"]["log_path"]).read_text()
    assert trials["CollNetDirect"].user_attrs["failure"] == "nccl"
    assert d.containers() == []


def test_a_container_that_never_started_is_not_the_configurations_fault(
        clean_containers: Dockerd, tmp_path: Path) -> None:  # noqa: F811
    d = clean_containers
    # the runtime refuses the run (here: a bad --memory; on a node: no GPU driver...)
    spec = ContainerSpec(**container_section(d, run_args=[*d.mounts, "--memory", "lots"]))
    host = ContainerHost(LocalHost(), spec)
    manager = ServerManager(host, str(tmp_path / "host"), sys.executable, marker="k@local:1")
    port = free_port()
    handle = manager.start(LaunchConfig(SIM_LAUNCHER, args={"port": port}), "trial-0000")
    with pytest.raises(InfrastructureError) as err, host.forward(port) as url:
        manager.wait_healthy(handle, url, startup_timeout=scaled(60), hang_timeout=scaled(60))
    assert not isinstance(err.value, ConfigurationFailure)
    assert "did not start" in str(err.value) and "memory" in str(err.value), err.value
