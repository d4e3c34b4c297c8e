"""Groups of hardware whose starts fail: a group failing every start is left out while the
others go on, a sweep stopped by failures names each group's winner, and a group whose
confirm phase fails leaves the others' verdicts and says how to confirm it again.
(Split from test_confirm_groups.py so that the two files run on two test workers.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optuna.trial import TrialState

import sweeper.results.verdict as R
from sweeper.results import attrs as A
from sweeper.results.hosts import in_group

from .conftest import demo_study_data, run_cli, two_group_study
from .test_confirm_groups import GROUPS, _load


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
