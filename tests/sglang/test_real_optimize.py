"""``sweeper optimize`` of small studies against the REAL SGLang 0.5.23 (CPU, tiny Llama).

The EAGLE3 study: one sweep, killed with kill -9 while its baseline server is up, then
resumed by the same command: the orphaned real server is found and stopped, the baseline
measured again; EAGLE3 (this CPU cannot run it) is PRUNED as the configuration's fault
from SGLang's own refusal after one start. A second sweep of the same study, whose space
holds only that configuration, proposes it again: it is skipped with no server started.

The NGRAM study (NGRAM takes other flags than the draft-model algorithms, so sweeper
sweeps it in a study of its own): SGLang 0.5.23 accepts NGRAM on a CPU and serves
/health, and the server dies on the first request. That death is NOT SGLang refusing
NGRAM: its NGRAM path calls an ``sgl_kernel`` kernel, and here ``sgl_kernel`` is the
test-only stand-in (stand_in/), whose kernels raise (a CPU build of sgl-kernel would have
it). What it tests is sweeper's side: a real server that dies under the benchmark is the
configuration's fault after one start, not an infrastructure fault retried.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import optuna
import pytest
import yaml
from optuna.trial import TrialState

from sweeper.errors import CONFIG_FAILURE_KINDS
from sweeper.remote import free_port
from sweeper.results import attrs as A
from tests.conftest import ROOT, run_cli
from tests.sglang.real import (
    NOTES,
    START_DEADLINE,
    group_alive,
    kill_group,
    server_env,
    server_flags,
    sglang_python,
    wait_until,
)
from tests.timeouts import duration, scaled

pytestmark = pytest.mark.sglang

# the one configuration of each study's space (and its start_from point)
EAGLE3 = {"speculative-num-steps": 2, "speculative-eagle-topk": 1}
NGRAM = {"speculative-num-draft-tokens": 4}
STAND_IN_KERNEL = "sgl_kernel is a test-only stand-in here"


def study_file(tmp: Path, name: str, model: Path, draft: Path | None) -> Path:
    """A study on this machine's real SGLang: EAGLE3 (with the tiny draft, a baseline)
    or NGRAM (no draft, no baseline: the EAGLE3 study measures it)."""
    flags = server_flags(model, free_port())
    port = flags.pop("port")
    flags.pop("host")
    point = EAGLE3 if draft is not None else NGRAM
    algo = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": str(draft)} \
        if draft is not None else {"speculative-algorithm": "NGRAM"}
    data: dict[str, Any] = {
        "name": name,
        "storage": f"sqlite:///{tmp / f'{name}.db'}",
        "hosts": [{"ssh": "local", "workdir": str(tmp / "host"),
                   "python": str(sglang_python())}],
        "server": {
            "launcher": "{python} -m sglang.launch_server",
            "port": port, "host": "127.0.0.1",
            "startup_timeout": duration(START_DEADLINE),
            "hang_timeout": duration(START_DEADLINE),  # SGLang is silent while importing
            "stop_grace": "20s",
            "args": {**flags, **algo},
            "env": server_env(),
        },
        "baseline": draft is not None,
        # one configuration: a sampler's proposal can only repeat the start_from point
        "space": {k: {"choices": [v]} for k, v in point.items()},
        "start_from": [point],
        "benchmark": {"api": "chat", "max_tokens": 48, "runs": 2, "warmup": 1,
                      "request_timeout": "5m"},
        "sweep": {"sampler": "random", "seed": 1, "n_startup_trials": 1, "confirm_top": 0,
                  "max_retries": 2},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def trials(db: Path, name: str = "real") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}").get_trials()


def server_logs(tmp: Path) -> list[str]:
    """One log per real server start (the host's workdir)."""
    return sorted(p.name for p in (tmp / "host").rglob("*.log"))


def started(ts: list[optuna.trial.FrozenTrial]) -> list[int]:
    """The trials that started a server (their record names it)."""
    return [t.number for t in ts if A.SERVER in t.user_attrs]


def serving_baseline(db: Path) -> dict[str, Any] | None:
    """The RUNNING baseline's server record once that server answers /health."""
    if not db.exists():
        return None
    try:
        running = [t for t in trials(db) if t.state == TrialState.RUNNING
                   and t.user_attrs.get(A.ROLE) == A.BASELINE and A.SERVER in t.user_attrs]
    except Exception:  # the schema may not exist yet
        return None
    for t in running:
        server = t.user_attrs[A.SERVER]
        try:
            if httpx.get(f"http://127.0.0.1:{server['port']}/health", timeout=2
                         ).status_code == 200:
                return dict(server)
        except httpx.HTTPError:
            pass
    return None


def pruned_once(done: list[optuna.trial.FrozenTrial], label: str) -> optuna.trial.FrozenTrial:
    """The one PRUNED trial that started a server: the configuration's fault, its log kept."""
    pruned = [t for t in done if t.state == TrialState.PRUNED and not t.user_attrs.get(A.SKIPPED)]
    assert len(pruned) == 1, [(t.number, t.state, t.user_attrs.get(A.FAILURE)) for t in done]
    t = pruned[0]
    kind, msg = t.user_attrs[A.FAILURE], t.user_attrs[A.FAILURE_MSG]
    assert kind in CONFIG_FAILURE_KINDS, (label, kind, msg)
    assert t.user_attrs.get(A.LOG_TAIL), label
    NOTES.append(f"{label}: PRUNED after one start, {kind}: {msg[:300]}")
    return t



def optimize(study: Path, n_trials: int, deadline: float, what: str) -> str:
    """``sweeper optimize`` of ``study`` (no confirm phase), which must succeed within
    ``deadline`` seconds (scaled); its wall time noted as ``what``. Returns its output."""
    t0 = time.monotonic()
    proc = run_cli("optimize", "--study", str(study), "--trials", str(n_trials),
                   "--no-confirm", timeout=scaled(deadline))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    NOTES.append(f"{what}: {time.monotonic() - t0:.0f} s")
    return out

def test_optimize_kill_resume_eagle3_failure_and_its_repeat(tiny_model: Path, tiny_draft: Path,
                                                            tmp_path: Path) -> None:
    study = study_file(tmp_path, "real", tiny_model, tiny_draft)
    db = tmp_path / "real.db"
    cmd = [sys.executable, "-m", "sweeper", "optimize", "--study", str(study),
           "--trials", "2", "--no-confirm"]
    orphan: int | None = None
    first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env={**os.environ, "COLUMNS": "200"}, start_new_session=True)
    try:
        t0 = time.monotonic()
        server = wait_until(lambda: first.poll() is None and serving_baseline(db)
                            or (first.poll() is not None and {"exited": first.returncode}),
                            START_DEADLINE + 120, "the baseline's real server to be healthy")
        assert "exited" not in server, first.communicate()[0].decode()[-3000:]
        NOTES.append(f"server start (optimize, baseline, then kill -9): healthy after "
                     f"{time.monotonic() - t0:.0f} s from `sweeper optimize`")
        orphan = int(server["pgid"])
        os.kill(first.pid, signal.SIGKILL)  # kill -9 of the sweeper only
        first.wait(timeout=30)
        assert group_alive(orphan), "the real server should outlive the killed sweeper"

        optimize(study, 2, 3 * START_DEADLINE + 600,
                 "resumed `sweeper optimize` (baseline and EAGLE3 starts)")
        assert not group_alive(orphan), "resume left the orphaned real server running"

        done = trials(db)
        by_role = [(t.number, t.state, t.user_attrs.get(A.ROLE)) for t in done]
        # the killed baseline: FAIL, re-queued; its re-run measured
        killed = [t for t in done if t.user_attrs.get(A.SERVER, {}).get("pgid") == orphan]
        assert [t.state for t in killed] == [TrialState.FAIL], by_role
        baseline = [t for t in done if t.user_attrs.get(A.ROLE) == A.BASELINE
                    and t.state == TrialState.COMPLETE]
        assert len(baseline) == 1 and baseline[0].value > 0, by_role
        assert len(baseline[0].user_attrs[A.RUNS]) == 2
        # SGLang's own "Decode batch" lines of the benchmark's window, parsed. 0.5.23's
        # /flush_cache (before every run) resets its decode counter, so a run logs a line
        # only past --decode-log-interval (40) decode steps: 48 tokens a request do
        assert baseline[0].user_attrs.get(A.DECODE_LINES, 0) >= 1, baseline[0].user_attrs
        # EAGLE3: the configuration's fault, from SGLang's own refusal
        eagle = pruned_once(done, "EAGLE3")
        assert "EAGLE is not supported in decode attention backend torch_native" in \
            eagle.user_attrs[A.FAILURE_MSG]
        failed = [t for t in done if t.state == TrialState.FAIL]
        assert failed == killed, [(t.number, t.user_attrs.get(A.FAILURE)) for t in failed]
        # one log per server start: killed baseline, baseline, EAGLE3
        logs = server_logs(tmp_path)
        assert len(logs) == 3 == len(started(done)), (logs, started(done))

        # a second sweep of the same study: the sampler can only propose the failed
        # EAGLE3 configuration again; no restart is spent on it, however often it comes
        t2 = time.monotonic()
        again = run_cli("optimize", "--study", str(study), "--trials", "1", "--no-confirm",
                        timeout=scaled(600))
        out2 = again.stdout + again.stderr
        after = trials(db)
        repeats = [t for t in after[len(done):] if t.user_attrs.get(A.SKIPPED)]
        assert repeats, out2[-3000:]
        assert all(t.state == TrialState.PRUNED and t.params == eagle.params
                   and f"trial {eagle.number}" in t.user_attrs[A.FAILURE_MSG]
                   for t in repeats), out2[-3000:]
        assert server_logs(tmp_path) == logs, "a repeat of a failed configuration started SGLang"
        assert started(after) == started(done)
        # every proposal known to fail: the sweep gives up on the space, says why, exits 1
        assert again.returncode == 1 and "known to fail" in out2, out2[-3000:]
        NOTES.append(f"second sweep: {len(repeats)} proposals of the failed EAGLE3 "
                     f"configuration skipped, 0 server starts, "
                     f"{time.monotonic() - t2:.0f} s")
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGKILL)
        for t in (trials(db) if db.exists() else []):
            pgid = t.user_attrs.get(A.SERVER, {}).get("pgid")
            if pgid:
                kill_group(int(pgid), grace=5)
        if orphan is not None:
            kill_group(orphan, grace=5)


def test_optimize_ngram_server_dies_under_the_benchmark(tiny_model: Path, tmp_path: Path
                                                        ) -> None:
    """See the module docstring: the death comes from the test-only stand-in's kernel."""
    study = study_file(tmp_path, "real-ngram", tiny_model, None)
    db = tmp_path / "real-ngram.db"
    try:
        out = optimize(study, 1, 2 * START_DEADLINE + 600,
                       "`sweeper optimize` of the NGRAM study (one start)")
        done = trials(db, "real-ngram")
        ngram = pruned_once(done, "NGRAM")
        # the server came up and died under the benchmark: no retry as infrastructure
        assert not [t for t in done if t.state == TrialState.FAIL], out[-3000:]
        assert len(server_logs(tmp_path)) == 1 == len(started(done))
        # which failure it is, said honestly: the stand-in's kernel, in SGLang's traceback
        assert STAND_IN_KERNEL in ngram.user_attrs[A.LOG_TAIL], ngram.user_attrs[A.LOG_TAIL]
    finally:
        for t in (trials(db, "real-ngram") if db.exists() else []):
            pgid = t.user_attrs.get(A.SERVER, {}).get("pgid")
            if pgid:
                kill_group(int(pgid), grace=5)
