"""tok/s predicted from the trials measured so far, with an uncertainty.

    log tok/s = log accept_length(shape) - log cycle(shape) - factors(other knobs) + residual

* accept length: per-depth acceptance fitted on measured accept lengths (accept.py);
* cycle time: a non-negative linear function of steps, draft tokens, topk and draft TP
  (encode.Encoder.cycle_features), fitted on cycle = accept length / tok/s of each
  measured configuration: a verify cost per token, a draft step per draft TP, a tree cost;
  and, where they predict left-out configurations clearly better (_steps_predict_better),
  verify steps at draft-token counts: CUDA graphs and kernel tiles run a padded size, so
  5 to 8 draft tokens may cost the same and the optimum sit on the edge;
* other knobs (NCCL, env.*, any flag): multiplicative factors on the cycle, fitted by
  ridge regression on the log of what the cycle leaves unexplained (alternating with the
  cycle's NNLS);
* residual: a Gaussian process over the configurations (kernel.py) on what the physics
  misses (interactions, a configuration's own luck), whose posterior
  variance, plus a term for values never measured, is the prediction's uncertainty.

The physics only gives the GP a prior mean: where the data disagree, the data win.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sweeper.search.model.accept import AcceptModel, fit_acceptance
from sweeper.search.model.data import History, Shape
from sweeper.search.model.encode import Batch, Encoder
from sweeper.search.model.kernel import GP, fit_gp

CYCLE_RIDGE = 1e-3  # relative to the data's scale: only breaks ties between collinear terms
CYCLE_PRIOR = 0.5  # prior sd of one cycle coefficient, as a fraction of a typical cycle
FACTOR_SD = 0.04  # prior sd of one knob value's log factor: "a setting may be worth 4%"
NOVEL_SD = 0.05  # a value never measured may be this far (log) from what the rest says
ALTERNATIONS = 6
STEP_SD = 0.02  # prior sd of one verify step (draft-token bucket edge), of a typical cycle
STEPS_MIN = 8  # measured configurations before the verify steps are weighed at all
STEPS_GAIN = 0.8  # steps are used when they cut the leave-one-out error to this share
LOO_CAP = 0.05  # one point's leave-one-out error counts up to this (log): see _loo_error
LOO_FOLDS = 40  # leave-one-out up to this many configurations, then this many folds


@dataclass
class Physics:
    accept: AcceptModel
    cycle_w: np.ndarray  # NNLS coefficients over Encoder.cycle_features
    factor_g: np.ndarray  # log factors over Encoder.factor_features
    cov: np.ndarray  # joint covariance of (cycle_w, factor_g): Laplace, see variance
    steps: bool = False  # the verify cost in steps (draft-token buckets), chosen by LOO

    def variance(self, X: np.ndarray, Z: np.ndarray) -> np.ndarray:
        """Variance of log cycle + factors at rows (X, Z): J^T cov J with
        J = (x / (w . x), z). Joint, because a cost term and a knob's factor measured
        together once are confounded: each alone looks pinned, their split is not (one
        tree measured with a slow NCCL protocol says little about a tree with a fast one).
        A term the data never pinned keeps its prior's width, so exploring it is worth
        something."""
        J = _jacobian(X, Z, self.cycle_w)
        return np.maximum(((J @ self.cov) * J).sum(1), 0.0)


def _jacobian(X: np.ndarray, Z: np.ndarray, w: np.ndarray) -> np.ndarray:
    """d(log cycle + factors) / d(w, g) at rows (X, Z): the fit's Laplace approximation
    and every prediction's variance use the same one."""
    return np.hstack([X / np.maximum(X @ w, 1e-12)[:, None], Z])


def _nnls_ridge(X: np.ndarray, y: np.ndarray, lam: float,
                extra: np.ndarray | None = None) -> np.ndarray:
    k = X.shape[1]
    scale = np.sqrt(lam) * max(float(np.abs(X).max()), 1e-9)
    diag = np.full(k, scale)
    if extra is not None and len(extra):
        diag[k - len(extra):] = extra
    A = np.vstack([X, np.diag(diag)])
    b = np.concatenate([y, np.zeros(k)])
    from scipy.optimize import nnls  # here: ~0.2 s of import every command would pay

    w, _ = nnls(A, b, maxiter=50 * k)
    return w


