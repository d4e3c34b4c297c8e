"""``sweeper report``: the campaign as one self-contained HTML page (figures embedded, opens
from disk with no server), the figures as PNGs, and ``trials.csv``.

Everything comes from the storage: the trials table (results/table.py), the verdict
(results/headline.py, the same words as ``status``), and the figures (results/figures.py).
A figure the study has nothing for is listed, with why, in one "Not drawn" section; one
that does not apply (the traffic trade-off of a one-level study) is left out.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

import sweeper.results.verdict as R
from sweeper.errors import InputError
from sweeper.results import attrs as A
from sweeper.results import figures
from sweeper.results.confirmed import confirmed_for
from sweeper.results.headline import SIM_NOTE, Headline
from sweeper.results.hosts import of_group
from sweeper.results.kind import TrialKind, kind_of
from sweeper.results.levels import pareto_front
from sweeper.results.storage import load_existing, report_dir
from sweeper.results.table import trials_frame
from sweeper.results.why import why_it_wins

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from sweeper.study import StudySpec

FIGURES = ("history", "traffic", "landscape", "acceptance", "failures", "importance",
           "leaders")


@dataclass
class Written:
    directory: Path
    html: Path
    csv: Path
    pngs: dict[str, Path] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # figure -> why it is absent
    lines: list[str] = field(default_factory=list)


def write_report(spec: StudySpec, storage_url: str, output: Path | None,
                 group: str | None = None) -> Written:
    """The report of ``spec``'s study; ``group``: of that group of hosts' trials alone (a
    study measured on several kinds of hardware needs it: its figures and winner would
    otherwise mix them), written by default to a folder of its own."""
    if output is not None and output.exists() and not output.is_dir():
        raise InputError(f"--output {output}: a file; the report is a folder (report.html, "
                         "its figures, trials.csv): give a folder's path")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = load_existing(storage_url, spec.name, str(spec.path), spec.storage)
    trials = of_group(spec, study.get_trials(deepcopy=False), group)
    out_dir = output or report_dir(storage_url, spec.name)
    if output is None and group is not None:
        out_dir = out_dir.with_name(f"{out_dir.name}-{re.sub(r'[^A-Za-z0-9_.-]+', '-', group)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    knobs = list(spec.space)
    df = trials_frame(trials, knobs)
    written = Written(out_dir, out_dir / "report.html", out_dir / "trials.csv")
    df.to_csv(written.csv, index=False)

    headline = Headline.of(study, spec.benchmark.aggregate, trials)
    results = R.config_results(trials)
    base = headline.baseline  # the verdict's baseline, as status and export show it
    drawn = {
        "history": (figures.history(df, base.stats.mean if base else None,
                                    _best_so_far(trials, spec.benchmark.aggregate)),
                    "no trial has been measured or has failed yet"),
        "traffic": (_traffic(results, headline),
                    # one level: nothing to trade off, no section at all
                    "" if len(headline.goal.levels) < 2 else
                    "no configuration was measured at every level"),
        "landscape": (figures.landscape(df), "no speculative configuration was measured"),
        "acceptance": (figures.acceptance(df), "no accept length was measured"),
        "failures": (figures.failure_map(df, knobs), "no configuration failed"),
        "importance": (figures.importance(_importance(trials, spec, knobs)),
                       "too few measured configurations to rank the knobs (needs 3)"),
        "leaders": (figures.leaders(_leader_rows(results, base, spec.benchmark.aggregate)),
                    "no baseline and speculative configuration to compare"),
    }
    images: dict[str, str] = {}
    for name, (fig, why) in drawn.items():
        if fig is None:
            if why:
                written.missing[name] = why
            continue
        png = out_dir / f"{name}.png"
        images[name] = _save(fig, png)
        written.pngs[name] = png
    default = _start_from_result(trials, results)
    explained = why_it_wins(headline.best, default, base)
    simulated = bool(study.user_attrs.get(A.SIMULATED))
    written.html.write_text(_page(spec, study, trials, group, headline, df, images,
                                  written.missing, explained, simulated), encoding="utf-8")
    written.lines = [f"wrote {written.html} ({len(images)} figures; trials.csv, PNGs beside it)"]
    written.lines += [f"  no {name} figure: {why}" for name, why in written.missing.items()]
    return written


def _save(fig: Figure, path: Path) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    data = buf.getvalue()
    path.write_bytes(data)
    return base64.b64encode(data).decode()


def _best_so_far(trials: list[FrozenTrial], objective: str) -> list[tuple[int, float]]:
    """After each measured sweep trial, the pooled mean of the configuration the verdict
    would have named then (confirm runs excluded: they come after the sweep)."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and kind_of(t) != TrialKind.CONFIRM]
    out: list[tuple[int, float]] = []
    for i, t in enumerate(done):
        top = R.ranked(R.config_results(done[: i + 1]), objective)
        if top:
            out.append((t.number, top[0].objective(objective)))
    return out


