"""The winner, told the same way everywhere a user looks.

``results/verdict.py`` decides the winner; this module only words it: the end-of-sweep
summary, ``sweeper status``, the live output's "best" label, the export's header and the
dashboard's study note all come from one ``Headline``, so they cannot disagree.
"""

from __future__ import annotations

import math
import shlex
import warnings
from dataclasses import dataclass, field

import optuna
from optuna.trial import FrozenTrial, TrialState

import sweeper.results.verdict as R
from sweeper.measure.stats import Ratio, noise_measured, speedup
from sweeper.results import attrs as A
from sweeper.results.confirmed import confirmed_for
from sweeper.results.dashnote import save_note
from sweeper.results.simplest import Simplest, simplest_tied
from sweeper.results.simplest import describe as describe_simplest
from sweeper.study.objective import Objective

SIM_NOTE = ("Figures come from the built-in SIMULATED SGLang server (a test double), "
            "not from real hardware.")


def _trials_text(numbers: list[int]) -> str:
    if len(numbers) == 1:
        return f"trial {numbers[0]}"
    return f"trials {', '.join(map(str, numbers))} pooled"


@dataclass(frozen=True)
class Headline:
    """The verdict in words: the winner, its interval, its runs and trials, its speedup."""

    best: R.ConfigResult | None
    baseline: R.ConfigResult | None
    confirmed: bool
    goal: Objective = field(default_factory=lambda: Objective("at", (1,), at=1))
    per_level: dict[int, R.ConfigResult] = field(default_factory=dict)
    front: list[R.ConfigResult] = field(default_factory=list)
    sure: float | None = None
    start_note: str | None = None  # the between-start spread measured (Verdict.start_text)
    # the winner with every run of it pooled (sweep, racing and confirm runs): what the
    # live output showed, and what "How sure" is computed on; after a confirm phase the
    # figure above is its fresh runs only, so the two can differ
    pooled: R.ConfigResult | None = None
    # the simplest configuration tied with the winner, when simpler (results/simplest.py)
    simplest: Simplest | None = None
    # a speculative configuration was measured: else the baseline "won" by default
    rivals: bool = True
    # configurations to compare, each one run on one start: no noise to state a chance on
    noise_unmeasured: bool = False
    # how many other configurations "How sure" weighs the winner against
    compared: int = 0

    @classmethod
    def of(cls, study: optuna.Study, objective: str = "mean",
           trials: list[FrozenTrial] | None = None) -> Headline:
        trials = trials if trials is not None else study.get_trials(deepcopy=False)
        v = R.verdict(study, objective, trials)
        pooled = None
        results = R.config_results(trials) if v.best is not None else []
        if v.best is not None:
            pooled = next((r for r in results if r.config_id == v.best.config_id), None)
        return cls(v.best, v.baseline, v.confirmed, goal=v.goal, per_level=v.per_level,
                   front=v.front, sure=v.sure, start_note=v.start_text(), pooled=pooled,
                   compared=v.compared,
                   simplest=_simplest(study, trials, v),
                   rivals=any(not r.is_baseline for r in results),
                   noise_unmeasured=len(results) > 1 and not noise_measured(
                       [r.by_start() for r in results]))

    def how_sure(self) -> str | None:
        """``How sure: 87% that none of the 12 other configurations measured is truly more
        than 1% faster (on every run of each, ...)``: the chance the pick is right to within 1%,
        not a claim that the configurations are tied."""
        if self.noise_unmeasured and self.best is not None:
            return ("How sure: not stated: every configuration has one run on one server "
                    "start, so the run-to-run noise is not measured yet (benchmark.runs of 2 "
                    "or more measures it, as does measuring a configuration again)")
        if self.sure is None or self.best is None:
            return None
        # verdict._sure: every configuration measured, all its runs pooled, whether or
        # not a confirm phase ran
        on = "every run of each pooled, sweep and confirm phase" if self.confirmed else \
            "every run of each pooled"
        # the count: a high figure against one or two rivals says little about the space
        claim = "the one other configuration measured is not" if self.compared == 1 else \
            f"none of the {self.compared} other configurations measured is"
        return (f"How sure: {self.sure:.0%} that {claim} truly more than {R.SURE_TOL:.0%} "
                f"faster ({on}, start by start: the spread between server starts included)")

    def pooled_note(self) -> str | None:
        """After a confirm phase: which runs the winner's figure rests on. All its starts
        when they agree (verdict.py); else its fresh runs, and then the figure on all its
        runs, which the live output showed, is said too, so the change is not silent."""
        if not self.confirmed or self.pooled is None or self.best is None:
            return None
        p = self.pooled.stats
        if p.n == self.best.stats.n:
            return "its figure pools every start of it, the sweep's and the confirm phase's"
        return (f"its figure is the confirm phase's fresh runs only; all {p.n} runs of it, "
                f"sweep included, give {R.fmt_tok_s(p)} {self.unit}, the figure shown live")

    @property
    def unit(self) -> str:
        """What the winner's figure measures (``tok/s`` for one stream)."""
        return self.goal.metric_names()[0]

    @property
    def measured(self) -> bool:
        return self.best is not None or bool(self.front) or bool(self.per_level)

    def level_lines(self) -> list[str]:
        """The winner at each concurrency level (a study of several levels)."""
        if len(self.goal.levels) < 2:
            return []
        out = []
        for level in self.goal.levels:
            win = self.per_level.get(level)
            if win is None:
                out.append(f"At concurrency {level}: nothing measured yet")
                continue
            lv = win.levels[level]
            base = self.baseline.levels.get(level) if self.baseline is not None else None
            vs = ""
            if base is not None and not win.is_baseline and base.per_request:
                vs = f"; {R.fmt_ratio(speedup(lv.per_request, base.per_request))} vs baseline"
            lat = "".join(f", {name} {v * 1000:.1f} ms" for name, v in
                          (("TTFT", lv.ttft), ("ITL", lv.itl)) if v is not None)
            out.append(f"At concurrency {level}: {R.short_params(win.effective)} — "
                       f"{R.fmt_tok_s(lv.stats)} tok/s per request, "
                       f"{lv.total_stats.mean:.1f} total tok/s{lat} "
                       f"({_trials_text(win.trials)}{vs})")
        return out

    def front_lines(self) -> list[str]:
        lo, hi = min(self.goal.levels), max(self.goal.levels)
        out = [f"Pareto front of {self.goal.describe()}: {len(self.front)} configuration"
               f"{'s' if len(self.front) != 1 else ''} (no other is faster on both)"]
        for r in self.front:
            a, b = r.levels[lo], r.levels[hi]
            out.append(f"  {R.short_params(r.effective)} — {a.stats.mean:.1f} tok/s per "
                       f"request @{lo}, {b.total_stats.mean:.1f} total tok/s @{hi}")
        return out

    @property
    def speedup(self) -> Ratio | None:
        if self.best is None or self.best.is_baseline:
            return None
        return R.speedup_over(self.best, self.baseline)

    @property
    def label(self) -> str:
        return R.short_params(self.best.effective) if self.best else "-"

    def figure(self) -> str:
        """``535.6 tok/s (95% CI 505.4–565.8, 12 runs; trials 12, 30 pooled)``"""
        assert self.best is not None
        st = self.best.stats
        ci = "" if st.n < 2 or math.isnan(st.ci_low) else \
            f"95% CI {st.ci_low:.1f}–{st.ci_high:.1f}, "
        return (f"{st.mean:.1f} {self.unit} ({ci}{st.n} run{'s' if st.n != 1 else ''}; "
                f"{_trials_text(self.best.trials)})")

    def lines(self) -> list[str]:
        """The summary a terminal shows (status, end of a sweep)."""
        if self.goal.multi:
            if not self.front:
                return ["No configuration has completed yet."]
            return [*self.front_lines(), "Winner per level:", *self.level_lines(),
                    f"(export one with: --at LEVEL, one of {list(self.goal.levels)})"]
        if self.best is None:
            return ["No configuration has completed yet."]
        acc = f", accept length {self.best.accept_length:.2f}" \
            if self.best.accept_length else ""
        out = [f"Best: {self.label} — {self.figure()}{acc}"]
        if self.best.is_baseline and not self.rivals:
            out.append("No speculative configuration has been measured yet.")
        elif self.best.is_baseline:
            out.append("No speculative configuration beat the baseline (no speculation).")
        elif self.baseline is not None:
            ratio = self.speedup
            if ratio is not None and self.noise_unmeasured:  # its interval: the prior alone
                ratio = Ratio(ratio.ratio, math.nan, math.nan)
            out.append(f"Speedup over baseline ({self.baseline.stats.mean:.1f} tok/s): "
                       f"{R.fmt_ratio(ratio)}")
        if self.confirmed:
            note = self.pooled_note()
            out.append(f"(the winner of the confirm phase{'; ' + note if note else ''})")
        sure = self.how_sure()
        if sure:
            out.append(sure)
        if self.simplest is not None:
            out.append(describe_simplest(self.simplest))
        if self.start_note:
            out.append(self.start_note[0].upper() + self.start_note[1:] + ".")
        if len(self.goal.levels) > 1:
            out[0] = f"Best for {self.goal.describe()}: {out[0].removeprefix('Best: ')}"
            out += ["Winner per level:", *self.level_lines()]
        return out

    def one_line(self) -> str:
        """The dashboard's study attribute: winner, figure, speedup, how it was decided."""
        levels = ""
        if len(self.goal.levels) > 1 and self.per_level:
            levels = "; per level: " + ", ".join(
                f"@{c} {R.short_params(r.effective)}" for c, r in self.per_level.items())
        if self.goal.multi:
            if not self.front:
                return "no configuration has completed yet"
            n = len(self.front)
            return f"Pareto front of {n} configuration{'' if n == 1 else 's'}{levels}"
        if self.best is None:
            return "no configuration has completed yet"
        vs = f"; {R.fmt_ratio(self.speedup)} vs baseline" if self.speedup else ""
        how = "; confirmed on fresh runs" if self.confirmed else ""
        sure = f"; {self.sure:.0%} sure within {R.SURE_TOL:.0%}" if self.sure is not None else ""
        return f"{self.label} — {self.figure()}{vs}{how}{sure}{levels}"

    def short(self) -> str:
        """The live output's label: ``best 535.6 ± 30.2 (trials 12, 30 pooled, +58.9%)``."""
        if self.goal.multi:
            return f"Pareto front: {len(self.front)}" if self.front else ""
        if self.best is None:
            return ""
        st = self.best.stats
        vs = f", {R.fmt_ratio(self.speedup).split(' ')[0]} vs baseline" if self.speedup else ""
        return f"best {R.fmt_tok_s(st)} ({_trials_text(self.best.trials)}{vs})"

    def markdown(self, study: optuna.Study, simulated: bool) -> str:
        """The dashboard's study note: the winner first, then why the "Best Trial" card
        may name another trial."""
        name = study.study_name
        if self.goal.multi and self.front:
            n = len(self.front)
            parts = [f"## Pareto front: {n} configuration{'' if n == 1 else 's'}", "",
                     "The dashboard's Pareto-front plot shows them against every trial.", "",
                     *[f"- {line.strip()}" for line in self.front_lines()[1:]], "",
                     "### Winner per level", "", *[f"- {x}" for x in self.level_lines()], "",
                     "Export one level's winner: `" + export_hint(study).replace(
                         " -o best.yaml", " --at LEVEL -o best.yaml") + "`"]
            if simulated:
                parts += ["", f"*{SIM_NOTE}*"]
            return "\n".join(parts)
        if self.best is None:
            return f"## {name}\n\nNo configuration has completed yet."
        parts = [f"## Winner: {self.label}", "",
                 f"**{self.figure()}**" + (f" — **{R.fmt_ratio(self.speedup)}** over the "
                                           f"baseline ({self.baseline.stats.mean:.1f} tok/s, "
                                           "no speculation)"
                                           if self.speedup and self.baseline else "")]
        if self.confirmed:
            note = self.pooled_note()
            parts += ["", "Decided by the confirm phase on fresh, interleaved runs"
                      + (f"; {note}." if note else ".")]
        if self.how_sure():
            parts += ["", str(self.how_sure())]
        if self.simplest is not None:
            parts += ["", describe_simplest(self.simplest)]
        if len(self.goal.levels) > 1:
            parts += ["", f"Tuned for {self.goal.describe()}.", "", "### Winner per level", "",
                      *[f"- {x}" for x in self.level_lines()]]
        export = export_hint(study)
        parts += ["", f"Export it: `{export}`"]
        if len(self.goal.levels) > 1:
            at_level = export.replace(" -o best.yaml", " --at LEVEL -o best.yaml")
            parts += ["", f"One level's winner: `{at_level}`"]
        single = _best_single(study)
        if single is not None and single.number not in self.best.trials:
            parts += ["", f"The single highest measurement is trial {single.number} "
                          f"({single.value:.1f} {self.unit}; Optuna's own *Best Trial*). The "
                          "winner above pools every measurement of its configuration (and, "
                          "after a confirm phase, its fresh runs), so one lucky run cannot "
                          "win; `sweeper dashboard` shows the winner's best trial in the "
                          "*Best Trial* card."]
        if simulated:
            parts += ["", f"*{SIM_NOTE}*"]
        return "\n".join(parts)