def _bayes_ridge(Z: np.ndarray, r: np.ndarray, noise: np.ndarray,
                 prior_sd: float) -> np.ndarray:
    """Posterior mean of g in r = Z g + e, e ~ N(0, noise), g ~ N(0, sd^2). Its
    covariance is not needed here: fit_physics takes the joint one once, after the fit."""
    k = Z.shape[1]
    if k == 0:
        return np.zeros(0)
    P = (Z / noise[:, None]).T @ Z + np.eye(k) / prior_sd**2
    return np.linalg.solve(P, Z.T @ (r / noise))


def fit_physics(enc: Encoder, shapes: Sequence[Shape], effs: Sequence[Mapping[str, Any]],
                tok_s: np.ndarray, accepts: Sequence[float | None],
                noise: np.ndarray) -> Physics:
    with_acc = [(s, a) for s, a in zip(shapes, accepts, strict=True) if a]
    accept = fit_acceptance([s for s, _ in with_acc], [a for _, a in with_acc], enc.max_steps)
    # tokens per cycle: the measured accept length where there is one (it is the trial's
    # own), else the fitted one
    L = np.array([a if a else accept.accept_length(s) for s, a in zip(shapes, accepts,
                                                                        strict=True)])
    cycle = L / tok_s
    X = np.array([enc.cycle_features(s) for s in shapes])
    Z = np.array([enc.factor_features(e) for e in effs]).reshape(len(effs), enc.factor_size())
    ns = enc.n_steps()
    k0 = X.shape[1] - ns  # the linear cycle's columns; the verify steps' come after
    # a verify step's prior, N(0, step_sd), as the NNLS's ridge rows (rows are relative
    # errors of about the median noise's size): steps no data call for stay at zero
    step_sd = STEP_SD * float(np.median(cycle))
    extra = np.full(ns, np.sqrt(float(np.median(noise))) / step_sd) if ns else None
    use_steps = bool(ns) and _steps_predict_better(X, Z, cycle, noise, extra, k0)
    Xf = X if use_steps else X[:, :k0]
    w, g = _fit_cycle(Xf, Z, cycle, noise, extra if use_steps else None)
    # Laplace approximation around the fit, cycle coefficients and factors together:
    # log cycle_j ~ log(w . x_j) + z_j . g, each cycle coefficient a priori anywhere up to
    # about the whole cycle (features are scaled to [0, 1]), each factor FACTOR_SD
    J = _jacobian(Xf, Z, w)
    prior_sd = CYCLE_PRIOR * float(np.median(cycle))
    prior = np.concatenate([np.full(k0, prior_sd**-2.0),
                            np.full(Xf.shape[1] - k0, step_sd**-2.0),
                            np.full(Z.shape[1], FACTOR_SD**-2.0)])
    P = (J / noise[:, None]).T @ J + np.diag(prior)
    cov = np.linalg.inv(P)
    if not use_steps and ns:  # the steps not used: zero, and no uncertainty either
        w = np.concatenate([w, np.zeros(ns)])
        cov = np.insert(np.insert(cov, [k0] * ns, 0.0, axis=0), [k0] * ns, 0.0, axis=1)
    return Physics(accept, w, g, cov, use_steps)


