"""SGLang behind Slurm: the simulated server runs as a job step of a real single-node Slurm
cluster (tests/slurmd.py), started, found, reached and cancelled by the sweeper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from sweeper.errors import InfrastructureError
from sweeper.launch import LaunchConfig
from sweeper.remote import LocalHost, free_port
from sweeper.remote.server import ServerManager
from sweeper.remote.slurm import SlurmHost
from sweeper.study import parse_study
from sweeper.study.slurm import SlurmSpec

from .conftest import (
    ROOT,
    SIM_LAUNCHER,
    demo_study_data,
    group_alive,
    run_cli,
    streaming_trial,
    wait_for,
)
from .slurmd import PARTITION, Slurm, slurm  # noqa: F401 - the fixture
from .test_sweep_ssh import opened, sweep
from .timeouts import scaled

RING = {"speculative-num-steps": 2, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 3, "env.NCCL_ALGO": "Ring"}


def sweeper_jobs(cluster: Slurm) -> list[str]:
    return [j for j in cluster.jobs() if j.split("|")[1].startswith("sweeper:")]


def slurm_study(tmp: Path, **overrides: Any) -> Path:
    data = demo_study_data(tmp, **overrides)
    data["hosts"] = [{"ssh": "local", "python": sys.executable, "workdir": str(tmp / "host"),
                      "slurm": {"partition": PARTITION, "queue_timeout": "120s"}}]
    data["server"]["host"] = "0.0.0.0"  # on the compute node, reached at its NodeAddr
    data["server"]["launcher"] = SIM_LAUNCHER + " --sim-echo-env NCCL_ALGO"
    path = tmp / "t.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_sweep_of_slurm_steps_kill_9_and_resume_leave_no_job(slurm: Slurm,  # noqa: F811
                                                             tmp_path: Path) -> None:
    path = slurm_study(tmp_path, start_from=[RING],
                       benchmark={"max_tokens": 800, "runs": 2, "warmup": 0})
    db = tmp_path / "t.db"
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", "--study", str(path),
                             "--trials", "2"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=slurm.env)
    try:
        victim = wait_for(lambda: streaming_trial(db), 120, "a trial serving as a Slurm step")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # and the srun on the "login node": only the job's name can find the server now
    pgid = victim.user_attrs["server"]["pgid"]
    os.killpg(pgid, signal.SIGKILL)
    wait_for(lambda: not group_alive(pgid), 10, "the killed srun gone")
    left = sweeper_jobs(slurm)  # a step outlives its srun (no InactiveLimit)
    assert len(left) == 1 and left[0].endswith("|RUNNING"), left

    again = run_cli("optimize", "--study", str(path), "--trials", "2", timeout=300,
                    env={"SLURM_CONF": str(slurm.conf)})
    assert again.returncode == 0, again.stderr + again.stdout
    assert "left running" in again.stdout
    assert sweeper_jobs(slurm) == [], "no job of the sweep is left in the queue"
    trials = optuna.load_study(study_name="t", storage=f"sqlite:///{db}").get_trials()
    assert trials[victim.number].user_attrs["failure"] == "interrupted"
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 2
    ring = next(t for t in done if t.params.get("env.NCCL_ALGO") == "Ring")
    # the study's environment reached the step (srun --export=ALL), the output its log
    log = Path(ring.user_attrs["server"]["log_path"]).read_text()
    assert "NCCL_ALGO=Ring" in log and "Decode batch" in log


def _manager(spec: SlurmSpec, tmp: Path) -> tuple[SlurmHost, ServerManager, LaunchConfig]:
    host = SlurmHost(LocalHost(), spec)
    manager = ServerManager(host, str(tmp / "host"), sys.executable, marker="k@local:1")
    port = free_port()
    config = LaunchConfig(SIM_LAUNCHER, args={"model-path": "sim/demo-model", "port": port,
                                              "host": "0.0.0.0"})
    return host, manager, config


def test_queue_time_is_not_startup_time(slurm: Slurm, tmp_path: Path,  # noqa: F811
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    startup = scaled(4)
    queued = int(startup) + 2  # longer in the queue than the whole start-up deadline
    spec = SlurmSpec(partition=PARTITION, srun_args=[f"--begin=now+{queued}"],
                     queue_timeout=scaled(120))
    host, manager, config = _manager(spec, tmp_path)
    asked = time.monotonic()
    handle = manager.start(config, "trial-0000")
    try:
        assert time.monotonic() - asked >= queued - 1, "start returned before the job ran"
        with host.forward(config.port, config.bind_host) as url:
            manager.wait_healthy(handle, url, startup_timeout=startup,
                                 hang_timeout=startup)
    finally:
        manager.stop(handle, grace=5)
    assert sweeper_jobs(slurm) == []


def test_queue_timeout_cancels_the_pending_job(slurm: Slurm, tmp_path: Path,  # noqa: F811
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    spec = SlurmSpec(partition=PARTITION, srun_args=["--begin=now+3600"], queue_timeout=2)
    _, manager, config = _manager(spec, tmp_path)
    with pytest.raises(InfrastructureError, match="queue_timeout"):
        manager.start(config, "trial-0000")
    assert sweeper_jobs(slurm) == [], "the pending job was cancelled"


def test_steps_in_a_held_allocation(slurm: Slurm, tmp_path: Path,  # noqa: F811
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    held = slurm.run("salloc", "--no-shell", "--job-name", "held-by-user", "-N1")
    assert held.returncode == 0, held.stderr
    job = int(held.stderr.split("Granted job allocation")[1].split()[0])
    try:
        host, manager, config = _manager(SlurmSpec(job=job), tmp_path)
        config = LaunchConfig(SIM_LAUNCHER + " --sim-echo-env NCCL_ALGO", args=config.args,
                              env={"NCCL_ALGO": "Tree"})
        handle = manager.start(config, "trial-0000")
        with host.forward(config.port, config.bind_host) as url:
            manager.wait_healthy(handle, url, startup_timeout=scaled(30),
                                 hang_timeout=scaled(30))
        steps = slurm.run("squeue", "-h", "-s", "-j", str(job), "-o", "%i|%j").stdout.split()
        mine = [s for s in steps if "|sweeper:" in s]
        assert len(mine) == 1 and mine[0].startswith(f"{job}."), steps  # a step of the job
        assert host.marked_groups("SWEEPER_SERVER=k@") == {handle.pgid}
        assert not host.port_free(config.port, config.bind_host)  # asked on the node
        manager.stop(handle, grace=5)
        assert "NCCL_ALGO=Tree" in Path(handle.log_path).read_text()
        left = slurm.run("squeue", "-h", "-s", "-j", str(job), "-o", "%j").stdout
        assert "sweeper:" not in left, "the step was cancelled"
        assert f"{job}|held-by-user|RUNNING" in slurm.jobs(), "the allocation is the user's"
    finally:
        slurm.run("scancel", str(job))


def test_a_login_node_over_ssh(slurm: Slurm, sshd_factory, tmp_path: Path) -> None:  # noqa: F811, ANN001
    # the login node: an sshd whose sessions know the cluster (SetEnv, as a site profile does)
    login = sshd_factory()
    login.stop()
    with open(login.dir / "sshd_config", "a") as conf:
        conf.write(f"SetEnv SLURM_CONF={slurm.conf}\n")
    login.start()
    data = demo_study_data(tmp_path, baseline=False, start_from=[RING])
    data["hosts"] = [{"ssh": "gpu-test", "python": sys.executable,
                      "workdir": str(tmp_path / "remote"),
                      "slurm": {"partition": PARTITION, "queue_timeout": "120s"}}]
    data["server"]["host"] = "0.0.0.0"
    data["server"]["launcher"] = SIM_LAUNCHER + " --sim-echo-env NCCL_ALGO"
    spec = parse_study(data, tmp_path / "t.yaml")
    host = SlurmHost(login.ssh_host("gpu-test"), spec.hosts[0].slurm)
    summary = sweep(opened(spec, 1, host))
    assert summary.finished == 1 and summary.complete == 1
    trial = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}"
                              ).get_trials()[0]
    assert trial.state == TrialState.COMPLETE
    assert "NCCL_ALGO=Ring" in Path(trial.user_attrs["server"]["log_path"]).read_text()
    assert sweeper_jobs(slurm) == []
