"""Several groups of hardware confirm at once, each on its own host, and a Ctrl-C there stops
every group's server; a resume confirms them all."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

import sweeper.results.verdict as R
from sweeper.results import attrs as A
from sweeper.results.confirmed import confirmed_for
from sweeper.results.hosts import in_group

from .conftest import (
    demo_study_data,
    group_alive,
    recorded_pgids,
    run_cli,
    two_group_study,
    wait_for,
)
from .test_resilience import start_sweep
from .timeouts import scaled

GROUPS = ("h200", "a100")
EARLY = 3  # requests a confirm visit has served when it counts as just begun


def _load(data: dict[str, Any]) -> optuna.Study:
    return optuna.load_study(study_name="t", storage=data["storage"])


def _mid_visit_in_every_group(data: dict[str, Any], proc: Any) -> list[Any] | None:
    """The RUNNING confirm visits, one per group, each with its server alive and
    decoding; None until every group has one at the same moment."""
    if proc.poll() is not None:
        out, err = proc.communicate()
        raise AssertionError(f"the sweeper exited early ({proc.returncode}): {out}{err}")
    try:
        running = _load(data).get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    except Exception:  # noqa: BLE001 - the study may not exist yet
        return None
    mid = {}
    for t in running:
        server = t.user_attrs.get("server")
        log = Path(server["log_path"]) if server else None
        text = log.read_text(errors="replace") if log and log.exists() else ""
        # early in its benchmark (the warm-up and at most two runs served of its ten): the
        # visit is still in flight when the signal lands, however slow this poll was
        if t.user_attrs.get(A.CONFIRM) and "Decode batch" in text and \
                text.count("Prefill batch") <= EARLY and group_alive(server["pgid"]):
            mid[t.user_attrs[A.GROUP]] = t
    return list(mid.values()) if set(mid) == set(GROUPS) else None


def test_groups_confirm_at_once_and_a_ctrl_c_stops_every_groups_server(tmp_path: Path
                                                                       ) -> None:
    """One group after another, the other groups' nodes sat idle through each confirm
    phase. Both groups' visits are now in flight at the same moment (never so one after
    another); a Ctrl-C then records both as interrupted (not as fresh starts that failed,
    which would rule their configurations out), stops both servers, and the same command
    resumes: each group confirmed, nothing ruled out."""
    data = demo_study_data(tmp_path, start_from=[],
                           benchmark={"max_tokens": 400, "runs": 3, "warmup": 1},
                           sweep={"seed": 4, "n_startup_trials": 2, "confirm_top": 1,
                                  "confirm_runs": 10})
    path = two_group_study(tmp_path, data, GROUPS)
    proc = start_sweep(path, 6)
    try:
        victims = wait_for(lambda: _mid_visit_in_every_group(data, proc), 240,
                           "a confirm visit of each group in flight at once")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=scaled(120))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, out + err
    assert "Each group confirms its leaders on its own host" in out, out
    assert "interrupted during the confirm phase" in err and "every group's server" in err, err
    db = Path(data["storage"].removeprefix("sqlite:///"))
    assert not [g for g in recorded_pgids(db) if group_alive(g)], "every server stopped"
    study = _load(data)
    assert not study.get_trials(states=(TrialState.RUNNING,))
    by_number = {t.number: t for t in study.trials}
    for v in victims:
        assert by_number[v.number].state == TrialState.FAIL
        assert by_number[v.number].user_attrs.get("failure") == "interrupted", v.number
    again = run_cli("optimize", "--study", str(path), "--trials", "6")
    assert again.returncode == 0, again.stdout + again.stderr
    study = _load(data)
    trials = study.get_trials(deepcopy=False)
    for g in GROUPS:
        mine = in_group(trials, g)
        assert R.verdict(study, trials=mine).confirmed, (g, again.stdout)
        assert not R.cannot_win(confirmed_for(study, mine)), (g, again.stdout)
