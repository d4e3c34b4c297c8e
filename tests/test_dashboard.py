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



def test_dashboard_shows_the_users_knobs_and_the_winner_first(finished: Path) -> None:
    import optuna

    from sweeper.results.headline import Headline

    study = optuna.load_study(study_name="t", storage=f"sqlite:///{finished.parent / 't.db'}")
    winner = Headline.of(study).best
    assert winner is not None
    # stored: the sampler's position parameter, which a user never set
    assert any("|position" in k for t in study.trials for k in t.params)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", "dashboard", "--study",
                             str(finished), "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        studies = wait_http_ok(f"http://127.0.0.1:{port}/api/studies", 30,
                               proc).json()["study_summaries"]
        detail = httpx.get(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}",
                           timeout=10).json()
        names = {p["name"] for t in detail["trials"] for p in t["params"]}
        assert "speculative-num-draft-tokens" in names
        assert not any("|position" in n for n in names), names
        shown = {t["number"]: {p["name"]: p["param_external_value"] for p in t["params"]}
                 for t in detail["trials"]}
        for t in study.trials:
            eff = t.user_attrs.get("effective")
            if eff and t.number in shown:  # each knob as SGLang ran it (shown as text)
                assert shown[t.number] == {k: str(v) for k, v in eff.items()}, t.number
        # the first page's "Best Trial" is a trial of the winner, not a lucky single run
        assert [b["number"] for b in detail["best_trials"]][0] in winner.trials
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
