"""Shared fixtures: a study on the simulated server in a temp dir, the CLI as a
subprocess, and cleanup of every server a test's sweep recorded (by process group)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import optuna
import pytest
import yaml

from sweeper.remote import free_port

from .quiet import wait_quiet
from .timeouts import duration, scaled

pytest_plugins = ["tests.sshd"]

ROOT = Path(__file__).resolve().parent.parent
SIM_LAUNCHER = "{python} -m sweeper.sim --sim-profile demo --sim-seed 7 --sim-startup-seconds 0.3"


def demo_study_data(tmp: Path, **overrides: Any) -> dict[str, Any]:
    """A small study on the demo profile of the simulator, everything under ``tmp``."""
    data: dict[str, Any] = {
        "name": "t",
        "storage": f"sqlite:///{tmp / 't.db'}",
        "hosts": [{"ssh": "local", "workdir": str(tmp / "host")}],
        "server": {
            "launcher": SIM_LAUNCHER,
            "port": free_port(),
            "startup_timeout": duration(30),
            # the simulator logs within a second; a loaded machine can hold a start back for
            # seconds, and none of these spaces hangs (a test of hangs sets its own)
            "hang_timeout": duration(20),
            "stop_grace": "5s",
            # 60-token runs are shorter than SGLang 0.5.23's default decode-log interval
            # (40 iterations, counted afresh after each /flush_cache): without a decode line
            # a run has no accept length, so the tests' servers log one every 8
            "args": {"model-path": "sim/demo-model", "tp-size": 4,
                     "speculative-algorithm": "EAGLE3",
                     "speculative-draft-model-path": "sim/demo-eagle3",
                     "decode-log-interval": 8},
        },
        "baseline": True,
        "space": {
            "speculative-num-steps": {"int": [1, 6]},
            "speculative-eagle-topk": {"choices": [1, 2, 4]},
            "speculative-num-draft-tokens": {"int": [2, 16]},
            "env.NCCL_ALGO": {"choices": ["unset", "Ring", "Tree"]},
        },
        "start_from": [{"speculative-num-steps": 5, "speculative-eagle-topk": 1,
                        "speculative-num-draft-tokens": 6}],
        "benchmark": {"api": "chat", "max_tokens": 60, "runs": 2, "warmup": 1},
        "sweep": {"seed": 3, "n_startup_trials": 4},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


@pytest.fixture
def make_study(tmp_path: Path) -> Callable[..., Path]:
    def make(**overrides: Any) -> Path:
        data = demo_study_data(tmp_path, **overrides)
        path = tmp_path / f"{data['name']}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path
    return make


def recorded_pgids(db: Path) -> set[int]:
    """Process groups of every server a sweep recorded in a study database."""
    if not db.exists():
        return set()
    pgids: set[int] = set()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT value_json FROM trial_user_attributes WHERE key='server'")
        kept = conn.execute("SELECT value_json FROM study_user_attributes "
                            "WHERE key='sweeper:kept_server'")
        for (value,) in [*rows, *kept]:
            with contextlib.suppress(Exception):
                pgids.add(int(json.loads(value)["pgid"]))
    return pgids


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """A live (non-zombie) process in the group. kill(0) would also see zombies, which
    linger when a server's SSH session parent is killed and init is slow to reap."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
            if int(pgrp) == pgid and state != "Z":
                return True
    return False


@pytest.fixture(autouse=True)
def _quiet_for_timing(request: pytest.FixtureRequest) -> None:
    """A ``timing`` test runs on a quiet machine, or is skipped saying why (tests/quiet.py)."""
    if request.node.get_closest_marker("timing") is not None:
        # patient once (a parallel run just before may still be ending), then a quick look
        why = wait_quiet(patience=2.0 if _BUSY_SEEN else 30.0)
        if why is not None:
            _BUSY_SEEN.append(why)
            pytest.skip(why)


_BUSY_SEEN: list[str] = []  # the machine was found busy once this session


