"""What a new user reads after a sweep: the export hint reproduces the sweep, the report's
sections all have content, its figures show what decides the pick."""

from __future__ import annotations

import html
import re
import shlex
from pathlib import Path

import optuna
import pandas as pd

from sweeper.results import attrs as A
from sweeper.results import figures
from sweeper.results.headline import Headline
from tests.conftest import run_cli


def _export_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Export it: "))


def test_the_export_hint_run_as_printed_exports_this_sweeps_winner(make_study,
                                                                   tmp_path: Path) -> None:
    study = make_study(start_from=[])
    other = tmp_path / "other storage.db"  # not the study file's storage, a space in it
    proc = run_cli("optimize", "--study", str(study), "--storage", f"sqlite:///{other}",
                   "--trials", "2", "--no-confirm", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    command = _export_line(proc.stdout).removeprefix("Export it: ")
    words = shlex.split(command)
    assert words[:2] == ["sweeper", "export"] and str(study) in words
    assert f"sqlite:///{other}" in words
    # run it exactly as printed (from where the sweep ran)
    run = run_cli(*words[1:], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    best = next(line for line in proc.stdout.splitlines() if line.startswith("Best: "))
    assert f"# {best}" in (tmp_path / "best.yaml").read_text()
    assert not (tmp_path / "t.db").exists()  # the study's own storage was never touched
    # the dashboard's note gives the same command
    stored = optuna.load_study(study_name="t", storage=f"sqlite:///{other}")
    assert stored.user_attrs[A.EXPORT] == command
    assert f"Export it: `{command}`" in Headline.of(stored).markdown(stored, True)


def test_the_export_hint_is_short_for_a_study_given_by_name() -> None:
    from sweeper.cli.common import export_command
    from sweeper.study import load_study

    demo = load_study("demo")
    assert export_command("demo", None, demo) == "sweeper export --study demo -o best.yaml"
    assert export_command("demo", demo.storage, demo) == \
        "sweeper export --study demo -o best.yaml"
    assert export_command("demo", "postgresql://u:pw@db/x", demo) == \
        "sweeper export --study demo --storage 'postgresql://u:***@db/x' -o best.yaml"


def _section(page: str, title: str) -> str:
    start = page.index(f"<h2>{title}")
    end = page.find("<h2", start + 4)
    return page[start:end if end > 0 else len(page)]


def test_report_confirm_table_and_trials_table(finished: Path, tmp_path: Path) -> None:
    proc = run_cli("report", "--study", str(finished), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r" / "report.html").read_text()
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{finished.parent / 't.db'}")
    confirmed = study.user_attrs[A.CONFIRMED]
    confirm = _section(page, "Confirm phase")
    rows = re.findall(r"<tr>\s*<td>", confirm)
    assert len(rows) == len(confirmed["trials"]) >= 2  # each contender and the baseline
    assert "(winner)" in confirm and "baseline (no speculation)" in html.unescape(confirm) \
        or "no speculation (baseline)" in html.unescape(confirm)
    trials = _section(page, "Trials")
    assert "&lt;NA&gt;" not in trials and "<NA>" not in trials and "NaN" not in trials
    header = re.findall(r"<th>([^<]*)</th>", trials)
    assert header.index("tok/s") < header.index("num-steps")  # figures before knobs
    assert "baseline (no speculation)" in trials
    # one level: no traffic section at all; every other section has content
    assert "concurrency level" not in page and "missing-traffic" not in page


def test_failure_map_orders_numbers_as_numbers() -> None:
    draft = pd.array([3, 11, 4, 13, 2, None], dtype="Int64")  # as trials_frame types it
    df = pd.DataFrame({"state": ["complete", "pruned", "complete", "pruned", "complete",
                                 "complete"],
                       "confirm": [False] * 6, "skipped": [False] * 6,
                       "failure": [None, "oom", None, "oom", None, None],
                       "speculative-num-draft-tokens": draft})
    fig = figures.failure_map(df, ["speculative-num-draft-tokens"])
    assert fig is not None
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["2", "3", "4", "11", "13"]


def test_leaders_axis_shows_the_small_differences() -> None:
    rows = [("a", 1.40, 1.38, 1.42), ("b", 1.39, 1.37, 1.41), ("c", 1.37, 1.35, 1.39)]
    fig = figures.leaders(rows)
    assert fig is not None
    low, high = fig.axes[0].get_xlim()
    assert 30 < low < 35 and 42 < high < 45  # not from 0%: 1-2% apart is visible

