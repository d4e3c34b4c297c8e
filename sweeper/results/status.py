"""Human-readable reports: the status table and the end-of-sweep summary."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from optuna.trial import TrialState
from rich.console import Console
from rich.table import Table

import sweeper.results.verdict as R
from sweeper.measure.stats import summarize
from sweeper.results import attrs as A
from sweeper.results.storage import load_existing

if TYPE_CHECKING:
    from sweeper.run.sweep import SweepSummary
    from sweeper.study import StudySpec

SIM_NOTE = ("[dim]Figures come from the built-in SIMULATED SGLang server (a test double), "
            "not from real hardware.[/]")


def _best_lines(best: R.ConfigResult | None, base: R.ConfigResult | None) -> list[str]:
    if best is None:
        return ["No configuration has completed yet."]
    st = best.stats
    ci = "" if st.n < 2 else f" (95% CI {st.ci_low:.1f}–{st.ci_high:.1f}, {st.n} runs)"
    acc = f", accept length {best.accept_length:.2f}" if best.accept_length else ""
    lines = [f"Best: {R.short_params(best.effective)} — {st.mean:.1f} tok/s{ci}{acc}; "
             f"trial(s) {', '.join(map(str, best.trials))}"]
    if base is not None and best is not base:
        lines.append(f"Speedup over baseline ({base.stats.mean:.1f} tok/s): "
                     f"{R.fmt_ratio(R.speedup_over(best, base))}")
    elif best is base:
        lines.append("No speculative configuration beat the baseline (no speculation).")
    return lines


def print_summary(console: Console, s: SweepSummary) -> None:
    pruned = ", ".join(f"{k} {v}" for k, v in sorted(s.pruned.items())) or "none"
    console.print(f"\nSweep of {s.study!r} ended ({s.stopped_because}): {s.finished} trials "
                  f"restarted the server ({s.complete} measured, failed by configuration: "
                  f"{pruned}), {s.failed} infrastructure failures ({s.retried} queued again); "
                  f"{s.skipped} proposals skipped without a restart as known failures"
                  + (f", {s.reconciled} recovered from an earlier run" if s.reconciled else ""))
    for line in _best_lines(s.best, s.baseline):
        console.print(line)
    if s.kept_server is not None:
        console.print(f"The best configuration is left running on {s.kept_server.host} port "
                      f"{s.kept_server.port} (process group {s.kept_server.pgid}; log "
                      f"{s.kept_server.log_path}). Stop it with: sweeper stop --study {s.study}")
    if s.best is not None:
        console.print(f"Export it: sweeper export --study {s.study} -o best.yaml")
    if s.simulated:
        console.print(SIM_NOTE)


def print_status(console: Console, spec: StudySpec, storage_url: str,
                 limit: int | None = 40) -> None:
    study = load_existing(storage_url, spec.name, str(spec.path))
    trials = study.get_trials(deepcopy=False)
    results = R.config_results(trials)
    base = R.baseline_result(results)
    table = Table(title=f"{spec.name} — {storage_url}", title_justify="left")
    for col, kw in (("#", {"justify": "right"}), ("state", {}), ("configuration", {}),
                    ("tok/s (95% CI)", {"justify": "right"}), ("accept", {"justify": "right"}),
                    ("vs baseline", {"justify": "right"}), ("start s", {"justify": "right"}),
                    ("note", {})):
        table.add_column(col, **kw)
    shown = trials if limit is None else trials[-limit:]
    for t in shown:
        ua = t.user_attrs
        runs = ua.get(A.RUNS) or []
        st = summarize(runs) if runs else None
        speed = R.fmt_tok_s(st) if st else "-"
        vs = R.fmt_ratio(R.speedup_over(R.ConfigResult("", {}, "", runs=list(runs)), base)) \
            if runs and ua.get(A.ROLE) != A.BASELINE else ("baseline" if runs else "-")
        acc = f"{ua[A.ACCEPT]:.2f}" if ua.get(A.ACCEPT) else "-"
        note = ua.get(A.FAILURE, "")
        if ua.get(A.SKIPPED):
            note = f"{note} (skipped: known)"
        elif t.state == TrialState.FAIL and ua.get(A.FAILURE_MSG):
            note = f"{note}: {ua[A.FAILURE_MSG][:60]}"
        state = {TrialState.COMPLETE: "[green]done[/]", TrialState.PRUNED: "[red]pruned[/]",
                 TrialState.FAIL: "[magenta]failed[/]", TrialState.RUNNING: "[cyan]running[/]",
                 TrialState.WAITING: "queued"}[t.state]
        label = R.short_params(ua.get(A.EFFECTIVE, {})) if A.EFFECTIVE in ua else (
            "(queued)" if t.state == TrialState.WAITING else "-")
        table.add_row(str(t.number), state, label, speed, acc, vs,
                      f"{ua[A.STARTUP]:.1f}" if ua.get(A.STARTUP) is not None else "-",
                      note + (" (confirm)" if ua.get(A.CONFIRM) else ""))
    console.print(table)
    if limit is not None and len(trials) > limit:
        console.print(f"[dim]({len(trials) - limit} earlier trials hidden; --all shows them)[/]")
    counts = {s.name.lower(): sum(1 for t in trials if t.state == s) for s in TrialState}
    console.print(", ".join(f"{v} {k}" for k, v in counts.items() if v))
    started = min((t.datetime_start for t in trials if t.datetime_start), default=None)
    if started:
        console.print(f"[dim]first trial started {started:%Y-%m-%d %H:%M}; "
                      f"now {dt.datetime.now():%H:%M}[/]")
    v = R.verdict(study, spec.benchmark.objective, trials)
    for line in _best_lines(v.best, v.baseline):
        console.print(line)
    if v.confirmed:
        console.print("[dim](the winner of the confirm phase, on its fresh interleaved runs)[/]")
    if study.user_attrs.get(A.SIMULATED):
        console.print(SIM_NOTE)
