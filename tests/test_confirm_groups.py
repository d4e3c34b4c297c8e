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


def _breakable(tmp_path: Path, broken: Path, only: str = "") -> tuple[dict[str, Any], Path]:
    """A two-group study swept for 4 trials, its servers started through a wrapper that
    makes every start fail (as a crashing SGLang does) once ``broken`` exists: on every
    host, or with ``only`` the group whose host it names (not the launcher's --help)."""
    import shlex

    import yaml

    from .conftest import SIM_LAUNCHER

    data = demo_study_data(tmp_path, start_from=[],
                           sweep={"seed": 4, "n_startup_trials": 2})
    path = two_group_study(tmp_path, data, GROUPS)
    port = next((f" --port {h['port']} " for h in data["hosts"] if h["group"] == only), " ")
    wrap = tmp_path / "launch.sh"
    wrap.write_text("#!/bin/sh\n"
                    f"if [ -e {shlex.quote(str(broken))} ]; then case \" $* \" in "
                    f"*\" --help \"*) ;; *{shlex.quote(port)}*)\n"
                    "  echo 'RuntimeError: CUDA error: an illegal memory access was "
                    "encountered' >&2; exit 1;; esac; fi\n"
                    'exec "$@"\n')
    data["server"]["launcher"] = f"sh {wrap} {SIM_LAUNCHER}"
    path.write_text(yaml.safe_dump(data))
    first = run_cli("optimize", "--study", str(path), "--trials", "4", "--no-confirm")
    assert first.returncode == 0, first.stdout + first.stderr
    return data, path


def test_a_sweep_stopped_by_failures_gives_each_groups_winner_not_one(tmp_path: Path
                                                                      ) -> None:
    """A sweep of several groups aborted (5 failed starts in a row everywhere: the nodes,
    not the configurations) printed one 'Best:' across the groups and a bare export
    hint, where its normal end names each group's winner. (Failures count per group:
    the first group to reach 5 is left out, the second stops the sweep.)"""
    broken = tmp_path / "broken"
    _, path = _breakable(tmp_path, broken)
    broken.touch()
    stopped = run_cli("optimize", "--study", str(path), "--trials", "14")
    assert stopped.returncode == 1 and "error: sweep stopped" in stopped.stderr, \
        stopped.stdout + stopped.stderr
    assert "Measured on 2 groups of hardware" in stopped.stdout, stopped.stdout
    assert "\nBest:" not in stopped.stdout and "Export it:" not in stopped.stdout
    for g in GROUPS:
        assert f"group {g}: Best: " in stopped.stdout, stopped.stdout


def test_a_group_whose_starts_all_fail_is_left_out_and_the_others_go_on(tmp_path: Path
                                                                          ) -> None:
    """Failed restarts in a row are counted per group: 5 on one group's hardware (its
    server settings do not work there) retire that group's hosts, where they stopped the
    whole sweep while another group's node served (and sat idle from then on)."""
    broken = tmp_path / "broken"
    data, path = _breakable(tmp_path, broken, only="a100")
    broken.touch()
    done = run_cli("optimize", "--study", str(path), "--trials", "14", "--no-confirm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "group a100 is left out of this sweep, the other groups go on: 5 trials in a " \
        "row failed on its hardware" in " ".join(done.stdout.split()), done.stdout
    trials = _load(data).get_trials(deepcopy=False)
    new = [t for t in trials if t.number >= 4 and t.state != TrialState.WAITING]
    a100 = [t for t in new if t.user_attrs.get(A.GROUP) == "a100"]
    assert a100 and all(t.state != TrialState.COMPLETE for t in a100), a100
    h200 = [t for t in new if t.user_attrs.get(A.GROUP) == "h200"
            and t.state == TrialState.COMPLETE]
    assert len(h200) >= 5, done.stdout  # it went on past a100's fifth failure


def test_one_groups_confirm_phase_failing_leaves_the_others_verdict_and_names_its_group(
        tmp_path: Path) -> None:
    """Groups confirm at once: one group whose every fresh start fails (its node in
    trouble) has its error said once, naming the group, with the command that confirms
    that group again (`sweeper confirm` alone takes the first host's group); the other
    group's table and confirmed winner stand; and that command, once the node serves,
    confirms the failed group."""
    import yaml

    broken = tmp_path / "broken"
    data, path = _breakable(tmp_path, broken, only="a100")
    data["sweep"].update(confirm_top=1, confirm_runs=2)
    path.write_text(yaml.safe_dump(data))
    broken.touch()
    done = run_cli("optimize", "--study", str(path), "--trials", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    again = f"sweeper confirm --study {path} --group a100"
    assert len(errors) == 1 and "group a100's confirm phase" in errors[0] \
        and again in errors[0], done.stderr
    assert "Group h200 " in done.stdout and "Group a100 (" not in done.stdout.split(
        "confirm 1/2")[-1], done.stdout  # a100's header only before its phase, no table
    study = _load(data)
    trials = study.get_trials(deepcopy=False)
    assert R.verdict(study, trials=in_group(trials, "h200")).confirmed, done.stdout
    assert not R.verdict(study, trials=in_group(trials, "a100")).confirmed, done.stdout
    broken.unlink()
    fixed = run_cli(*again.split()[1:])
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    study = _load(data)
    trials = study.get_trials(deepcopy=False)
    assert R.verdict(study, trials=in_group(trials, "a100")).confirmed, fixed.stdout
