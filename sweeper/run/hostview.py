"""One host's view of a study (what its worker sweeps), and the reporter that names the host
when several workers write to one console (run/workers.py)."""

from __future__ import annotations

import dataclasses

from rich.markup import escape

from sweeper.run.progress import Reporter
from sweeper.study import StudySpec


def host_view(spec: StudySpec, index: int) -> StudySpec:
    """The study as one host's worker sees it: that host only, on its own port."""
    h = spec.hosts[index]
    seed = spec.sweep.seed + index if spec.sweep.seed is not None else None
    return dataclasses.replace(
        spec, hosts=[h], server=spec.server.model_copy(update={"port": h.port or spec.server.port}),
        sweep=spec.sweep.model_copy(update={"seed": seed}))


class Prefixed:
    """A reporter whose lines name the host (several workers write to one console)."""

    def __init__(self, inner: Reporter, label: str, many: bool) -> None:
        self.inner, self.prefix = inner, escape(f"[{label}] ") if many else ""

    def phase(self, text: str) -> None:
        self.inner.phase(self.prefix + text)

    def line(self, text: str) -> None:
        self.inner.line(self.prefix + text)

    def progress(self, done: int, total: int, note: str = "") -> None:
        self.inner.progress(done, total, note)
