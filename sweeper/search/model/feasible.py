"""Which configurations will fail to serve, learned from the ones that did.

A logistic regression on the same encoding as the factors (every knob value a one-hot) plus
the speculative sizes (steps, draft tokens, steps x topk: what memory and CUDA-graph
capture grow with) and the draft TP. A value is blamed for failures only as far as it
explains them: present in the failures and absent from the successes. Two rules come on
top, each a physical reason rather than a statistical guess:

* a configuration that failed before fails again;
* out of memory is monotone: at least as many steps, draft tokens and topk as a
  configuration that ran out of memory, all else equal, runs out too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sweeper.search.model.data import History, Shape, others
from sweeper.search.model.encode import Batch, Encoder
from sweeper.study import ENV_PREFIX

L2 = 0.5  # per weight; the intercept only weakly held at the prior
SIZES = 3  # steps, draft tokens, steps x topk: the first columns of _size_features
SIZE_PENALTY = 0.1  # relative, for the size features: an out-of-memory edge is steep
PRIOR_FAIL = 0.15  # before any outcome: most configurations of a sane space serve
OOM_KINDS = ("oom",)


def _size_features(enc: Encoder, shapes: Sequence[Shape], ix: np.ndarray) -> np.ndarray:
    rows = np.array([[s.steps / enc.max_steps, s.draft / enc.max_draft,
                      s.steps * s.topk / (enc.max_steps * enc.max_topk)]
                     + [float(s.draft_tp == tp) for tp in enc.tp_values] for s in shapes])
    return rows[ix]


class Feasibility:
    def __init__(self, enc: Encoder, history: History) -> None:
        self.enc = enc
        outs = [o for o in history.outcomes if enc.shape(o.effective) is not None]
        self.failed_ids = {o.config_id for o in outs if o.failed}
        self.ooms = [(enc.shape(o.effective), others(o.effective)) for o in outs
                     if o.failed and o.kind in OOM_KINDS]
        self.w: np.ndarray | None = None
        # a skipped proposal would be skipped again: as good as a failure to the search
        rows = [(o.effective, o.failed) for o in outs] + [
            (e, True) for c, e in history.skipped.items() if enc.shape(e) is not None]
        if not rows:
            return
        batch = Batch(enc, [e for e, _ in rows])
        F = self._features(batch)
        y = np.array([float(f) for _, f in rows])

        self.w = _logistic(F, y, self._prior0, n_size=SIZES)

    _prior0 = float(np.log(PRIOR_FAIL / (1 - PRIOR_FAIL)))

    def _features(self, batch: Batch) -> np.ndarray:
        size = _size_features(self.enc, batch.shapes, batch.shape_ix)
        main = batch.Z[:, :len(self.enc.levels) + len(self.enc.numeric)]  # no interactions
        return np.hstack([np.ones((len(batch), 1)), size, main])

    def p_fail(self, batch: Batch, config_ids: Sequence[str]) -> np.ndarray:
        if self.w is None:
            p = np.full(len(batch), PRIOR_FAIL)
        else:
            p = 1.0 / (1.0 + np.exp(-(self._features(batch) @ self.w)))
        if self.failed_ids:
            p[np.isin(np.asarray(config_ids), list(self.failed_ids))] = 1.0
        if self.ooms:
            p = np.maximum(p, self._oom_dominated(batch))
        return p

    def _oom_dominated(self, batch: Batch) -> np.ndarray:
        """0.95 when all else is equal; 0.8 when only environment variables differ (most,
        such as NCCL's algorithm, do not change memory; a few might)."""
        out = np.zeros(len(batch))
        for fs, frest in self.ooms:
            if fs is None:
                continue
            larger = (batch.tp == fs.draft_tp) & \
                (batch.sizes >= [fs.steps, fs.topk, fs.draft]).all(1)
            same = batch.rest == batch.rest_codes.get(_key(frest), -1)
            flags = batch.flags == batch.flag_codes.get(_key(_flags(frest)), -1)
            out = np.maximum(out, np.where(larger & same, 0.95,
                                           np.where(larger & flags, 0.8, 0.0)))
        return out


def _flags(rest: dict) -> dict:
    return {k: v for k, v in rest.items() if not k.startswith(ENV_PREFIX)}


def _key(rest: dict) -> str:
    return repr(sorted((k, str(v)) for k, v in rest.items()))  # as encode.Batch keys them


def _logistic(F: np.ndarray, y: np.ndarray, prior0: float, n_size: int = 0,
              iters: int = 25) -> np.ndarray:
    """L2-penalised logistic regression by Newton's method (tens of rows: exact and fast);
    the intercept is pulled weakly towards ``prior0``; the ``n_size`` columns after it
    (sizes: memory and capture limits are sharp edges) are penalised less."""
    k = F.shape[1]
    pen = np.full(k, L2)
    pen[0] = 0.25
    pen[1:1 + n_size] = L2 * SIZE_PENALTY
    center = np.zeros(k)
    center[0] = prior0
    w = center.copy()
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(F @ w)))
        grad = F.T @ (p - y) + pen * (w - center)
        H = (F * (p * (1 - p))[:, None]).T @ F + np.diag(pen)
        step = np.linalg.solve(H, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-6:
            break
    return w
