"""`sweeper dashboard`: optuna-dashboard on the study's storage, loopback only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from sweeper.remote import free_port

from .conftest import ROOT, run_cli, wait_http_ok


def test_dashboard_serves_the_study_on_loopback(make_study, tmp_path: Path) -> None:
    study_file = make_study()
    assert run_cli("optimize", "--study", str(study_file), "--trials", "2").returncode == 0
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", "dashboard", "--study",
                             str(study_file), "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        # /api/studies, not /static/bundle.js (which 500s without Accept-Encoding)
        studies = wait_http_ok(f"http://127.0.0.1:{port}/api/studies", 30,
                               proc).json()["study_summaries"]
        assert [s["study_name"] for s in studies] == ["t"]
        detail = httpx.get(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}",
                           timeout=5).json()
        assert len(detail["trials"]) >= 2
        # the failure class and constraint mirror are visible as user attrs
        keys = {a["key"] for t in detail["trials"] for a in t["user_attrs"]}
        assert {"tok_s_runs", "config_id", "constraint_failed"} <= keys
        # bound to 127.0.0.1 only: a server on 0.0.0.0 would also answer on 127.0.0.2
        try:
            httpx.get(f"http://127.0.0.2:{port}/api/studies", timeout=2)
            raise AssertionError("the dashboard listens beyond 127.0.0.1")
        except httpx.ConnectError:
            pass
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)