def _simplest(study: optuna.Study, trials: list[FrozenTrial],
              v: R.Verdict) -> Simplest | None:
    """The simplest configuration tied with the winner, on every run of each (the runs
    "How sure" is computed on: a confirm phase with racing measures only the winner and
    the baseline); one winner per study only."""
    if v.best is None or v.goal.multi or len(v.goal.levels) > 1:
        return None
    start = next((t for t in trials if t.user_attrs.get(A.ROLE) == A.START_FROM
                  and t.user_attrs.get(A.EFFECTIVE)), None)
    defaults = dict(start.user_attrs[A.EFFECTIVE]) if start is not None else {}
    lossy = set(R.cannot_win(confirmed_for(study, trials)))
    pool = [r for r in R.config_results(trials) if r.config_id not in lossy]
    best = next((r for r in pool if r.config_id == v.best.config_id), v.best)
    return simplest_tied(best, pool, defaults)


def _best_single(study: optuna.Study) -> FrozenTrial | None:
    if len(study.directions) > 1:
        return None  # several objectives: no single highest measurement
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.value is not None]
    return max(done, key=lambda t: t.value or 0.0, default=None)


def mark_best(study: optuna.Study, objective: str = "mean") -> None:
    """Keep the dashboard's study page in step with the verdict: the metric's name and a
    note naming the winner. Called after each measured trial and after a confirm phase."""
    names = R.study_goal(study).metric_names()
    if study.metric_names != names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # flagged experimental since Optuna 3.2
            study.set_metric_names(names)
    simulated = bool(study.user_attrs.get(A.SIMULATED))
    from sweeper.results.hosts import group_headlines  # it imports this module

    groups = group_headlines(study, objective, study.get_trials(deepcopy=False))
    if groups:  # hosts of different hardware: a winner per group, none across them
        study.set_user_attr(A.WINNER, "; ".join(f"group {g}: {h.one_line()}"
                                                for g, h in groups))
        save_note(study, groups_markdown(study, groups, simulated))
        return
    headline = Headline.of(study, objective)
    study.set_user_attr(A.WINNER, headline.one_line())
    save_note(study, headline.markdown(study, simulated))


