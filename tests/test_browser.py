"""What a user sees in a browser: the dashboard of a finished study names the same winner
as the CLI, with its tok/s and the metric's name, and shows a trial's log as text; the
report renders with every figure. Real parts: a finished sweep on the simulated server,
`sweeper dashboard` and `sweeper report` as subprocesses, Debian's headless Chromium."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import optuna
import pandas as pd
import pytest

from sweeper.remote import free_port
from sweeper.results.headline import Headline
from sweeper.results.table import FIGURE_COLUMNS, FIXED_COLUMNS
from tests.browser import browser, keep_figure, keep_screenshot  # noqa: F401  (fixture)
from tests.conftest import ROOT, run_cli, wait_for, wait_http_ok

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _study(path: Path) -> optuna.Study:
    return optuna.load_study(study_name="t", storage=f"sqlite:///{path.parent / 't.db'}")


# '' when the element's text is wholly visible; else what hides part of it: the element's
# own overflow (an ellipsis, a fixed height) or an ancestor that clips it (overflow hidden,
# scroll), measured in the rendered page
CLIPPED_JS = """
const el = arguments[0];
if (el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 1)
  return `overflows itself: ${el.scrollWidth}x${el.scrollHeight} in `
    + `${el.clientWidth}x${el.clientHeight}`;
const r = el.getBoundingClientRect();
for (let a = el.parentElement; a; a = a.parentElement) {
  const s = getComputedStyle(a);
  if (s.overflowX === 'visible' && s.overflowY === 'visible') continue;
  const q = a.getBoundingClientRect();
  if (r.left < q.left - 1 || r.right > q.right + 1 || r.top < q.top - 1 || r.bottom > q.bottom + 1)
    return `clipped by <${a.tagName.toLowerCase()} class="${a.className}">`;
}
if (r.right > window.innerWidth + 1) return 'beyond the window';
return '';
"""


def _xpath_literal(text: str) -> str:
    if "'" not in text:
        return f"'{text}'"
    return "concat(" + ", \"'\", ".join(f"'{part}'" for part in text.split("'")) + ")"


def _page_text(driver: object, must: str, timeout: float = 30) -> str:
    from selenium.webdriver.common.by import By

    def body() -> str | None:
        text = driver.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]
        return text if must in text else None
    return wait_for(body, timeout, f"{must!r} on {driver.current_url}")  # type: ignore[attr-defined]


def test_dashboard_names_the_winner_and_shows_logs_as_text(finished: Path, browser,  # noqa: F811
                                                           tmp_path: Path) -> None:
    headline = Headline.of(_study(finished))
    assert headline.best is not None and headline.confirmed
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sweeper", "dashboard", "--study",
                             str(finished), "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        studies = wait_http_ok(f"http://127.0.0.1:{port}/api/studies", 30,
                               proc).json()["study_summaries"]
        study_id = studies[0]["study_id"]
        # the study's first page: the winner in its attributes, the metric's name
        browser.get(f"http://127.0.0.1:{port}/dashboard/studies/{study_id}")
        text = _page_text(browser, "sweeper:winner")
        figure = f"{headline.best.stats.mean:.1f} tok/s"
        assert f"{headline.label} — {figure}" in text
        assert "tok/s" in text and "Objective 0" not in text  # the metric has its name
        from selenium.webdriver.common.by import By

        cell = browser.find_element(By.XPATH, "//*[text()='sweeper:winner']")
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
        # the winner's name and its whole line on screen together, as the page opens on
        # them: not cut by the cell, scrolled out of the table or past the page's edge
        value = browser.find_element(
            By.XPATH, f"//*[contains(text(), {_xpath_literal(headline.label)})]")
        for shown in (cell, value):
            assert browser.execute_script(CLIPPED_JS, shown) == "", shown.text
        assert headline.one_line() in value.text.replace("\n", " ")
        keep_screenshot(browser, tmp_path, "dashboard.png")
        # the study's note says the same, with the speedup and how it was decided
        browser.get(f"http://127.0.0.1:{port}/dashboard/studies/{study_id}/note")
        note = _page_text(browser, "Winner:")
        assert f"Winner: {headline.label}" in note and figure in note
        assert "confirm phase" in note
        keep_screenshot(browser, tmp_path, "dashboard-note.png")

        detail = httpx.get(f"http://127.0.0.1:{port}/api/studies/{study_id}", timeout=10).json()
        trial = next(t for t in detail["trials"] if t["artifacts"])
        log = next(a for a in trial["artifacts"] if a["filename"].endswith(".log"))
        assert log["mimetype"].startswith("text/plain")
        browser.get(f"http://127.0.0.1:{port}/artifacts/{study_id}/{trial['trial_id']}/"
                    f"{log['artifact_id']}")
        shown = _page_text(browser, "SIMULATED SGLang server")  # rendered, not downloaded
        assert "Load weight begin" in shown
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_report_renders_every_figure(finished: Path, browser, tmp_path: Path) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    out = tmp_path / "report"
    proc = run_cli("report", "--study", str(finished), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert str(out / "report.html") in proc.stdout
    browser.get((out / "report.html").as_uri())
    _page_text(browser, "Why it wins")
    from sweeper.results.report import FIGURES

    for name in FIGURES:
        if name == "traffic":  # one concurrency level: no trade-off, no section at all
            assert "missing-traffic" not in browser.page_source
            assert "per concurrency level" not in browser.page_source
            assert not (out / "traffic.png").exists()
            continue
        img = browser.find_element(By.ID, f"fig-{name}")
        loaded = wait_for(lambda img=img: browser.execute_script(
            "return arguments[0].complete && arguments[0].naturalWidth", img), 10, name)
        assert loaded > 100, name
        assert (out / f"{name}.png").stat().st_size > 5000, name
    keep_screenshot(browser, tmp_path, "report.png")
    keep_figure(out / "history.png", "report-history.png")
    frame = pd.read_csv(out / "trials.csv")
    knobs = ["speculative-num-steps", "speculative-eagle-topk", "speculative-num-draft-tokens",
             "env.NCCL_ALGO"]
    assert list(frame.columns) == [*FIXED_COLUMNS, *knobs, *FIGURE_COLUMNS]
    assert len(frame) == len(_study(finished).trials)
    topk1 = frame[(frame["speculative-eagle-topk"] == 1) & frame["state"].eq("complete")]
    # the derived draft tokens of a topk-1 trial are in the table: steps + 1
    assert (topk1["speculative-num-draft-tokens"] == topk1["speculative-num-steps"] + 1).all()


@pytest.mark.parametrize("case", ["only failures", "only the baseline"])
def test_report_of_a_thin_study_says_what_is_missing(make_study, tmp_path: Path,
                                                     case: str) -> None:
    if case == "only failures":
        study = make_study(baseline=False, start_from=[],
                           space={"speculative-num-steps": {"int": [1, 2]},
                                  "speculative-eagle-topk": {"choices": [1, 2]},
                                  "env.NCCL_ALGO": {"choices": ["CollNetDirect"]}},
                           sweep={"seed": 1, "max_consecutive_failures": 2})
        trials = "2"
    else:
        study = make_study(start_from=[])
        trials = "1"
    run_cli("optimize", "--study", str(study), "--trials", trials)
    out = tmp_path / "rep"
    proc = run_cli("report", "--study", str(study), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    page = (out / "report.html").read_text()
    assert "Not drawn:" in page
    if case == "only failures":
        assert "No configuration has completed yet." in page
        assert 'id="fig-failures"' in page and 'id="missing-landscape"' in page
    else:
        assert 'id="fig-history"' in page and 'id="missing-leaders"' in page