def _leader_rows(results: list[R.ConfigResult], base: R.ConfigResult | None,
                 objective: str) -> list[tuple[str, float, float, float]]:
    if base is None:
        return []
    rows = []
    for r in [r for r in R.ranked(results, objective) if not r.is_baseline][:8]:
        ratio = R.speedup_over(r, base)
        if ratio is not None:
            rows.append((R.short_params(r.effective), ratio.ratio, ratio.low, ratio.high))
    return rows


def _traffic(results: list[R.ConfigResult], headline: Headline) -> Figure | None:
    """Per-level points, winners and the Pareto front, as the verdict decided them."""
    goal = headline.goal
    if len(goal.levels) < 2:
        return None
    points = [(R.short_params(r.effective), c, lv.stats.mean, lv.total_stats.mean)
              for r in results for c, lv in sorted(r.levels.items())
              if lv.per_request and lv.total]
    winners = {c: R.short_params(r.effective) for c, r in headline.per_level.items()}
    lo, hi = min(goal.levels), max(goal.levels)
    front = [(R.short_params(r.effective), r.levels[lo].stats.mean,
              r.levels[hi].total_stats.mean)
             for r in (headline.front or pareto_front(results, goal))]
    return figures.traffic(points, winners, front, (lo, hi))


def _levels_table(headline: Headline) -> str:
    """The winner at each concurrency level, with its latencies (the status lines' data)."""
    rows = []
    for c in headline.goal.levels:
        win = headline.per_level.get(c)
        if win is None:
            continue
        lv = win.levels[c]
        rows.append({"concurrency": c, "winner": R.short_params(win.effective),
                     "tok/s per request": lv.stats.mean,
                     "95% CI": f"{lv.stats.ci_low:.1f}–{lv.stats.ci_high:.1f}",
                     "total tok/s": lv.total_stats.mean,
                     "TTFT ms": None if lv.ttft is None else lv.ttft * 1000,
                     "ITL ms": None if lv.itl is None else lv.itl * 1000,
                     "accept length": lv.accept_length,
                     "trials": ", ".join(map(str, win.trials))})
    return (f'<h2 id="winner-per-level">Winner per level</h2><p>Tuned for '
            f"{html.escape(headline.goal.describe())}.</p>" + _table(pd.DataFrame(rows)))


def _start_from_result(trials: list[FrozenTrial],
                       results: list[R.ConfigResult]) -> R.ConfigResult | None:
    first = next((t for t in trials if t.user_attrs.get(A.ROLE) == A.START_FROM
                  and t.state == TrialState.COMPLETE), None)
    if first is None:
        return None
    return next((r for r in results if r.config_id == first.user_attrs.get(A.CONFIG_ID)), None)