@pytest.fixture(autouse=True)
def _stop_recorded_servers(tmp_path: Path) -> Iterator[None]:
    """Whatever a test does, no server it started outlives it."""
    yield
    for db in tmp_path.glob("*.db"):
        for pgid in recorded_pgids(db):
            kill_group(pgid)
    # servers no record names (a test that failed between a kill -9 and its resume): every
    # process group whose command line points into this test's folder
    for pgid in groups_in(tmp_path):
        kill_group(pgid)


def groups_in(folder: Path) -> set[int]:
    """Process groups of the processes whose command line names ``folder`` (never this
    test process's own group)."""
    mine, needle = os.getpgid(0), str(folder).encode()
    found: set[int] = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError, ValueError):
            if needle in cmdline.read_bytes():
                pgid = os.getpgid(int(cmdline.parent.name))
                if pgid != mine:
                    found.add(pgid)
    return found


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``cond`` until it returns something truthy, within a bounded deadline."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _has_trials_table(db: Path) -> bool:
    if not db.exists():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            return conn.execute("SELECT 1 FROM sqlite_master WHERE name='alembic_version'"
                                ).fetchone() is not None and conn.execute(
                "SELECT COUNT(*) FROM studies").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def streaming_trial(db: Path, name: str = "t", min_number: int = 0) -> Any:
    """The RUNNING trial (number >= min_number) whose server is alive and has logged
    decode steps: the sweeper is mid-benchmark. None otherwise."""
    if not _has_trials_table(db):
        return None  # never race the sweeper into creating the schema
    try:
        running = optuna.load_study(study_name=name, storage=f"sqlite:///{db}").get_trials(
            states=(optuna.trial.TrialState.RUNNING,))
    except Exception:  # the study or its tables may not exist yet
        return None
    for t in running:
        server = t.user_attrs.get("server")
        log = Path(server["log_path"]) if server else None
        if t.number >= min_number and log and log.exists() and \
                "Decode batch" in log.read_text(errors="replace") and group_alive(server["pgid"]):
            return t
    return None


def wait_http_ok(url: str, timeout: float, proc: subprocess.Popen[Any] | None = None
                 ) -> httpx.Response:
    """GET ``url`` until it answers 200; fail early if ``proc`` (the server) exits."""
    def attempt() -> httpx.Response | None:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}) before {url} was up")
        try:
            r = httpx.get(url, timeout=2)
        except httpx.HTTPError:
            return None
        return r if r.status_code == 200 else None
    return wait_for(attempt, timeout, url)


def two_group_study(tmp: Path, data: dict[str, Any], groups: tuple[str, ...] = ("h200", "a100")
                    ) -> Path:
    """``data`` with one local host per group (hosts of other hardware, each on its own port
    and workdir), written to ``tmp/t.yaml``."""
    data["hosts"] = [{"ssh": "local", "port": free_port(), "group": g,
                      "workdir": str(tmp / g)} for g in groups]
    path = tmp / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "sweeper", *args], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=scaled(timeout),
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


@pytest.fixture(scope="session")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One finished sweep with a confirm phase (and a failure), shared by the tests that
    only read a study: the browser tests, status, export, report."""
    import yaml

    tmp = tmp_path_factory.mktemp("browser")
    data = demo_study_data(tmp, sweep={"seed": 3, "n_startup_trials": 4, "confirm_top": 2,
                                       "confirm_runs": 2})
    # one start_from entry that fails for sure (no CollNet on the simulated hardware), so
    # the failure figures have something to draw
    data["space"]["env.NCCL_ALGO"] = {"choices": ["unset", "Ring", "Tree", "CollNetDirect"]}
    data["start_from"].append({"speculative-num-steps": 2, "speculative-eagle-topk": 1,
                               "env.NCCL_ALGO": "CollNetDirect"})
    path = tmp / "t.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli("optimize", "--study", str(path), "--trials", "10")
    assert proc.returncode == 0, proc.stderr
    (tmp / "optimize.out").write_text(proc.stdout)  # what the user saw at the end
    yield path
