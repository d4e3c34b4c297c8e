"""Configurations as numbers: the physics' inputs (``Shape``), the other knobs as one-hot
factors, and a normalised vector for the residual's kernel.

The vocabulary comes from the candidate configurations (every value the space allows), so
an observation and a candidate are encoded alike, and a value never measured is known.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sweeper.search.model.data import Shape, others
from sweeper.study import ENV_PREFIX

NUMERIC_LEVELS = 8  # a numeric knob with more distinct values is a slope, not levels


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class Encoder:
    """Fixed once per space: which knobs exist, their levels, the physics' scales."""

    def __init__(self, configs: Sequence[Mapping[str, Any]], fixed: Mapping[str, Any]) -> None:
        self.fixed = dict(fixed)
        values: dict[str, set[Any]] = {}
        for eff in configs:
            for k, v in others(eff).items():
                values.setdefault(k, set()).add(v)
        self.numeric: dict[str, tuple[float, float]] = {}
        self.levels: list[tuple[str, str]] = []  # (knob, value as text): one-hot columns
        for k in sorted(values):
            vals = values[k]
            if all(_is_number(v) for v in vals) and len(vals) > NUMERIC_LEVELS:
                lo, hi = min(vals), max(vals)
                self.numeric[k] = (float(lo), float(hi) if hi > lo else float(lo) + 1.0)
            else:
                self.levels += [(k, str(v)) for v in sorted(vals, key=str)]
        self.level_index = {lv: i for i, lv in enumerate(self.levels)}
        shapes = [s for s in (self.shape(c) for c in configs) if s is not None]
        self.tp_values = sorted({s.draft_tp for s in shapes})
        self.max_steps = max((s.steps for s in shapes), default=1)
        self.max_topk = max((s.topk for s in shapes), default=1)
        self.max_draft = max((s.draft for s in shapes), default=2)
        # a verify cost that may step up at any draft-token count (CUDA graphs and kernel
        # tiles run a padded size): one step column per count above the smallest, used
        # only where the data prefer it (fit.fit_physics)
        self.draft_steps = sorted({s.draft for s in shapes})[1:]
        # chains and trees both in the space: every knob also gets a factor of its own for
        # trees. A tree's verify runs other kernels (a tree mask, another attention path),
        # so a knob measured on chains says little about it on a tree: one shared factor
        # carried a chain's gain to trees, where the same setting lost, and the trees
        # with the other setting were never measured
        self.tree_factors = any(s.topk > 1 for s in shapes) and any(s.topk == 1 for s in shapes)

    def shape(self, eff: Mapping[str, Any]) -> Shape | None:
        return Shape.of(eff, self.fixed)

    # --- the cycle's linear features (all contributions >= 0) ------------------------
    def cycle_names(self) -> list[str]:
        names = ["fixed", "verify per draft token", "tree"]
        names += [f"draft step at draft TP {tp}" for tp in self.tp_values]
        names += [f"draft step x (topk - 1) at draft TP {tp}" for tp in self.tp_values]
        names += [f"per cycle at draft TP {tp}" for tp in self.tp_values[1:]]
        names += [f"verify step at {k} draft tokens" for k in self.draft_steps]
        return names

    def n_steps(self) -> int:
        """The verify-step columns, the last ones of cycle_features."""
        return len(self.draft_steps)

    def cycle_features(self, s: Shape) -> np.ndarray:
        tps = self.tp_values
        row = [1.0, s.draft / self.max_draft, float(s.topk > 1)]
        row += [s.steps / self.max_steps * (s.draft_tp == tp) for tp in tps]
        # a wider draft computes more per step: part of the draft step, at its TP
        wide = s.steps * (s.topk - 1) / (self.max_steps * max(self.max_topk - 1, 1))
        row += [wide * (s.draft_tp == tp) for tp in tps]
        row += [float(s.draft_tp == tp) for tp in tps[1:]]
        row += [float(s.draft >= k) for k in self.draft_steps]
        return np.asarray(row)

    # --- the other knobs as factors -----------------------------------------------------
    def factor_size(self) -> int:
        blocks = max(len(self.tp_values), 1) + int(self.tree_factors)
        return (len(self.levels) + len(self.numeric)) * blocks

    def factor_features(self, eff: Mapping[str, Any]) -> np.ndarray:
        """Each knob value's own factor, then the same again per draft TP but the first:
        a knob such as NCCL's algorithm may act on the draft's communication only, which
        exists at one draft TP and not at another; then again for trees (tree_factors)."""
        base = np.zeros(len(self.levels) + len(self.numeric))
        for k, v in others(eff).items():
            i = self.level_index.get((k, str(v)))
            if i is not None:
                base[i] = 1.0
            elif k in self.numeric and _is_number(v):
                lo, hi = self.numeric[k]
                base[len(self.levels) + list(self.numeric).index(k)] = (float(v) - lo) / (hi - lo)
        s = self.shape(eff)
        inter = [base * float(s is not None and s.draft_tp == tp) for tp in self.tp_values[1:]]
        if self.tree_factors:
            inter.append(base * float(s is not None and s.topk > 1))
        return np.concatenate([base, *inter])

    # --- the residual's kernel space ----------------------------------------------------
    def kernel_features(self, eff: Mapping[str, Any]) -> np.ndarray:
        s = self.shape(eff)
        phys: list[float] = []
        if s is not None:
            phys = [s.steps / self.max_steps, math.log2(s.topk) / max(math.log2(self.max_topk), 1),
                    s.draft / self.max_draft]
            phys += [float(s.draft_tp == tp) / math.sqrt(2) for tp in self.tp_values]
        else:
            phys = [0.0, 0.0, 0.0] + [0.0] * len(self.tp_values)
        f = self.factor_features(eff)[:len(self.levels) + len(self.numeric)]
        f[:len(self.levels)] /= math.sqrt(2)  # one value for another: distance 1
        return np.concatenate([np.asarray(phys), f])

    def seen_levels(self, effs: Sequence[Mapping[str, Any]]) -> set[tuple[str, str]]:
        seen: set[tuple[str, str]] = set()
        for eff in effs:
            s = self.shape(eff)
            if s is not None:
                seen |= {("topk", str(s.topk)), ("draft_tp", s.draft_tp), ("steps", str(s.steps)),
                         ("topk x draft_tp", f"{s.topk} x {s.draft_tp}")}  # own cost terms
            seen |= {(k, str(v)) for k, v in others(eff).items()}
        return seen

    def levels_of(self, eff: Mapping[str, Any]) -> set[tuple[str, str]]:
        return self.seen_levels([eff])