def _importance(trials: list[FrozenTrial], spec: StudySpec, knobs: list[str]) -> dict[str, float]:
    """fANOVA over the physical knobs: the effective configurations (one name per knob,
    the derived draft tokens included) rebuilt as an in-memory study."""
    from optuna.distributions import CategoricalDistribution

    done = [t for t in trials if t.state == TrialState.COMPLETE and t.values
            and t.user_attrs.get(A.EFFECTIVE)
            and kind_of(t) not in (TrialKind.CONFIRM, TrialKind.REPEAT)]
    if len({t.user_attrs.get(A.CONFIG_ID) for t in done}) < 3:
        return {}
    values: dict[str, set[str]] = {k: set() for k in knobs}
    for t in done:
        for k in knobs:
            values[k].add(str(t.user_attrs[A.EFFECTIVE].get(k)))
    varied = [k for k in knobs if len(values[k]) > 1]
    if not varied:
        return {}
    dists: dict[str, optuna.distributions.BaseDistribution] = {
        k: CategoricalDistribution(sorted(values[k])) for k in varied}
    study = optuna.create_study(direction="maximize")
    for t in done:
        eff = t.user_attrs[A.EFFECTIVE]
        study.add_trial(optuna.trial.create_trial(
            params={k: str(eff.get(k)) for k in varied}, distributions=dists,
            value=t.values[0]))  # pareto: its first objective (tok/s per request)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            scores = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
        except (RuntimeError, ValueError):
            return {}
    return {k: float(v) for k, v in scores.items() if not math.isnan(v)}


def _trials_shown(df: pd.DataFrame, knobs: list[str]) -> pd.DataFrame:
    """The trials table as the page shows it: the figures first (they are what a reader
    compares; on a narrow screen the knobs scroll, not tok/s), knobs by their short
    names, the baseline's knob cells empty and its role saying why."""
    knobs = [k for k in knobs if k in df]
    shown = df[["number", "state", "role", "tok_s_mean", "tok_s_ci_low", "tok_s_ci_high",
                "accept_length", "runs", *knobs, "failure", "startup_s"]].copy()
    for col in knobs:  # a nullable integer column renders its gaps as <NA>: text instead
        shown[col] = [("" if pd.isna(v) else str(v)) for v in shown[col]]
    shown["role"] = shown["role"].replace({A.BASELINE: "baseline (no speculation)"})
    shown["failure"] = shown["failure"].fillna("")
    return shown.rename(columns={
        "number": "#", "tok_s_mean": "tok/s", "tok_s_ci_low": "CI low",
        "tok_s_ci_high": "CI high", "accept_length": "accept", "startup_s": "start s",
        **{k: k.removeprefix("speculative-").removeprefix("env.") for k in knobs}})


def _confirm_rows(confirmed: dict[str, Any] | None,
                  trials: list[FrozenTrial]) -> list[dict[str, Any]]:
    """A row per configuration the last confirm phase measured (its contenders and the
    baseline), from its own trials: the stored verdict names them by configuration and
    trial numbers (run/confirm.py); the runs are read from those trials."""
    if not confirmed:
        return []
    numbers = {n for ns in (confirmed.get("trials") or {}).values() for n in ns}
    fresh = R.config_results([t for t in trials if t.user_attrs.get(A.CONFIRM)
                              and t.number in numbers])
    base = R.baseline_result(fresh)
    out = R.cannot_win(confirmed)
    rows = []
    for r in sorted(fresh, key=lambda r: r.stats.mean, reverse=True):
        st = r.stats
        mark = " (winner)" if r.config_id == confirmed.get("winner") else ""
        rows.append({
            "configuration": R.short_params(r.effective) + mark, "runs": st.n,
            "mean tok/s": st.mean, "95% CI": "-" if st.n < 2 or math.isnan(st.ci_low) else
            f"{st.ci_low:.1f}–{st.ci_high:.1f}",
            "vs baseline": "base" if r.is_baseline else R.fmt_ratio(R.speedup_over(r, base)),
            "lossless": f"{out[r.config_id]}: cannot win" if r.config_id in out else
            "-" if r.is_baseline else "same outputs",
            "trials": ", ".join(map(str, r.trials))})
    # a configuration whose every fresh start failed has no runs to show: its failed trial
    # says what it was
    shown = {r.config_id for r in fresh}
    for t in trials:
        cid = t.user_attrs.get(A.CONFIG_ID)
        if t.user_attrs.get(A.CONFIRM) and cid in out and cid not in shown:
            shown.add(cid)
            rows.append({"configuration": R.short_params(t.user_attrs.get(A.EFFECTIVE, t.params)),
                         "runs": 0, "mean tok/s": math.nan, "95% CI": "-", "vs baseline": "-",
                         "lossless": f"{out[cid]}: cannot win", "trials": str(t.number)})
    return rows


