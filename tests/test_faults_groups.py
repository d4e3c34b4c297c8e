"""Hosts of other hardware (groups): a baseline that does not serve on one group retires
that group alone. Its own file: the suite runs a file on one worker (--dist loadfile), and
test_faults_liveness.py is long already. Real parts: the CLI, the simulator, SQLite."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from sweeper.remote.host import free_port
from sweeper.results import attrs as A

from .conftest import SIM_LAUNCHER, demo_study_data, run_cli, two_group_study
from .test_faults_liveness import HOLD
from .timeouts import scaled


def test_a_baseline_that_cannot_serve_on_one_group_retires_that_group_only(
        make_study, tmp_path: Path) -> None:  # noqa: ANN001
    """Two hosts of different hardware; the server without speculation crashes on one.
    That group's hosts are retired, the other group's sweep goes on to the budget; fixed,
    the same command measures the retired group's baseline first."""
    sim = SIM_LAUNCHER.removeprefix("{python} ")
    ports = {"bad": free_port(), "good": free_port()}  # the first host: the confirm's
    study_file = make_study(
        server={"launcher": f"{{python}} {HOLD} nobase {tmp_path} {scaled(120):g} {sim}"},
        hosts=[{"ssh": "local", "port": p, "group": g, "workdir": str(tmp_path / g)}
               for g, p in ports.items()],
        sweep={"confirm_top": 1, "confirm_runs": 2})
    (tmp_path / f"broken-{ports['bad']}").touch()
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert f"host local:{ports['bad']} retired: group bad is left out of this sweep" in out \
        and "RuntimeError: CUDA error" in out, out
    assert "UserWarning" not in out, out  # a group's baseline made afresh sets its constraint once
    # the confirm phase runs on a host still in the sweep, not on the first one listed
    assert f"[local:{ports['good']}] confirm 1/2: baseline" in out, out
    assert f"[local:{ports['bad']}] confirm" not in out, out
    db = f"sqlite:///{tmp_path / 't.db'}"
    trials = optuna.load_study(study_name="t", storage=db).get_trials()
    ran = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
           and not t.user_attrs.get(A.CONFIRM)]
    bad = [t for t in ran if t.user_attrs[A.GROUP] == "bad"]
    assert [t.user_attrs[A.ROLE] for t in bad] == [A.BASELINE], "no restart there after it"
    good = [t for t in ran if t.user_attrs[A.GROUP] == "good"]
    assert len(good) == 3 and all(t.state == TrialState.COMPLETE for t in good), \
        [(t.number, t.state) for t in good]
    (tmp_path / f"broken-{ports['bad']}").unlink()  # that host fixed
    again = run_cli("optimize", "--study", str(study_file), "--trials", "6")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "UserWarning" not in again.stderr, again.stderr
    trials = optuna.load_study(study_name="t", storage=db).get_trials()
    first_bad = min((t for t in trials if t.user_attrs.get(A.GROUP) == "bad"
                     and t.state == TrialState.COMPLETE), key=lambda t: t.number)
    assert first_bad.user_attrs[A.ROLE] == A.BASELINE, "its baseline measured first"


def test_a_configuration_measured_on_one_group_is_measured_again_on_another(
        tmp_path: Path) -> None:
    """A space of two configurations swept on two groups of hardware: a proposal of a
    configuration measured on the other group is no repeat here (its figure is that
    hardware's); it is measured on this group's host. Within a group, a repeat is still
    answered from that group's own measurement, without a restart."""
    data = demo_study_data(tmp_path, start_from=[],
                           sweep={"seed": 5, "n_startup_trials": 2, "sampler": "random"})
    data["server"]["args"] |= {"speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4}
    data["space"] = {"speculative-num-steps": {"int": [2, 3]}}
    path = two_group_study(tmp_path, data)
    done = run_cli("optimize", "--study", str(path), "--trials", "6")
    assert done.returncode == 0, done.stdout + done.stderr
    trials = optuna.load_study(study_name="t", storage=data["storage"]).trials
    by_number = {t.number: t for t in trials}
    proposed = {(t.user_attrs[A.GROUP], t.user_attrs[A.CONFIG_ID]) for t in trials
                if t.user_attrs.get(A.ROLE) == A.SAMPLER and A.CONFIG_ID in t.user_attrs}
    measured = {(t.user_attrs[A.GROUP], t.user_attrs[A.CONFIG_ID]) for t in trials
                if t.state == TrialState.COMPLETE and not t.user_attrs.get(A.REPEAT_OF)
                and t.user_attrs.get(A.ROLE) == A.SAMPLER}
    assert proposed <= measured, (proposed - measured, done.stdout)
    # the case arose: one configuration proposed on both groups
    assert any((g, c) in proposed for g in ("h200", "a100") for c in
               {c for h, c in proposed if h != g}), proposed
    for t in trials:  # a repeat is answered from its own group's measurement only
        for n in t.user_attrs.get(A.REPEAT_OF) or []:
            assert by_number[n].user_attrs[A.GROUP] == t.user_attrs[A.GROUP], \
                (t.number, n, done.stdout)