class Batch:
    """Configurations encoded once (a space's candidates are predicted at every trial)."""

    def __init__(self, enc: Encoder, effs: Sequence[Mapping[str, Any]]) -> None:
        self.effs = list(effs)
        maybe = [enc.shape(e) for e in self.effs]
        shapes = [s for s in maybe if s is not None]
        if len(shapes) < len(maybe):
            raise ValueError("every configuration of a batch must be speculative")
        self.shapes = sorted(set(shapes), key=lambda s: (s.steps, s.topk, s.draft, s.draft_tp))
        index = {s: i for i, s in enumerate(self.shapes)}
        self.shape_ix = np.array([index[s] for s in shapes], dtype=int)
        self.X = np.array([enc.cycle_features(s) for s in self.shapes])  # per distinct shape
        self.Z = np.array([enc.factor_features(e) for e in self.effs]).reshape(
            len(self.effs), enc.factor_size())
        self.U = np.array([enc.kernel_features(e) for e in self.effs])
        # for rules over sizes: every configuration's numbers, and the rest as one key
        self.sizes = np.array([[s.steps, s.topk, s.draft] for s in shapes]).reshape(-1, 3)
        self.tp = np.array([s.draft_tp for s in shapes])
        rest = [sorted((k, str(v)) for k, v in others(e).items()) for e in self.effs]
        self.rest_codes: dict[str, int] = {}
        self.rest = np.array([self.rest_codes.setdefault(repr(r), len(self.rest_codes))
                              for r in rest], dtype=int)
        self.flag_codes: dict[str, int] = {}  # the same without env.*
        self.flags = np.array([self.flag_codes.setdefault(
            repr([kv for kv in r if not kv[0].startswith(ENV_PREFIX)]), len(self.flag_codes))
            for r in rest], dtype=int)
        levels = [enc.levels_of(e) for e in self.effs]
        self.universe = sorted(set().union(*levels)) if levels else []
        pos = {lv: i for i, lv in enumerate(self.universe)}
        self.L = np.zeros((len(self.effs), len(self.universe)), dtype=bool)
        for i, lv in enumerate(levels):
            self.L[i, [pos[x] for x in lv]] = True

    def __len__(self) -> int:
        return len(self.effs)