def _table(df: pd.DataFrame) -> str:
    return '<div class="scroll">' + df.to_html(
        index=False, na_rep="", border=0, classes="data",
        float_format=lambda x: f"{x:.2f}") + "</div>"


def _page(spec: StudySpec, study: optuna.Study, trials: list[FrozenTrial], group: str | None,
          headline: Headline, df: pd.DataFrame,
          images: dict[str, str], missing: dict[str, str], why: dict[str, Any] | None,
          simulated: bool) -> str:
    esc = html.escape
    of = f" (group {group})" if group else ""
    parts = [f"<h1>sweeper report: {esc(spec.name + of)}</h1>"]
    if simulated:
        parts.append(f'<p class="sim">{esc(SIM_NOTE)}</p>')
    parts.append("<h2>The winner</h2><ul>" +
                 "".join(f"<li>{esc(line)}</li>" for line in headline.lines()) + "</ul>")
    if len(headline.goal.levels) > 1:
        parts.append(_levels_table(headline))
    if why is not None:
        parts.append(f"<h2>Why it wins</h2><p>{esc(why['sentence'])}</p>"
                     + _table(pd.DataFrame(why["rows"])))
    titles = {"history": "Optimization history",
              "traffic": "tok/s per request against total tok/s, per concurrency level",
              "landscape": "tok/s across the space",
              "acceptance": "Accept length", "failures": "Failures",
              "importance": "Which knobs matter", "leaders": "Leaders against the baseline"}
    for name in FIGURES:
        if name in images:
            parts.append(f"<h2>{titles[name]}</h2>"
                         f'<img id="fig-{name}" alt="{titles[name]}" '
                         f'src="data:image/png;base64,{images[name]}">')
    if missing:  # one short section, each figure that could not be drawn and why
        parts.append("<h2>Not drawn</h2><ul>" + "".join(
            f'<li class="missing" id="missing-{name}">Not drawn: {titles[name]}: '
            f"{esc(why)}.</li>" for name, why in missing.items()) + "</ul>")
    confirm_rows = _confirm_rows(confirmed_for(study, trials), trials)
    if confirm_rows:
        parts.append("<h2>Confirm phase (fresh, interleaved runs)</h2>"
                     + _table(pd.DataFrame(confirm_rows)))
    parts.append("<h2>Trials</h2>" + _table(_trials_shown(df, list(spec.space))))
    body = "\n".join(parts)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sweeper report: {esc(spec.name)}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto;
       color: #222; line-height: 1.45; }}
h1 {{ font-size: 1.6em; }} h2 {{ margin-top: 1.6em; border-bottom: 1px solid #ddd; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
table.data {{ border-collapse: collapse; font-size: 0.85em; }}
table.data td, table.data th {{ padding: 2px 8px; border-bottom: 1px solid #eee; }}
.scroll {{ overflow-x: auto; }}
.sim {{ background: #fff6d6; padding: 0.5em; }} .missing {{ color: #777; }}
@media print {{ body {{ max-width: none; }} }}
</style></head><body>
{body}
</body></html>
"""