def _fit_cycle(X: np.ndarray, Z: np.ndarray, cycle: np.ndarray, noise: np.ndarray,
               extra: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Cycle coefficients (NNLS) and knob factors (ridge), alternating."""
    g = np.zeros(Z.shape[1])
    w = np.zeros(X.shape[1])
    for _ in range(ALTERNATIONS):
        target = cycle * np.exp(-Z @ g)
        wt = 1.0 / target  # relative errors: a slow configuration weighs no more
        w = _nnls_ridge(X * wt[:, None], target * wt, CYCLE_RIDGE, extra)
        base = np.maximum(X @ w, 1e-12)
        g = _bayes_ridge(Z, np.log(cycle / base), noise, FACTOR_SD)
    return w, g


def _loo_error(X: np.ndarray, Z: np.ndarray, cycle: np.ndarray, noise: np.ndarray,
               extra: np.ndarray | None) -> np.ndarray:
    """Each measured configuration's squared log error when the fit leaves it out, capped
    at LOO_CAP: a configuration no fit can predict (the only one at its draft TP) costs
    both fits alike instead of outweighing every other. Beyond LOO_FOLDS configurations
    they are left out LOO_FOLDS groups at a time (a long study's proposal stays quick)."""
    n = len(cycle)
    fold = np.arange(n) % min(n, LOO_FOLDS)
    err = np.zeros(n)
    for f in range(int(fold.max()) + 1):
        out = fold == f
        w, g = _fit_cycle(X[~out], Z[~out], cycle[~out], noise[~out], extra)
        pred = np.log(np.maximum(X[out] @ w, 1e-12)) + Z[out] @ g
        err[out] = np.minimum((pred - np.log(cycle[out])) ** 2, LOO_CAP**2)
    return err


def _steps_predict_better(X: np.ndarray, Z: np.ndarray, cycle: np.ndarray,
                          noise: np.ndarray, extra: np.ndarray | None, k0: int) -> bool:
    """Whether a verify cost with steps predicts configurations it has not seen clearly
    better than the linear one (leave-one-out, the linear fit's first ``k0`` columns).
    Steps fit any data at least as well, so only prediction can tell: on a server whose
    verify cost is linear (or flat) they would turn noise into steps, and the search would
    chase them; on one with bucket edges the linear cost cannot see that 5 and 8 draft
    tokens cost the same, and never proposes the edge where the optimum sits."""
    if len(cycle) < STEPS_MIN:
        return False
    steps = _loo_error(X, Z, cycle, noise, extra).sum()
    linear = _loo_error(X[:, :k0], Z, cycle, noise, None).sum()
    return bool(steps < STEPS_GAIN * linear)


class Predictor:
    """Mean and standard deviation of log tok/s for configurations of one space."""

    def __init__(self, enc: Encoder, history: History) -> None:
        self.enc = enc
        obs = [o for o in history.observations if enc.shape(o.effective) is not None]
        self.obs = obs
        self.physics: Physics | None = None
        self.gp: GP | None = None
        self.seen = enc.seen_levels([o.effective for o in obs])
        if not obs:
            return
        batch = Batch(enc, [o.effective for o in obs])
        noise = np.array([o.log_se2(max(history.spread, 0.005)) for o in obs])
        self.physics = fit_physics(enc, [batch.shapes[i] for i in batch.shape_ix],
                                   [o.effective for o in obs],
                                   np.array([o.mean for o in obs]), [o.accept for o in obs],
                                   noise)
        y = np.array([o.log_mean for o in obs])
        self.gp = fit_gp(batch.U, y - self.prior_mean(batch), noise)

    @property
    def ready(self) -> bool:
        return self.gp is not None

    def prior_mean(self, batch: Batch) -> np.ndarray:
        """The physics' log tok/s (no residual)."""
        p = self.physics
        assert p is not None
        L = np.array([p.accept.accept_length(s) for s in batch.shapes])
        cyc = np.maximum(batch.X @ p.cycle_w, 1e-12)
        return np.log(L / cyc)[batch.shape_ix] - batch.Z @ p.factor_g

    def predict(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """(mean, sd) of log tok/s of every configuration of ``batch``."""
        if self.gp is None:
            return np.zeros(len(batch)), np.full(len(batch), 1.0)
        mu_r, var_r = self.gp.predict(batch.U)
        unseen = np.array([lv not in self.seen for lv in batch.universe], dtype=float)
        novel = batch.L.astype(float) @ unseen if len(unseen) else np.zeros(len(batch))
        assert self.physics is not None
        var_p = self.physics.variance(batch.X[batch.shape_ix], batch.Z)
        var = var_r + var_p + novel * NOVEL_SD**2
        return self.prior_mean(batch) + mu_r, np.sqrt(var)
