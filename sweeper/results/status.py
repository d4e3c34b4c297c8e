"""``sweeper status`` and the end-of-sweep summary, for a terminal.

The table fits 80 columns (compact configuration labels; wider when the terminal is) and
always shows the baseline and the start_from trials, whatever the row limit. The winner's
lines come from results/headline.py, like every other place that names it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from optuna.trial import FrozenTrial, TrialState
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import sweeper.results.verdict as R
from sweeper.measure.stats import summarize
from sweeper.results import attrs as A
from sweeper.results.headline import SIM_NOTE, Headline, export_hint, group_export
from sweeper.results.hosts import print_hosts, trial_groups
from sweeper.results.kind import TrialKind, kind_of
from sweeper.results.labels import compact_params, compact_parts
from sweeper.results.liveness import is_stale
from sweeper.results.storage import load_existing
from sweeper.results.table import trials_frame
from sweeper.search.nodetime import study_spent
from sweeper.study.base import public_url

if TYPE_CHECKING:
    from sweeper.results.summary import SweepSummary
    from sweeper.study import StudySpec

WIDE = 120  # from this terminal width on, full labels and intervals
_STATE = {TrialState.COMPLETE: "[green]done[/]", TrialState.PRUNED: "[red]pruned[/]",
          TrialState.FAIL: "[magenta]failed[/]", TrialState.RUNNING: "[cyan]run[/]",
          TrialState.WAITING: "queued"}


def shared_knobs(rows: list[FrozenTrial] | list[dict[str, Any]]) -> dict[str, Any]:
    """The knobs (and values) that every speculative configuration shown has in common:
    at 80 columns they are said once, so each row keeps what tells it apart. ``rows``: the
    trials shown, or the effective configurations themselves (the confirm phase's)."""
    effs: list[dict[str, Any]] = []
    for r in rows:
        eff = r if isinstance(r, dict) else r.user_attrs.get(A.EFFECTIVE)
        if eff:
            effs.append(eff)
    if len(effs) < 2:
        return {}
    first = effs[0]
    return {k: v for k, v in first.items()
            if all(k in e and e[k] == v for e in effs[1:])}


def several_groups(groups: Sequence[str], export: str = "sweeper export") -> str:
    """In place of one winner when hosts of several kinds of hardware measured: results
    are compared only within a group (each group's winner is printed with the hosts)."""
    return (f"Measured on {len(groups)} groups of hardware ({', '.join(groups)}): results "
            "are compared only within a group, each with its own winner ('group NAME: "
            f"Best'). Export one: {group_export(export, 'NAME')}")


def node_line(seconds: float, source: str) -> str:
    return f"Node time: {seconds / 3600:.2f} node-hours ({source})"


def print_summary(console: Console, s: SweepSummary, headline: Headline,
                  export: str | None = None, groups: Sequence[str] = ()) -> None:
    """The end of a sweep; ``export`` is the command that exports this sweep's winner
    (cli/common.export_command: the study and storage as the sweep was given them).
    ``groups``: the groups of hardware that measured (several: no one winner)."""
    console.print("\n" + summary_counts(s))
    if s.stop_reason:
        console.print(f"Stopped early: {s.stop_reason}")
    if s.node_seconds is not None:
        console.print(node_line(s.node_seconds, s.node_source))
    export = export or f"sweeper export --study {s.study} -o best.yaml"
    if len(groups) > 1:
        console.print(several_groups(groups, export), markup=False, soft_wrap=True)
    else:
        for line in headline.lines():
            console.print(line)
    if s.kept_server is not None:
        console.print(f"The best configuration is left running on {s.kept_server.host} port "
                      f"{s.kept_server.port} (process group {s.kept_server.pgid}; log "
                      f"{s.kept_server.log_path}). Stop it with: sweeper stop --study {s.study}")
    if headline.best is not None and len(groups) < 2:
        console.print(f"Export it: {export}", markup=False, soft_wrap=True)
    if s.simulated:
        console.print(f"[dim]{SIM_NOTE}[/]")


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 trial``, ``2 trials``, ``0 trials``."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def summary_counts(s: SweepSummary) -> str:
    """What the sweep did, each count true: a trial measured on the server already
    running (a replicate, measured longer on the same start) restarted nothing."""
    restarts = s.finished - s.reused
    pruned = ", ".join(f"{k} {v}" for k, v in sorted(s.pruned.items())) or "none"
    parts = [f"{plural(restarts, 'trial')} restarted the server"]
    if s.reused:
        parts[0] += f", {s.reused} more measured on the server already running"
    parts[0] += f" ({s.complete} measured, failed by configuration: {pruned})"
    parts.append(f"{plural(s.failed, 'infrastructure failure')} ({s.retried} queued again)")
    text = f"Sweep of {s.study!r} ended ({s.stopped_because}): " + ", ".join(parts)
    text += (f"; {plural(s.skipped, 'proposal')} skipped without a restart as known "
             "failures")
    if s.repeats:
        text += (f", {plural(s.repeats, 'accidental repeat')} of a measured configuration "
                 "answered without a restart")
    if s.reconciled:
        text += f", {s.reconciled} recovered from an earlier run"
    return text


def _shown(trials: list[FrozenTrial], limit: int | None) -> list[FrozenTrial]:
    """The last ``limit`` trials, plus the baseline and start_from trials before them."""
    if limit is None or len(trials) <= limit:
        return trials
    tail = trials[-limit:]
    first = tail[0].number
    anchors = [t for t in trials if t.number < first
               and t.user_attrs.get(A.ROLE) in (A.BASELINE, A.START_FROM)]
    return anchors + tail


def print_status(console: Console, spec: StudySpec, storage_url: str,
                 limit: int | None = 40, fmt: str = "table") -> None:
    study = load_existing(storage_url, spec.name, str(spec.path), spec.storage)
    trials = study.get_trials(deepcopy=False)
    if fmt in ("csv", "json"):
        frame = trials_frame(trials, list(spec.space))
        text = frame.to_csv(index=False) if fmt == "csv" else \
            frame.to_json(orient="records", indent=2)
        console.file.write(text if text.endswith("\n") else text + "\n")
        return
    wide = console.width >= WIDE
    base = R.baseline_result(R.config_results(trials))
    shown = _shown(trials, limit)
    same = {} if wide else shared_knobs(shown)
    rows = [_row(t, base, wide, frozenset(same)) for t in shown]
    # Compact: the fixed columns take ~40 characters; the configuration gets what its
    # longest label needs (knobs every row shares said once, above; a longer one wraps),
    # the note the rest. Both wrap at spaces and neither is narrower than its longest
    # word (a knob such as ALGO=CollNetDirect, a note such as start_from or invalid_args):
    # cut inside, a word would tell two rows apart wrongly or explain a row in half.
    # Wide: full labels and intervals.
    room = console.width - (64 if wide else 46)
    labels = [compact_params(t.user_attrs[A.EFFECTIVE], frozenset(same))
              for t in shown if t.user_attrs.get(A.EFFECTIVE) is not None]
    note_word = _longest_word(r[-1] for r in rows)
    config_w = max(16, room * 3 // 5) if wide else \
        min(max([16, *map(len, labels)]),
            max(16, _longest_word(labels), room - max(8, note_word)))
    table = Table(title=f"study {spec.name}", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("state", no_wrap=True)
    # never cut: what is cut is what tells two rows apart; a long label takes two lines
    table.add_column("configuration", overflow="fold", max_width=config_w,
                     min_width=None if wide else min(_longest_word(labels), config_w))
    table.add_column("tok/s", justify="right", no_wrap=True)
    table.add_column("acc." if not wide else "accept", justify="right", no_wrap=True)
    table.add_column("vs base", justify="right", no_wrap=True)
    if wide:
        table.add_column("start s", justify="right", no_wrap=True)
    if wide:  # a failure's whole message: its first words on one line, the log has it all
        table.add_column("note", overflow="ellipsis", no_wrap=True,
                         max_width=max(8, room - config_w))
    else:
        table.add_column("note", overflow="fold", min_width=min(note_word, room),
                         max_width=max(8, note_word, room - config_w))
    for row in rows:
        table.add_row(*row)
    if same:
        console.print("[dim]every configuration below has "
                      f"{escape(' '.join(compact_parts(same)) or 'NCCL defaults')}[/]",
                      soft_wrap=False, overflow="fold")
    console.print(table)
    hidden = len(trials) - len(shown)
    if hidden:
        console.print(f"[dim]({plural(hidden, 'earlier trial')} hidden; --all shows them)[/]")
    counts = {name: sum(1 for t in trials if t.state == s and not is_stale(t))
              for s, name in ((TrialState.COMPLETE, "complete"), (TrialState.PRUNED, "pruned"),
                              (TrialState.FAIL, "failed"), (TrialState.RUNNING, "running"),
                              (TrialState.WAITING, "queued"))}
    counts["stale (its sweeper stopped beating)"] = sum(1 for t in trials if is_stale(t))
    console.print(", ".join(f"{v} {k}" for k, v in counts.items() if v)
                  + f"; storage {public_url(storage_url)}", soft_wrap=False, overflow="fold")
    started = min((t.datetime_start for t in trials if t.datetime_start), default=None)
    if started:
        console.print(f"[dim]first trial started {started:%Y-%m-%d %H:%M}; "
                      f"now {dt.datetime.now():%H:%M}[/]", soft_wrap=False)
    # what the node has cost so far: on a paid node, watched from a second terminal
    spent, source = study_spent(spec, trials, bool(study.user_attrs.get(A.SIMULATED)))
    if spent > 0:
        console.print(node_line(spent, source), soft_wrap=False)  # wrapped at words
    print_hosts(console, study, spec.benchmark.aggregate, trials)
    groups = trial_groups(trials)
    if len(groups) > 1:
        console.print(several_groups(groups, export_hint(study)), markup=False,
                      soft_wrap=False)
    else:
        for line in Headline.of(study, spec.benchmark.aggregate, trials).lines():
            console.print(line, soft_wrap=False)  # wrapped at words to the terminal's width
    if study.user_attrs.get(A.SIMULATED):
        console.print(f"[dim]{SIM_NOTE}[/]", soft_wrap=False)


def _longest_word(texts: Iterable[str]) -> int:
    return max((len(word) for text in texts for word in text.split()), default=0)


def _row(t: FrozenTrial, base: R.ConfigResult | None, wide: bool,
         same: frozenset[str] = frozenset()) -> list[str]:
    ua = t.user_attrs
    runs = ua.get(A.RUNS) or []
    st = summarize(runs) if runs else None
    if st is None:
        speed = "-"
    elif wide or st.n < 2:
        speed = R.fmt_tok_s(st)
    else:
        speed = f"{st.mean:.0f}±{st.ci_half_width:.0f}"
    if not runs:
        vs = "-"
    elif ua.get(A.ROLE) == A.BASELINE:
        vs = "base"
    else:
        ratio = R.speedup_over(R.ConfigResult("", {}, "", runs=list(runs)), base)
        vs = R.fmt_ratio(ratio) if wide else R.fmt_ratio(ratio).split(" ")[0]
    acc = f"{ua[A.ACCEPT]:.2f}" if ua.get(A.ACCEPT) else "-"
    note = str(ua.get(A.FAILURE, "") or "")
    kind = kind_of(t)
    if kind == TrialKind.BACKED_OFF:
        note = f"handed back: {ua[A.BACKED_OFF]}"
    if kind == TrialKind.SKIPPED:
        note = f"{note} (skipped: known)"
    elif kind == TrialKind.REPEAT:
        note = f"repeat of {', '.join(map(str, ua[A.REPEAT_OF]))}, no restart"
    elif wide and t.state in (TrialState.FAIL, TrialState.PRUNED) and ua.get(A.FAILURE_MSG):
        note = f"{note}: {ua[A.FAILURE_MSG]}"
    if kind == TrialKind.CONFIRM:
        note = f"confirm {note}".strip()
    elif ua.get(A.ROLE) == A.START_FROM:
        note = f"start_from {note}".strip()
    eff = ua.get(A.EFFECTIVE, {}) if A.EFFECTIVE in ua else None
    if eff is None:
        label = "(queued)" if t.state == TrialState.WAITING else "-"
    else:
        label = R.short_params(eff) if wide else compact_params(eff, same)
    state = "[yellow]stale[/]" if is_stale(t) else _STATE.get(t.state, t.state.name.lower())
    row = [str(t.number), state, label, speed, acc, vs]
    if wide:
        row.append(f"{ua[A.STARTUP]:.1f}" if ua.get(A.STARTUP) is not None else "-")
    return [*row, note]
