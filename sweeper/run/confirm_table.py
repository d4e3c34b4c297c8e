"""The confirm phase's verdict as a table (sweeper.run.confirm runs the phase): each
configuration's fresh runs, interval, speedup and what the phase says of it."""

from __future__ import annotations

import math
from typing import Any

import sweeper.results.verdict as R
from sweeper.measure.stats import speedup
from sweeper.run.confirm import Candidate, ConfirmOutcome


def _verdict_note(outcome: ConfirmOutcome, c: Candidate) -> str:
    """The confirm table's last column: what the phase says of ``c`` beyond its speed (in
    the words every reader of the stored verdict uses: results/verdict.cannot_win)."""
    ruled_out = R.cannot_win({"lossless_mismatches": outcome.lossless_mismatches,
                              "failed_starts": outcome.failed})
    if c.result.config_id in ruled_out:
        return f"{ruled_out[c.result.config_id]}: cannot win"
    if c.result.is_baseline:
        return "-"
    return "not checked (no baseline)" if outcome.baseline is None else "same outputs"


def _why_not_first(console: Any, outcome: ConfirmOutcome, contenders: list[Candidate]) -> None:
    """A winner below the table's first row (ranked on fresh runs alone) reads like a bug
    to a stranger: say what ranked it, every start of the sweep's and this phase's."""
    w = outcome.winner
    if not contenders or w is contenders[0] or w not in contenders:
        return
    first = contenders[0]
    if outcome.lossless_mismatches.get(first.result.config_id):
        return  # the lossless warning says why the first row cannot win
    mine, theirs = (outcome.pooled.get(c.result.config_id) for c in (w, first))
    if mine is None or theirs is None:
        return
    place = contenders.index(w) + 1
    nth = {2: "second", 3: "third"}.get(place, f"number {place}")
    console.print(f"[dim]The winner is ranked on every server start, the sweep's and this "
                  f"phase's: {mine[0]:.1f} tok/s over {mine[1]} starts against "
                  f"{theirs[0]:.1f} over {theirs[1]} for the first row; on this phase's "
                  f"fresh runs alone it is {nth}.[/]", soft_wrap=False)


def print_confirm(console: Any, outcome: ConfirmOutcome) -> None:
    """The verdict: each configuration's fresh runs, interval and speedup.

    Below status's WIDE width (an 80-column terminal, or COLUMNS=80 piped) the table is
    status's compact one: the knobs every contender shares are said once above it, each row
    keeps what tells it apart (a long label folds onto a second line, never cut), and the
    intervals shrink to mean ± half-width; what cannot fit is the lossless note's detail."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from sweeper.results.labels import compact_params, compact_parts
    from sweeper.results.status import WIDE, shared_knobs

    wide = console.width >= WIDE
    # the ones with no fresh run (every fresh start failed) last
    ordered = sorted(outcome.candidates, reverse=True,
                     key=lambda c: (bool(c.runs), outcome.value(c) if c.runs else 0.0))
    contenders = [c for c in ordered if not c.result.is_baseline and not c.failed]
    same = {} if wide else shared_knobs([c.result.effective for c in contenders])
    title = "confirm phase (fresh, interleaved runs only)"
    if wide:
        table = Table(title=title, title_justify="left")
        for col in ("configuration", "runs", "tok/s (95% CI)", "vs baseline", "lossless"):
            table.add_column(col)
    else:
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      show_edge=False)
        # never cut: what is cut is what tells two contenders apart
        labels = [len(compact_params(c.result.effective, frozenset(same))) + len(" ◀ winner")
                  for c in ordered]
        notes = [len(_verdict_note(outcome, c)) for c in ordered]
        # its longest label on one line when the other columns leave room: runs, tok/s
        # and vs base take ~30 characters with their gaps, the lossless note up to 24
        room = console.width - 30 - min(24, max([14, *notes]))
        table.add_column("configuration", overflow="fold",
                         min_width=max(16, min(max(labels), room)))
        table.add_column("runs", justify="right", no_wrap=True)
        table.add_column("tok/s", justify="right", no_wrap=True)
        table.add_column("vs base", justify="right", no_wrap=True)
        table.add_column("lossless", overflow="fold", max_width=22)
    for c in ordered:
        note = _verdict_note(outcome, c)
        lossless = f"[red]{escape(note)}[/]" if note.endswith("cannot win") else note
        mark = " ◀ winner" if c is outcome.winner else ""
        ratio = outcome.speedups.get(c.result.config_id)
        if wide:
            table.add_row(R.short_params(c.result.effective) + mark, str(len(c.runs)),
                          R.fmt_tok_s(c.stats) if c.runs else "-", R.fmt_ratio(ratio),
                          lossless)
            continue
        speed = ("-" if not c.runs else R.fmt_tok_s(c.stats) if len(c.runs) < 2
                 else f"{c.stats.mean:.0f}±{c.stats.ci_half_width:.0f}")
        table.add_row(escape(compact_params(c.result.effective, frozenset(same))) + mark,
                      str(len(c.runs)), speed, R.fmt_ratio(ratio).split(" ")[0], lossless)
    if same:
        console.print("[dim]every contender below has "
                      f"{escape(' '.join(compact_parts(same)) or 'NCCL defaults')}[/]",
                      soft_wrap=False, overflow="fold")
    console.print(table)
    if len(contenders) > 1 and outcome.winner is contenders[0]:
        first, second = contenders[0], contenders[1]
        tie = speedup(first.runs, second.runs)
        if not math.isnan(tie.low) and tie.low <= 1.0:
            console.print(f"[dim]The winner leads the runner-up by {(tie.ratio - 1) * 100:+.1f}% "
                          f"[{(tie.low - 1) * 100:+.1f}, {(tie.high - 1) * 100:+.1f}]: within "
                          "the noise, a tie; more confirm runs would separate them.[/]",
                          soft_wrap=False)  # wrapped at words to the terminal's width
    _why_not_first(console, outcome, contenders)
    if outcome.failed:
        console.print("[red]warning: a fresh start of some configurations failed in the "
                      "confirm phase; a launch must start every time: they are left out of "
                      "the winner.[/]", soft_wrap=False)
    if any(outcome.lossless_mismatches.values()):
        console.print("[red]warning: some configurations changed temperature-0 outputs; "
                      "speculative decoding should be lossless — check the draft model. "
                      "They are left out of the winner.[/]", soft_wrap=False)
