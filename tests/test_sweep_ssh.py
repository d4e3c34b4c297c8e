"""The real loop over SSH: a real OpenSSH server on loopback, the simulator started
detached through it, the benchmark through an SSH tunnel, a real SQLite file."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from sweeper.run.common import SweepOptions, SweepSummary
from sweeper.run.workers import HostPool
from sweeper.study import parse_study

from .conftest import demo_study_data, group_alive, recorded_pgids, streaming_trial, wait_for
from .test_optimize import failing_point
from .timeouts import duration, scaled

HANG = {"speculative-num-steps": 2, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 3, "attn-dp-size": 4,  # the draft on one GPU
        "env.NCCL_ALGO": "NVLSTree"}


def ssh_study(tmp_path: Path, **overrides):  # noqa: ANN003, ANN201
    data = demo_study_data(tmp_path, **overrides)
    data["hosts"] = [{"ssh": "gpu-test", "python": sys.executable,
                      "workdir": str(tmp_path / "remote")}]
    return parse_study(data, tmp_path / "t.yaml")


def opened(spec, trials: int, host) -> HostPool:  # noqa: ANN001
    """The loop ``optimize`` runs, on one host (a pool of one), opened."""
    pool = HostPool(spec, SweepOptions(trials=trials), hosts=[(host, sys.executable)])
    pool.open()
    return pool


def sweep(pool: HostPool) -> SweepSummary:
    try:
        return pool.run()
    finally:
        pool.done()


def load(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}")


def test_sweep_over_ssh_classifies_oom_and_hang(sshd, tmp_path: Path) -> None:
    oom = failing_point("oom", max_steps=4)
    space = {"speculative-num-steps": {"int": [1, 4]},
             "speculative-eagle-topk": {"choices": [1, 2, 4]},
             "speculative-num-draft-tokens": {"int": [2, 16]},
             "attn-dp-size": {"choices": [1, 4]},
             "env.NCCL_ALGO": {"choices": ["unset", "Ring", "NVLSTree"]}}
    oom = {**oom, "attn-dp-size": 1, "env.NCCL_ALGO": "unset"}
    spec = ssh_study(tmp_path, space=space, start_from=[oom, HANG],
                     server={"hang_timeout": duration(4)})
    host = sshd.ssh_host("gpu-test")
    summary = sweep(opened(spec, 4, host))
    assert summary.finished == 4
    study = load(tmp_path)
    by_number = {t.number: t for t in study.get_trials()}
    assert by_number[0].user_attrs["role"] == "baseline"
    assert by_number[0].state == TrialState.COMPLETE
    assert by_number[1].state == TrialState.PRUNED
    assert by_number[1].user_attrs["failure"] == "oom"
    assert by_number[2].state == TrialState.PRUNED
    assert by_number[2].user_attrs["failure"] == "hang"
    assert by_number[3].state in (TrialState.COMPLETE, TrialState.PRUNED)
    # the servers ran on the "remote" side, logged in the study's workdir there
    assert by_number[0].user_attrs["server"]["host"] == host.name
    assert by_number[0].user_attrs["server"]["log_path"].startswith(str(tmp_path / "remote"))
    assert not any(group_alive(p) for p in recorded_pgids(tmp_path / "t.db"))


def test_server_killed_mid_benchmark_is_a_crash_within_2s(sshd, tmp_path: Path) -> None:
    good = {"speculative-num-steps": 2, "speculative-eagle-topk": 1,
            "speculative-num-draft-tokens": 3}
    spec = ssh_study(tmp_path, baseline=False, start_from=[good],
                     benchmark={"max_tokens": 2000, "runs": 3, "warmup": 0})
    host = sshd.ssh_host("gpu-test")
    pool = opened(spec, 1, host)
    killed_at: list[float] = []

    def killer() -> None:
        t = wait_for(lambda: streaming_trial(tmp_path / "t.db"), 60, "a streaming trial")
        killed_at.append(time.time())
        os.killpg(t.user_attrs["server"]["pgid"], signal.SIGKILL)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    sweep(pool)
    thread.join(timeout=5)
    assert killed_at, "the server was never seen streaming"
    trial = load(tmp_path).get_trials()[0]
    assert trial.state == TrialState.PRUNED
    assert trial.user_attrs["failure"] == "crash"
    # 2 s on an idle machine; tests/timeouts.py stretches it when the cores are busy
    assert trial.datetime_complete.timestamp() - killed_at[0] < scaled(2.0)


def test_ssh_cut_mid_trial_retries_and_loses_nothing(sshd, tmp_path: Path) -> None:
    # max_attempts 1: the client does not ride the cut out by retrying a request (it would,
    # and the trial would simply complete), so the cut trial must end as a failure; the
    # test checks which kind and what follows
    spec = ssh_study(tmp_path, benchmark={"max_tokens": 600, "runs": 2, "warmup": 1,
                                          "max_attempts": 1})
    host = sshd.ssh_host("gpu-test")
    pool = opened(spec, 3, host)
    cut: list[int] = []

    def cutter() -> None:
        t = wait_for(lambda: streaming_trial(tmp_path / "t.db", min_number=1), 60,
                     "a streaming trial after the baseline")
        sshd.kill_sessions()
        cut.append(t.number)

    thread = threading.Thread(target=cutter, daemon=True)
    thread.start()
    summary = sweep(pool)
    thread.join(timeout=5)
    assert cut, "the connection was never cut mid-trial"
    assert summary.finished == 3
    study = load(tmp_path)
    # the trial that was cut: the infrastructure's fault, so FAIL (not PRUNED: the sampler
    # must not learn that its configuration is infeasible) and queued again, then measured
    trials = {t.number: t for t in study.get_trials()}
    victim = trials[cut[0]]
    assert victim.state == TrialState.FAIL, (victim.state, victim.user_attrs.get("failure"))
    assert victim.user_attrs["failure"] in ("ssh_lost", "bench_transport", "host_unreachable")
    retries = [t for t in trials.values() if t.user_attrs.get("retry_of") == victim.number]
    assert len(retries) == 1 and retries[0].params == victim.params
    assert retries[0].state == TrialState.COMPLETE
    for t in study.get_trials(states=(TrialState.FAIL,)):
        # an infrastructure fault: retried with the same parameters
        assert t.user_attrs["failure"] in ("ssh_lost", "bench_transport", "host_unreachable")
        assert any(r.user_attrs.get("retry_of") == t.number and r.params == t.params
                   for r in study.get_trials())
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))
    assert not any(group_alive(p) for p in recorded_pgids(tmp_path / "t.db"))
