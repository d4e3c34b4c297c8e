"""Several GPU hosts, each a real OpenSSH server on loopback running the simulator on its
own port: both measure, and when one dies mid-trial it is retired after its retries, the
other goes on to the requested number of trials and runs the interrupted configuration."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from sweeper.remote import free_port
from sweeper.remote.ssh import SSHHost
from sweeper.results import attrs as A
from sweeper.results.hosts import host_states
from sweeper.run.common import SweepOptions
from sweeper.run.workers import HostPool
from sweeper.study import parse_study

from .conftest import demo_study_data, run_cli, streaming_trial, wait_for
from .test_hosts import assert_no_overlap


def test_a_host_that_dies_is_retired_and_the_other_finishes(sshd, sshd_factory,
                                                            tmp_path: Path) -> None:
    doomed = sshd_factory()
    config = tmp_path / "ssh_config"
    config.write_text(sshd.config_block("gpu-a") + doomed.config_block("gpu-b"))
    data = demo_study_data(tmp_path, sweep={"seed": 3, "n_startup_trials": 4,
                                            "max_retries": 1},
                           benchmark={"max_tokens": 300, "runs": 2, "warmup": 0})
    data["hosts"] = [{"ssh": alias, "python": sys.executable, "port": free_port(),
                      "workdir": str(tmp_path / alias)} for alias in ("gpu-a", "gpu-b")]
    a, b = (f"{h['ssh']}:{h['port']}" for h in data["hosts"])  # labels: alias:port
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))  # for `sweeper status` at the end
    spec = parse_study(data, path)
    hosts = [(SSHHost(alias, ssh_config_path=str(config), connect_timeout=3, retry_budget=2),
              sys.executable) for alias in ("gpu-a", "gpu-b")]
    pool = HostPool(spec, SweepOptions(trials=4), hosts=hosts)
    pool.open()
    assert {w.group for w in pool.workers} == {"NVIDIA L40S (simulated)"}

    def kill_b_mid_trial() -> None:
        t = wait_for(lambda: _streaming_on(tmp_path, b), 120, "gpu-b mid-benchmark")
        killed.append(t.number)
        doomed.stop()  # the node drops off the network: sshd and its sessions are gone

    killed: list[int] = []
    killer = threading.Thread(target=kill_b_mid_trial, daemon=True)
    killer.start()
    summary = pool.run()
    killer.join(5)
    assert killed, "gpu-b never ran a trial"

    study = optuna.load_study(study_name="t", storage=spec.storage)
    trials = study.trials
    done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            and not t.user_attrs.get(A.SKIPPED)]
    assert len(done) == 4 and summary.finished == 4
    cut = trials[killed[0]]
    assert cut.state == TrialState.FAIL and cut.user_attrs[A.FAILURE] != "interrupted"
    # its configuration was queued again, and a retry ended on the host that is left
    retries = [t for t in done if t.params == cut.params and t.number > cut.number]
    assert retries and all(t.user_attrs[A.HOST] == a for t in retries)
    states = {h.label: h for h in host_states(study)}
    assert states[b].state == "retired" and "infrastructure" in states[b].why
    assert states[a].state == "done"
    assert_no_overlap([t for t in trials if t.user_attrs.get(A.SERVER)])

    status = run_cli("status", "--study", str(path))
    assert status.returncode == 0, status.stderr
    assert f"{b} [NVIDIA L40S (simulated)]: retired" in status.stdout


def _streaming_on(tmp_path: Path, host: str) -> optuna.trial.FrozenTrial | None:
    """A RUNNING trial on ``host`` whose server has started decoding (mid-benchmark)."""
    t = streaming_trial(tmp_path / "t.db")
    while t is not None and t.user_attrs.get(A.HOST) != host:
        t = streaming_trial(tmp_path / "t.db", min_number=t.number + 1)
    return t
