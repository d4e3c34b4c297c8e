"""``sweeper optimize`` of a small study against the REAL SGLang 0.5.23 (CPU, tiny Llama).

One sweep, killed with kill -9 while its baseline server is up, then resumed by the same
command: the orphaned real server is found and stopped, the baseline measured again; an
EAGLE3 and an NGRAM configuration (this CPU cannot run either) are PRUNED as the
configuration's fault from SGLang's own output, each after one start (a server that
dies under the benchmark is not retried as an infrastructure fault).
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
from tests.timeouts import duration

pytestmark = pytest.mark.sglang

EAGLE3 = {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 2,
          "speculative-eagle-topk": 1}
NGRAM = {"speculative-algorithm": "NGRAM", "speculative-num-steps": 2,
         "speculative-eagle-topk": 1}


def study_file(tmp: Path, model: Path, draft: Path) -> Path:
    flags = server_flags(model, free_port())
    port = flags.pop("port")
    flags.pop("host")
    data: dict[str, Any] = {
        "name": "real",
        "storage": f"sqlite:///{tmp / 'real.db'}",
        "hosts": [{"ssh": "local", "workdir": str(tmp / "host"),
                   "python": str(sglang_python())}],
        "server": {
            "launcher": "{python} -m sglang.launch_server",
            "port": port, "host": "127.0.0.1",
            "startup_timeout": duration(START_DEADLINE),
            "hang_timeout": duration(START_DEADLINE),  # SGLang is silent while importing
            "stop_grace": "20s",
            "args": {**flags, "speculative-draft-model-path": str(draft)},
            "env": server_env(),
        },
        "baseline": True,
        "space": {"speculative-algorithm": {"choices": ["EAGLE3", "NGRAM"]},
                  "speculative-num-steps": {"int": [1, 3]},
                  "speculative-eagle-topk": {"choices": [1]}},
        "start_from": [EAGLE3, NGRAM],
        "benchmark": {"api": "chat", "max_tokens": 48, "runs": 2, "warmup": 1,
                      "request_timeout": "5m"},
        "sweep": {"sampler": "random", "seed": 1, "n_startup_trials": 1, "confirm_top": 0,
                  "max_retries": 2},
    }
    path = tmp / "real.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def trials(db: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="real", storage=f"sqlite:///{db}").get_trials()


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


def test_optimize_kill_resume_and_configuration_failures(tiny_model: Path, tiny_draft: Path,
                                                         tmp_path: Path) -> None:
    study = study_file(tmp_path, tiny_model, tiny_draft)
    db = tmp_path / "real.db"
    cmd = [sys.executable, "-m", "sweeper", "optimize", "--study", str(study),
           "--trials", "3", "--no-confirm"]
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

        t1 = time.monotonic()
        proc = run_cli("optimize", "--study", str(study), "--trials", "3", "--no-confirm",
                       timeout=5 * START_DEADLINE + 600)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-5000:]
        NOTES.append(f"resumed `sweeper optimize` (baseline, EAGLE3, NGRAM starts): "
                     f"{time.monotonic() - t1:.0f} s")
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
        # EAGLE3 and NGRAM: the configuration's fault, from SGLang's own output
        pruned = {t.params.get("speculative-algorithm"): t for t in done
                  if t.state == TrialState.PRUNED and not t.user_attrs.get(A.SKIPPED)}
        assert set(pruned) == {"EAGLE3", "NGRAM"}, by_role
        for algo, t in pruned.items():
            kind, msg = t.user_attrs[A.FAILURE], t.user_attrs[A.FAILURE_MSG]
            assert kind in CONFIG_FAILURE_KINDS, (algo, kind, msg)
            assert t.user_attrs.get(A.LOG_TAIL), algo
            NOTES.append(f"{algo}: PRUNED, {kind}: {msg[:300]}")
        eagle_msg = pruned["EAGLE3"].user_attrs[A.FAILURE_MSG]
        assert "EAGLE is not supported in decode attention backend torch_native" in eagle_msg
        # no restart wasted: the server that died under the benchmark (NGRAM) is the
        # configuration's fault at once, never an infrastructure retry of the same thing
        failed = [t for t in done if t.state == TrialState.FAIL]
        assert failed == killed, [(t.number, t.user_attrs.get(A.FAILURE)) for t in failed]
        # one log per server start: killed baseline, baseline, EAGLE3, NGRAM
        logs = sorted(p.name for p in (tmp_path / "host").rglob("*.log"))
        assert len(logs) == 4, logs
        assert "infrastructure" not in out.lower() or "0 infrastructure" in out.lower()
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGKILL)
        for t in (trials(db) if db.exists() else []):
            pgid = t.user_attrs.get(A.SERVER, {}).get("pgid")
            if pgid:
                kill_group(int(pgid), grace=5)
        if orphan is not None:
            kill_group(orphan, grace=5)
