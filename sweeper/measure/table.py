"""The benchmark as a rich table, for ``sweeper bench``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sweeper.measure.runs import BenchResult

if TYPE_CHECKING:
    from rich.table import Table


def format_table(result: BenchResult) -> Table:
    """A rich table of the runs and the summary, for ``sweeper bench``."""
    from rich.table import Table  # imported here: only the CLI renders tables

    s = result.stats
    ci = "n/a" if math.isnan(s.ci_low) else f"{s.ci_low:.1f}-{s.ci_high:.1f}"
    title = (
        f"{result.spec.aggregate} {result.value:.1f} tok/s (95% CI {ci}, n={s.n}) "
        f"{result.spec.api} x{result.spec.concurrency}, {result.spec.max_tokens} tokens"
    )
    table = Table(title=title)
    for col in ("run", "tok/s", "per-req tok/s", "TTFT s", "decode tok/s", "tokens", "status"):
        table.add_column(col, justify="left" if col in ("run", "status") else "right")
    for run in result.warmup_runs + result.runs:
        reqs = run.requests
        ttfts = [r.ttft_s for r in reqs if r.ttft_s is not None]
        decs = [r.decode_tok_s for r in reqs if r.decode_tok_s is not None]
        status = "ok" if run.counted else ("SHORT" if run.ok else f"ERROR {run.error}")
        table.add_row(
            f"warm-up {run.index + 1}" if run.warmup else str(run.index + 1),
            f"{run.tok_s:.1f}",
            f"{run.per_request_tok_s:.1f}",
            f"{sum(ttfts) / len(ttfts):.3f}" if ttfts else "-",
            f"{sum(decs) / len(decs):.1f}" if decs else "-",
            str(sum(r.completion_tokens for r in reqs)),
            status + (" (excluded)" if not run.warmup and not run.counted else ""),
            style="dim" if run.warmup else None,
        )
    table.add_section()
    table.add_row("mean", f"{s.mean:.1f}", "", "", "", "", f"median {s.median:.1f}")
    table.add_row("stdev", f"{s.stdev:.2f}", "", "", "", "", f"min {s.min:.1f} max {s.max:.1f}")
    if result.accept_length is not None:
        table.add_row(
            "accept len", f"{result.accept_length:.2f}", "", "", "", "", result.accept_length_source
        )
    if result.per_position_acceptance:
        pp = " ".join("-" if p is None else f"{p:.2f}" for p in result.per_position_acceptance)
        table.add_row("p(accept)", "", "", "", "", "", pp)
    table.caption = (
        f"prompts {result.prompt_hash[:12]}, {result.n_errors} errors, "
        f"{result.n_short} short, {result.n_excluded} runs excluded"
    )
    return table