def export_hint(study: optuna.Study) -> str:
    """The command that exports this study: the one optimize was given (study path,
    storage; cli/common.export_command), else by the study's name."""
    return str(study.user_attrs.get(A.EXPORT)
               or f"sweeper export --study {study.study_name} -o best.yaml")


def group_export(export: str, group: str) -> str:
    """``export`` (the command that exports this study) for one group: ``--group`` before
    its ``-o`` (the summary's and the dashboard's note's hint alike)."""
    if " -o " in export:
        return export.replace(" -o ", f" --group {group} -o ", 1)
    return f"{export} --group {group}"


def confirm_hint(study: optuna.Study, group: str | None) -> str:
    """``sweeper confirm`` for this study as export_hint reads it back (its path, its
    storage), with ``--group`` on a study of several groups, where ``sweeper confirm``
    alone takes the first host's group."""
    words = shlex.split(export_hint(study))[2:]
    if words[-2:] == ["-o", "best.yaml"]:
        words = words[:-2]
    return shlex.join(["sweeper", "confirm", *words, *(["--group", group] if group else [])])


def groups_markdown(study: optuna.Study, groups: list[tuple[str, Headline]],
                    simulated: bool) -> str:
    """The dashboard's study note when hosts of several kinds of hardware measured: each
    group's winner and how to export it (Optuna's *Best Trial* card ranks across them)."""
    export = export_hint(study)
    parts = [f"## Measured on {len(groups)} groups of hardware", "",
             "Results are compared only within a group, each with its own winner. Optuna's "
             "*Best Trial* card ranks every trial as one: it may name another group's.", ""]
    for g, h in groups:
        parts += [f"### group {g}", "", *[f"- {line.strip()}" for line in h.lines()], "",
                  f"Export it: `{group_export(export, shlex.quote(g))}`", ""]
    if simulated:
        parts.append(f"*{SIM_NOTE}*")
    return "\n".join(parts)
