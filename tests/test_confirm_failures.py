"""A configuration that served in the sweep and fails a fresh start in the confirm phase is
left out of the winner; the phase goes on with the others (a real node's starts do fail now
and then: ending the whole run there lost the verdict on everything measured)."""

from __future__ import annotations

import shlex
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from sweeper.results import attrs as A

from .conftest import SIM_LAUNCHER, demo_study_data, run_cli


def _study_failing_once(tmp_path: Path) -> tuple[Path, Path]:
    """The demo study, its servers started through a wrapper that makes a start fail at
    once (exit 1 with an error line, as a crashing SGLang does): the next one when the file
    ``fail-next`` exists (it removes it), every one while ``fail-always`` exists; every
    other start is the simulator's."""
    mark = tmp_path / "fail-next"
    wrap = tmp_path / "launch.sh"
    always = shlex.quote(str(tmp_path / "fail-always"))
    wrap.write_text(
        "#!/bin/sh\n"
        f"if [ -e {always} ] || rm {shlex.quote(str(mark))} 2>/dev/null; then\n"
        "  echo 'RuntimeError: CUDA error: an illegal memory access was encountered' >&2\n"
        "  exit 1\n"
        "fi\n"
        'exec "$@"\n')
    data = demo_study_data(tmp_path, sweep={"seed": 3, "n_startup_trials": 4})
    data["server"]["launcher"] = f"sh {wrap} {SIM_LAUNCHER}"
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, mark


def test_a_leader_failing_a_fresh_start_cannot_win_and_the_phase_goes_on(
        tmp_path: Path) -> None:
    path, mark = _study_failing_once(tmp_path)
    proc = run_cli("optimize", "--study", str(path), "--trials", "6", "--no-confirm")
    assert proc.returncode == 0, proc.stderr
    storage = f"sqlite:///{tmp_path / 't.db'}"

    mark.touch()  # the confirm phase's first start (round 1 visits the leader first) fails
    proc = run_cli("confirm", "--study", str(path), "--top", "2", "--runs", "2")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert not mark.exists(), "the wrapper never saw a start"
    out = " ".join(proc.stdout.split())
    assert "a fresh start failed (crash" in out and "cannot win" in out, proc.stdout

    study = optuna.load_study(study_name="t", storage=storage)
    verdict = study.user_attrs[A.CONFIRMED]
    failed = verdict["failed_starts"]
    assert len(failed) == 1 and next(iter(failed.values())).startswith("crash"), verdict
    (loser,) = failed
    assert verdict["winner"] != loser
    # the failed start is a trial of its own, kept like every other
    failed_trials = [t for t in study.get_trials() if t.state == TrialState.FAIL
                     and t.user_attrs.get(A.CONFIRM)]
    assert [t.user_attrs.get(A.CONFIG_ID) for t in failed_trials] == [loser]
    # the others were measured on both rounds; the failed one's second visit was not made
    confirmed = [t for t in study.get_trials() if t.state == TrialState.COMPLETE
                 and t.user_attrs.get(A.CONFIRM)]
    assert len(confirmed) == 2 * 2  # the runner-up and the baseline, two rounds each
    assert loser not in {t.user_attrs.get(A.CONFIG_ID) for t in confirmed}

    # every reader agrees: the export is not the configuration that failed to start
    best = tmp_path / "best.yaml"
    exp = run_cli("export", "--study", str(path), "-o", str(best))
    assert exp.returncode == 0, exp.stderr
    exported = yaml.safe_load(best.read_text())
    lost = failed_trials[0].user_attrs[A.EFFECTIVE]
    assert any(exported.get(k) != v for k, v in lost.items() if not k.startswith("env.")) \
        or not lost, (exported, lost)
    report = run_cli("report", "--study", str(path), "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    html = next((tmp_path / "report").glob("*.html")).read_text()
    assert "a fresh start failed (crash" in html


def test_when_every_fresh_start_fails_confirm_says_so_in_one_line(tmp_path: Path) -> None:
    path, _ = _study_failing_once(tmp_path)
    proc = run_cli("optimize", "--study", str(path), "--trials", "4", "--no-confirm")
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "fail-always").touch()
    proc = run_cli("confirm", "--study", str(path), "--top", "1", "--runs", "2")
    assert proc.returncode == 1, proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: every configuration of the "
                                                   "confirm phase failed a fresh start"), lines
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}")
    assert A.CONFIRMED not in study.user_attrs  # no verdict made of nothing
    assert sum(1 for t in study.get_trials() if t.user_attrs.get(A.CONFIRM)
               and t.state == TrialState.FAIL) == 2  # the leader's and the baseline's
