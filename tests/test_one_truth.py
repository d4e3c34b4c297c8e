"""One truth about the winner: the end of a sweep, `status`, `export` and the report say
the same; read-only commands write nothing; the confirm phase keeps its evidence and does
not re-run for nothing; the CLI's small promises (--version, --sampler, --fresh)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import optuna
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import FrozenTrial, TrialState

from sweeper.results import attrs as A
from sweeper.results.status import _shown
from tests.conftest import run_cli


def _best_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Best: "))


def _node_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Node time: "))


def test_summary_status_export_and_report_name_the_same_winner(finished: Path,
                                                               tmp_path: Path) -> None:
    summary = _best_line((finished.parent / "optimize.out").read_text())
    status = run_cli("status", "--study", str(finished), env={"COLUMNS": "300"})
    assert status.returncode == 0 and _best_line(status.stdout) == summary
    # the node time spent, the confirm phase's restarts and runs included in both
    node = _node_line((finished.parent / "optimize.out").read_text())
    assert _node_line(status.stdout) == node
    assert "on the simulated server, not a GPU node's" in node
    out = tmp_path / "best.yaml"
    export = run_cli("export", "--study", str(finished), "-o", str(out))
    assert export.returncode == 0, export.stderr
    assert _best_line(export.stdout) == summary
    assert f"# {summary}" in out.read_text()
    report = run_cli("report", "--study", str(finished), "-o", str(tmp_path / "r"))
    assert summary.replace("—", "&mdash;") in (tmp_path / "r" / "report.html").read_text() \
        or summary in (tmp_path / "r" / "report.html").read_text(), report.stdout


def test_the_node_time_at_a_sweeps_end_counts_its_confirm_phase(make_study) -> None:  # noqa: ANN001
    """The end of `optimize` and `status` give one node time, the confirm phase's
    restarts in it: a user on a paid node reads what the whole command cost."""
    path = make_study(sweep={"seed": 3, "n_startup_trials": 2, "confirm_top": 1,
                             "confirm_runs": 2, "restart_cost": "8m"})
    proc = run_cli("optimize", "--study", str(path), "--trials", "3")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "Confirm phase" in proc.stdout
    node = _node_line(proc.stdout)
    status = run_cli("status", "--study", str(path))
    assert status.returncode == 0 and _node_line(status.stdout) == node
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{path.parent / 't.db'}")
    restarts = sum(1 for t in study.trials if (t.user_attrs.get(A.STARTUP) or 0) > 0)
    # the leader and the baseline on two fresh starts each: 4 restarts, none reused
    assert [t.user_attrs[A.STARTUP] > 0 for t in study.trials
            if t.user_attrs.get(A.CONFIRM)] == [True] * 4
    hours = float(node.split()[2])
    assert restarts * 480 / 3600 - 0.005 <= hours < restarts * 480 / 3600 + 0.05, (node, restarts)
    # `confirm` on its own says what it cost (its restarts) and the study's new total
    again = run_cli("confirm", "--study", str(path), "--top", "1", "--runs", "2")
    assert again.returncode == 0, again.stderr + again.stdout
    line = _node_line(again.stdout)
    phase, total = (float(x) for x in re.findall(r"(\d+\.\d+) (?:node-hours|in all)", line))
    assert phase == pytest.approx(4 * 480 / 3600, abs=0.02), line  # 2 starts, 2 configs
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{path.parent / 't.db'}")
    visits = [t for t in study.trials if t.user_attrs.get(A.CONFIRM)]
    assert len(visits) == 8 and all(t.user_attrs[A.STARTUP] > 0 for t in visits)  # fresh
    status = run_cli("status", "--study", str(path))
    assert f"{total:.2f} node-hours" in _node_line(status.stdout)
    assert f"Export it: sweeper export --study {path} -o best.yaml" in again.stdout


def test_confirm_trials_keep_their_evidence_and_a_real_duration(finished: Path) -> None:
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{finished.parent / 't.db'}")
    confirm = [t for t in study.trials if t.user_attrs.get(A.CONFIRM)]
    assert confirm
    for t in confirm:
        assert t.state == TrialState.COMPLETE
        assert t.duration is not None and t.duration.total_seconds() > 0.2
        names = [v for k, v in t.system_attrs.items() if k.startswith("artifacts:")]
        assert any('"benchmark.json"' in n for n in names), t.number
        assert any(".log" in n and "text/plain" in n for n in names), t.number


def test_status_fits_80_columns_and_has_csv_and_json(finished: Path) -> None:
    proc = run_cli("status", "--study", str(finished), env={"COLUMNS": "80"})
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, lines
    assert any("baseline" in line for line in lines)
    csv = run_cli("status", "--study", str(finished), "--csv").stdout
    assert csv.splitlines()[0].startswith("number,state,role,confirm,skipped,")
    js = run_cli("status", "--study", str(finished), "--json").stdout
    assert js.lstrip().startswith("[") and '"number":0' in js.replace(" ", "")


def _trial(number: int, role: str) -> FrozenTrial:
    now = dt.datetime.now()
    return FrozenTrial(number=number, state=TrialState.COMPLETE, value=1.0, datetime_start=now,
                       datetime_complete=now, params={"x": 1},
                       distributions={"x": IntDistribution(0, 2)}, user_attrs={A.ROLE: role},
                       system_attrs={}, intermediate_values={}, trial_id=number)


def test_status_always_shows_the_baseline_and_start_from_rows() -> None:
    trials = [_trial(0, A.BASELINE), _trial(1, A.START_FROM),
              *[_trial(n, A.SAMPLER) for n in range(2, 60)]]
    shown = [t.number for t in _shown(trials, 40)]
    assert shown[:2] == [0, 1] and shown[2:] == list(range(20, 60))


def test_read_only_commands_on_a_study_that_never_ran(make_study, tmp_path: Path) -> None:
    study = make_study()
    for args in (["status"], ["export", "-o", str(tmp_path / "b.yaml")], ["report"]):
        proc = run_cli(*args, "--study", str(study))
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "no study 't'" in proc.stderr
    assert not (tmp_path / "t.db").exists()
    assert not (tmp_path / "b.yaml").exists()


def test_confirm_reruns_only_when_the_leaders_changed(finished: Path, tmp_path: Path) -> None:
    import shutil

    from sweeper.run.confirm import leaders_changed

    # a copy of the finished study (the shared one stays as it was)
    shutil.copy(finished.parent / "t.db", tmp_path / "t.db")
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}")
    assert not leaders_changed(study, "mean", 2)  # right after its confirm phase
    first = next(t for t in study.trials if t.user_attrs.get(A.EFFECTIVE))
    study.add_trial(optuna.trial.create_trial(
        params=first.params, distributions=first.distributions, value=10_000.0,
        user_attrs={A.CONFIG_ID: "new-leader", A.EFFECTIVE: {"x": 1}, A.RUNS: [10_000.0]}))
    assert leaders_changed(study, "mean", 2)  # a new configuration leads: confirm again


def test_version_sampler_choices_and_fresh_needs_yes(finished: Path) -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0 and re.match(r"sweeper \d+\.\d+", proc.stdout)
    proc = run_cli("optimize", "--study", str(finished), "--sampler", "bogus")
    assert proc.returncode == 2 and "tpe" in proc.stderr and "random" in proc.stderr
    before = len(optuna.load_study(study_name="t",
                                   storage=f"sqlite:///{finished.parent / 't.db'}").trials)
    proc = run_cli("optimize", "--study", str(finished), "--fresh", "--trials", "1")
    assert proc.returncode == 2 and "--yes" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    after = len(optuna.load_study(study_name="t",
                                  storage=f"sqlite:///{finished.parent / 't.db'}").trials)
    assert after == before  # nothing deleted, nothing run
