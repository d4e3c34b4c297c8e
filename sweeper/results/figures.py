"""The report's figures, drawn with matplotlib (Agg: no display, no browser needed).

Each function takes plain tables (pandas) and returns a Figure, or None when the study
has nothing to draw for it (the report then says what is missing). Colours come from a
colour-blind safe palette; fonts are sized for a laptop screen and for print.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, never a window

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
)

from sweeper.study import DRAFT, STEPS, TOPK  # noqa: E402

PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000"]
FAILURE_COLOURS = {"oom": "#D55E00", "nccl": "#CC79A7", "hang": "#E69F00",
                   "invalid_args": "#000000", "crash": "#0072B2",
                   "startup_timeout": "#56B4E9", "server_error": "#009E73"}
plt.rcParams.update({"font.size": 11, "axes.titlesize": 13, "axes.labelsize": 11,
                     "legend.fontsize": 9, "figure.dpi": 110, "axes.grid": True,
                     "grid.alpha": 0.3})


def _measured(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["state"] == "complete") & df["tok_s_mean"].notna()]


def history(df: pd.DataFrame, baseline: float | None,
            best_so_far: Sequence[tuple[int, float]]) -> Figure | None:
    """Every measured trial with its interval, the best configuration so far (its pooled
    mean, as the verdict would have named it then), the baseline, failures by class."""
    done = _measured(df)
    if done.empty and not (df["state"] == "pruned").any():
        return None
    fig, ax = plt.subplots(figsize=(9, 5.2))
    sweep = done[~done["confirm"]]
    conf = done[done["confirm"]]
    for part, colour, label in ((sweep, PALETTE[0], "measured trial (mean, 95% CI)"),
                                (conf, PALETTE[2], "confirm phase")):
        if part.empty:
            continue
        low = (part["tok_s_mean"] - part["tok_s_ci_low"]).fillna(0).clip(lower=0)
        high = (part["tok_s_ci_high"] - part["tok_s_mean"]).fillna(0).clip(lower=0)
        ax.errorbar(part["number"], part["tok_s_mean"], yerr=[low, high], fmt="o", ms=4,
                    color=colour, ecolor=colour, alpha=0.8, capsize=2, label=label)
    if best_so_far:
        xs, ys = zip(*best_so_far, strict=True)
        ax.step(xs, ys, where="post", color=PALETTE[1], lw=2,
                label="best configuration so far (pooled mean)")
    if baseline is not None:
        ax.axhline(baseline, color="#555555", ls="--", lw=1.5,
                   label=f"baseline, no speculation ({baseline:.1f})")
    failed = df[df["state"] == "pruned"]
    if not failed.empty:
        floor = float(done["tok_s_ci_low"].fillna(done["tok_s_mean"]).min()) * 0.9 \
            if not done.empty else 0.0
        for kind, rows in failed.groupby(failed["failure"].fillna("crash")):
            skipped = rows["skipped"]
            ax.scatter(rows["number"][~skipped], [floor] * int((~skipped).sum()), marker="x",
                       s=40, color=FAILURE_COLOURS.get(str(kind), "#777777"),
                       label=f"failed: {kind}", clip_on=False, zorder=3)
            if skipped.any():
                ax.scatter(rows["number"][skipped], [floor] * int(skipped.sum()), marker="|",
                           s=60, color=FAILURE_COLOURS.get(str(kind), "#777777"),
                           label=f"skipped (predicted {kind})", clip_on=False, zorder=3)
    ax.set_xlabel("trial")
    ax.set_ylabel("tok/s")
    ax.set_title("Optimization history (failures on the bottom line)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=3, frameon=False)
    fig.tight_layout()
    return fig


def landscape(df: pd.DataFrame) -> Figure | None:
    """tok/s against steps, one panel per topk, coloured by draft tokens."""
    done = _measured(df)
    if STEPS not in done or done[STEPS].dropna().empty:
        return None
    done = done[done[STEPS].notna()]
    topks = sorted(done[TOPK].dropna().unique()) if TOPK in done else [None]
    fig, axes = plt.subplots(1, len(topks), figsize=(4 * len(topks) + 1, 4.2), squeeze=False,
                             sharey=True, sharex=True, layout="constrained")
    cmap = plt.get_cmap("viridis")
    drafts = done[DRAFT].dropna() if DRAFT in done else pd.Series(dtype=float)
    lo, hi = (drafts.min(), drafts.max()) if not drafts.empty else (0, 1)
    for ax, k in zip(axes[0], topks, strict=True):
        part = done if k is None else done[done[TOPK] == k]
        colours = [cmap((d - lo) / max(hi - lo, 1)) for d in part.get(DRAFT, [0] * len(part))]
        ax.scatter(part[STEPS], part["tok_s_mean"], c=colours, s=36, edgecolors="k",
                   linewidths=0.3)
        ax.set_title(f"topk {int(k)}" if k is not None else "all")
        ax.set_xlabel("speculative steps")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0][0].set_ylabel("tok/s (trial mean)")
    if not drafts.empty:
        sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(lo, hi))
        fig.colorbar(sm, ax=axes[0].tolist(), label="draft tokens")
    fig.suptitle("tok/s against steps, topk and draft tokens")
    return fig


def acceptance(df: pd.DataFrame,
               predicted: dict[int, list[tuple[int, float]]] | None = None) -> Figure | None:
    """Measured accept length against steps per topk (and a model's prediction)."""
    done = _measured(df)
    if STEPS not in done or done["accept_length"].dropna().empty:
        return None
    done = done[done["accept_length"].notna() & done[STEPS].notna()]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, (k, part) in enumerate(done.groupby(TOPK) if TOPK in done else [(None, done)]):
        colour = PALETTE[i % len(PALETTE)]
        ax.scatter(part[STEPS], part["accept_length"], color=colour, s=30,
                   label=f"topk {int(k)} measured" if k is not None else "measured")
        if predicted and k is not None and int(k) in predicted:
            xs, ys = zip(*sorted(predicted[int(k)]), strict=True)
            ax.plot(xs, ys, color=colour, lw=1.5, label=f"topk {int(k)} model")
    ax.set_xlabel("speculative steps")
    ax.set_ylabel("accept length (tokens per verify)")
    ax.set_title("Accept length")
    ax.legend()
    fig.tight_layout()
    return fig


def failure_map(df: pd.DataFrame, knobs: Sequence[str]) -> Figure | None:
    """Per knob and value: how many restarts measured, and how many failed by class."""
    ran = df[df["state"].isin(["complete", "pruned"]) & ~df["confirm"]]
    if ran.empty or not (ran["state"] == "pruned").any():
        return None
    outcome = ran["failure"].where(ran["state"] == "pruned", "measured").fillna("crash")
    outcome = outcome.where(~ran["skipped"], outcome + " (skipped)")
    knobs = [k for k in knobs if k in ran and ran[k].notna().any()]
    if not knobs:
        return None
    cols = min(3, len(knobs))
    rows = math.ceil(len(knobs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    kinds = ["measured", *sorted(k for k in outcome.unique() if k != "measured")]
    for ax, knob in zip(axes.flat, knobs, strict=False):
        order = sorted(ran[knob].dropna().unique(), key=_natural)
        table = pd.crosstab(ran[knob].astype(str), outcome).reindex(
            index=[str(v) for v in order], columns=kinds, fill_value=0)
        bottom = pd.Series(0, index=table.index)
        for kind in kinds:
            base_kind = kind.split(" ")[0]
            colour = "#BBBBBB" if kind == "measured" else FAILURE_COLOURS.get(base_kind, "#777")
            ax.bar(table.index, table[kind], bottom=bottom, color=colour, label=kind,
                   hatch="//" if "skipped" in kind else None, edgecolor="white")
            bottom += table[kind]
        ax.set_title(knob.removeprefix("speculative-"), fontsize=10)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    for ax in list(axes.flat)[len(knobs):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncols=min(len(kinds), 5))
    fig.suptitle("Where it failed, and why (restarts per value)")
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    return fig


def _natural(value: object) -> tuple[int, float, str]:
    """Numbers in numeric order, then text: 2, 12, 16, not "12", "16", "2". A pandas
    column hands out numpy scalars (``numpy.int64`` is no ``int``) and a column read
    back from text holds digits: both count as numbers."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return (0, float(value), "")
    try:
        return (0, float(str(value)), "")
    except ValueError:
        return (1, 0.0, str(value))


def importance(scores: dict[str, float]) -> Figure | None:
    if not scores:
        return None
    items = sorted(scores.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(6.5, 0.45 * len(items) + 1.2))
    ax.barh([k.removeprefix("speculative-") for k, _ in items], [v for _, v in items],
            color=PALETTE[0])
    ax.set_xlabel("importance (fANOVA, share of tok/s variance)")
    ax.set_title("Which knobs matter")
    fig.tight_layout()
    return fig


def leaders(rows: list[tuple[str, float, float, float]]) -> Figure | None:
    """Speedup over the baseline with its 95% interval: (label, ratio, low, high), best
    first. Points with intervals on an axis fitted to them, not bars from 0%: the 1-2%
    between the leaders is what decides the pick, and bars from 0 would hide it."""
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.5))
    labels = [r[0] for r in rows][::-1]
    pct = [(r[1] - 1) * 100 for r in rows][::-1]
    lows = [(r[2] - 1) * 100 if not math.isnan(r[2]) else (r[1] - 1) * 100 for r in rows][::-1]
    highs = [(r[3] - 1) * 100 if not math.isnan(r[3]) else (r[1] - 1) * 100
             for r in rows][::-1]
    err_lo = [max(p - lo, 0) for p, lo in zip(pct, lows, strict=True)]
    err_hi = [max(hi - p, 0) for p, hi in zip(pct, highs, strict=True)]
    ax.errorbar(pct, labels, xerr=[err_lo, err_hi], fmt="o", ms=7, color=PALETTE[2],
                ecolor=PALETTE[2], capsize=4, lw=1.5)
    ax.axvline(pct[-1], color=PALETTE[1], lw=1, ls=":", label="the first's speedup")
    lo, hi = min(lows), max(highs)
    pad = max((hi - lo) * 0.08, 0.2)
    ax.set_xlim(lo - pad, hi + pad)
    if lo - pad <= 0 <= hi + pad:  # the baseline's level, when it is in view
        ax.axvline(0, color="#555555", lw=1)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:+.0f}%" if hi - lo > 5
                                               else f"{v:+.1f}%"))
    ax.set_xlabel("speedup over the baseline (95% interval); the axis starts at the "
                  "lowest interval, not at 0%")
    ax.set_title("The leaders against no speculation")
    ax.tick_params(axis="y", labelsize=8)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def traffic(points: Sequence[tuple[str, int, float, float]], winners: dict[int, str],
            front: Sequence[tuple[str, float, float]], levels: tuple[int, int]
            ) -> Figure | None:
    """Left: tok/s per request against total tok/s, a point per configuration and level
    (a configuration's points joined: more streams, more total, less each), the winner
    per level starred. Right: tok/s per request at the lowest level against total tok/s
    at the highest, with the Pareto front (no configuration beats its points on both).

    ``points``: (label, level, per-request mean, total mean); ``winners``: level -> label;
    ``front``: (label, per-request @low, total @high), best per-request first."""
    if not points:
        return None
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 5.2))
    order = sorted({lv for _, lv, _, _ in points})
    colour = {lv: PALETTE[i % len(PALETTE)] for i, lv in enumerate(order)}
    by_config: dict[str, list[tuple[int, float, float]]] = {}
    for label, lv, per, tot in points:
        by_config.setdefault(label, []).append((lv, per, tot))
    for pts in by_config.values():
        pts.sort()
        ax.plot([p[2] for p in pts], [p[1] for p in pts], color="#BBBBBB", lw=0.8, zorder=1)
    for lv in order:
        mine = [(per, tot) for _, x, per, tot in points if x == lv]
        ax.scatter([t for _, t in mine], [p for p, _ in mine], s=30, color=colour[lv],
                   label=f"concurrency {lv}", zorder=2)
        win = next(((per, tot) for lab, x, per, tot in points
                    if x == lv and lab == winners.get(lv)), None)
        if win is not None:
            ax.scatter([win[1]], [win[0]], marker="*", s=260, color=colour[lv],
                       edgecolors="k", linewidths=0.8, zorder=3)
            first = lv == order[0]  # the lowest level sits left: label to its right
            ax.annotate(f"winner @{lv}: {winners[lv]}", (win[1], win[0]), fontsize=8,
                        xytext=(8 if first else -8, 8), textcoords="offset points",
                        ha="left" if first else "right")
    ax.set_xscale("log")
    # ticks at 1, 2, 5 x 10^k written plainly (300 to 6000 spans barely one decade)
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("total tok/s (all streams; log scale)")
    ax.set_ylabel("tok/s per request")
    ax.set_title("Each configuration at each level (★ winner per level)")
    ax.legend(loc="best")
    low, high = levels
    pairs = {}
    for label, pts in by_config.items():
        at_low = next((p for lv, p, _ in pts if lv == low), None)
        at_high = next((t for lv, _, t in pts if lv == high), None)
        if at_low is not None and at_high is not None:
            pairs[label] = (at_high, at_low)
    bx.scatter([t for t, _ in pairs.values()], [p for _, p in pairs.values()], s=30,
               color="#999999", label="configuration")
    if front:
        xs = [f[2] for f in front]
        ys = [f[1] for f in front]
        bx.plot(xs, ys, "-o", color=PALETTE[3], lw=2, ms=7, label="Pareto front")
        for label, per, tot in front:
            bx.annotate(label, (tot, per), fontsize=8, xytext=(-8, -12),
                        textcoords="offset points", ha="right")
    bx.set_xlabel(f"total tok/s at concurrency {high}")
    bx.set_ylabel(f"tok/s per request at concurrency {low}")
    bx.set_title("The trade-off: one user's speed against the server's")
    bx.legend(loc="best")
    fig.tight_layout()
    return fig
