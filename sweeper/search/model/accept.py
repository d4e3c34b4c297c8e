"""Per-depth acceptance of the draft, fitted from measured accept lengths.

A verify cycle of a chain with conditional acceptance a_1..a_S per depth emits
``1 + sum_k prod_{i<=k} a_i`` tokens on average (the accepted drafts + the bonus token).
A tree (topk > 1) spreads ``draft tokens - 1`` candidates over the depths: the top-1 chain
first, then extra siblings from the shallowest depth down (those have the highest path
probability, so a tree builder keeps them). A depth with m candidates accepts with
``1 - (1 - a_i) ** (m ** b)``: b = 1 when the candidates were independent guesses, smaller
as they are correlated (b is fitted).

The fit is robust least squares (soft-L1) on the accept lengths, with weak priors that keep
it sane on little data: acceptance varies smoothly with depth, and depths never measured
follow their neighbours. Nothing here knows any simulator or hardware.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sweeper.search.model.data import Shape

PRIOR_ACCEPT = 0.6  # a typical EAGLE depth-1 acceptance; only a weak anchor
ACCEPT_NOISE = 0.05  # accept-length units per observation


def depth_candidates(steps: int, topk: int, draft: int) -> list[int]:
    """Candidates per depth of the draft tree SGLang verifies: the budget (draft tokens
    - 1) covers the top-1 chain first, then widens depth by depth up to topk. This is
    EAGLE's rule, written here because the sweeper never imports the simulator (which
    implements the same rule for its own physics)."""
    budget = max(draft - 1, 0)
    nodes = [0] * steps
    for d in range(steps):
        if budget:
            nodes[d], budget = 1, budget - 1
    for d in range(steps):
        extra = min(topk - 1, budget)
        nodes[d] += extra
        budget -= extra
    return [m for m in nodes if m]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _logit(p: float) -> float:
    return float(np.log(p / (1 - p)))


@dataclass
class AcceptModel:
    depth: np.ndarray  # a_1..a_D
    branch: float  # b
    fitted: bool  # False: the prior only (no accept length measured)

    def accept_length(self, shape: Shape) -> float:
        reach, total = 1.0, 1.0
        for d, m in enumerate(depth_candidates(shape.steps, shape.topk, shape.draft)):
            a = float(self.depth[min(d, len(self.depth) - 1)])
            reach *= 1.0 - (1.0 - a) ** (m ** self.branch)
            total += reach
        return total

    def per_depth(self, shape: Shape) -> list[float]:
        out = []
        for d, m in enumerate(depth_candidates(shape.steps, shape.topk, shape.draft)):
            a = float(self.depth[min(d, len(self.depth) - 1)])
            out.append(1.0 - (1.0 - a) ** (m ** self.branch))
        return out


def _unpack(theta: np.ndarray) -> tuple[np.ndarray, float]:
    return _sigmoid(theta[:-1]) * 0.99, float(0.05 + 1.45 * _sigmoid(theta[-1:])[0])


def fit_acceptance(shapes: Sequence[Shape], lengths: Sequence[float],
                   max_depth: int) -> AcceptModel:
    """Per-depth acceptance and the tree exponent from (shape, measured accept length)."""
    depth = max(1, max_depth)
    prior = np.array([_logit(PRIOR_ACCEPT)] * depth + [0.0])
    if not shapes:
        a, b = _unpack(prior)
        return AcceptModel(a, b, False)
    cands = [depth_candidates(s.steps, s.topk, s.draft) for s in shapes]
    y = np.asarray(lengths, dtype=float)

    def residuals(theta: np.ndarray) -> np.ndarray:
        a, b = _unpack(theta)
        pred = np.empty(len(cands))
        for j, ms in enumerate(cands):
            reach, total = 1.0, 1.0
            for d, m in enumerate(ms):
                reach *= 1.0 - (1.0 - a[min(d, depth - 1)]) ** (m ** b)
                total += reach
            pred[j] = total
        data = (pred - y) / ACCEPT_NOISE
        smooth = np.diff(theta[:-1]) / 0.7  # neighbouring depths alike
        anchor = (theta - prior) / 3.0  # weak: only decides what the data leaves open
        return np.concatenate([data, smooth, anchor])

    from scipy.optimize import least_squares  # here: ~0.2 s of import every command would pay

    res = least_squares(residuals, prior, loss="soft_l1", f_scale=2.0, max_nfev=200)
    a, b = _unpack(res.x)
    return AcceptModel(a, b, True)
