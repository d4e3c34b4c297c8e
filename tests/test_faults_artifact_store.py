"""A shared storage's artifacts go to the artifact store the study file names
(``artifacts:``), which every machine sharing the storage reaches: `sweeper dashboard` run
from another working folder (another "machine": same storage URL, same study file) serves
the trials' server logs. With a database server and no store, the sweep says once where
the artifacts went. Real parts: the CLI, the simulator, the PostgreSQL on 127.0.0.1:5432,
optuna-dashboard over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from sweeper.remote import free_port

from .conftest import ROOT, demo_study_data, run_cli, wait_http_ok
from .pgdb import pg_url  # noqa: F401  (fixture)


def _study(tmp_path: Path, url: str, **extra: object) -> Path:
    data = demo_study_data(tmp_path, storage=url, **extra)
    folder = tmp_path / "shared-study"
    folder.mkdir(exist_ok=True)
    path = folder / "t.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _sweep(study_file: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(exist_ok=True)
    env = {"PYTHONPATH": str(ROOT)}
    return run_cli("optimize", "--study", str(study_file), "--trials", "2", cwd=cwd, env=env)


def test_dashboard_on_another_machine_shows_the_logs(pg_url: str,  # noqa: F811
                                                     tmp_path: Path) -> None:
    # relative to the study file: the same folder from every working folder that reads it
    study_file = _study(tmp_path, pg_url, artifacts="../artifact-store")
    machine_a, machine_b = tmp_path / "a", tmp_path / "b"
    proc = _sweep(study_file, machine_a)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "can be shared by several machines" not in proc.stdout
    assert not (machine_a / "studies").exists(), "nothing under machine A's working folder"
    store = tmp_path / "artifact-store"
    assert any(p.is_file() for p in store.rglob("*")), "the artifacts are in the store"

    machine_b.mkdir()
    port = free_port()
    dash = subprocess.Popen([sys.executable, "-m", "sweeper", "dashboard", "--study",
                             str(study_file), "--port", str(port)], cwd=machine_b,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        studies = wait_http_ok(f"{base}/api/studies", 60, dash).json()["study_summaries"]
        sid = studies[0]["study_id"]
        detail = httpx.get(f"{base}/api/studies/{sid}", timeout=10).json()
        logs = [(t["trial_id"], a) for t in detail["trials"] for a in t.get("artifacts", [])
                if a["filename"].endswith(".log")]
        assert logs, "the trials list their server logs"
        trial_id, art = logs[0]
        got = httpx.get(f"{base}/artifacts/{sid}/{trial_id}/{art['artifact_id']}", timeout=10)
        assert got.status_code == 200, f"machine B cannot read the log: {got.status_code}"
        assert "SIMULATED SGLang server" in got.text
    finally:
        os.killpg(dash.pid, signal.SIGTERM)
        dash.wait(timeout=10)


def test_shared_storage_without_a_store_says_so_once(pg_url: str,  # noqa: F811
                                                     tmp_path: Path) -> None:
    proc = _sweep(_study(tmp_path, pg_url), tmp_path / "a")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout.count("can be shared by several machines") == 1, proc.stdout
    assert "artifacts:" in proc.stdout


def test_artifact_store_that_is_no_folder_is_refused(make_study) -> None:
    proc = run_cli("validate", "--study", str(make_study(artifacts="ftp://host/x")))
    assert proc.returncode == 2 and "artifacts" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
