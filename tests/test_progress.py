"""What a running sweep prints: on a terminal a progress bar (done/total, elapsed, ETA from
the mean trial time) with the phase, and lines cut to the width; elsewhere plain lines."""

from __future__ import annotations

import io
import time

from rich.console import Console

from sweeper.run.progress import ConsoleReporter, _MeanTrialEta


def test_terminal_gets_a_bar_with_eta_and_lines_cut_to_width() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100, highlight=False)
    rep = ConsoleReporter(console)
    rep.progress(0, 10)
    rep.phase("trial 3 (3/10) starting the server")
    eta = next(c for c in rep._progress.columns if isinstance(c, _MeanTrialEta))
    eta.started = time.monotonic() - 30  # 3 trials in 30 s
    rep.progress(3, 10)
    rep._progress.refresh()
    rep.line("trial 2 (2/10) " + "x" * 200)
    rep.close()
    out = buf.getvalue()
    assert "3/10" in out and "ETA 1:10" in out  # 7 trials left x 10 s
    assert "starting the server" in out
    line = next(ln for ln in out.splitlines() if "trial 2 (2/10)" in ln)
    assert len(line.split("\x1b")[0]) <= 100 and "…" in line


def test_a_pipe_gets_whole_plain_lines_and_no_bar() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=60)
    rep = ConsoleReporter(console)
    rep.progress(1, 10)
    rep.phase("trial 1 benchmarking")
    rep.line("trial 1 (1/10) " + "y" * 100)
    rep.close()
    out = buf.getvalue()
    assert out == "trial 1 (1/10) " + "y" * 100 + "\n"  # nothing but the line, whole
