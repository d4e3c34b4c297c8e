"""The study's sampler, by name."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import optuna

from sweeper.errors import InputError

if TYPE_CHECKING:
    from sweeper.search.space import SearchSpace

SAMPLERS = ("tpe", "random", "model")


def _tpe(seed: int | None, n_startup: int) -> optuna.samplers.BaseSampler:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # multivariate/group are flagged experimental
        return optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed,
                                          n_startup_trials=n_startup, constant_liar=True)


def make_sampler(name: str, seed: int | None, n_startup: int,
                 space: SearchSpace | None = None) -> optuna.samplers.BaseSampler:
    """TPE with multivariate + group: conditional parameters (one name per branch) are
    modelled jointly within each branch; constant_liar keeps parallel workers apart.
    ``model`` (search/model/) predicts tok/s from the speculative physics and the data,
    over the configurations of ``space``, with that TPE for what it does not model."""
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        return _tpe(seed, n_startup)
    if name == "model":
        if space is None:
            raise ValueError("the model sampler needs the study's SearchSpace")
        from sweeper.search.model import ModelSampler

        return ModelSampler(space, _tpe(seed, n_startup), n_startup, seed)
    raise InputError(f"--sampler {name}: unknown sampler; use {', '.join(SAMPLERS[:-1])} "
                     f"or {SAMPLERS[-1]}")
