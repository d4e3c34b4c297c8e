"""The study's sampler, by name."""

from __future__ import annotations

import warnings

import optuna

from sweeper.errors import InputError

SAMPLERS = ("tpe", "random")


def make_sampler(name: str, seed: int | None, n_startup: int) -> optuna.samplers.BaseSampler:
    """TPE with multivariate + group: conditional parameters (one name per branch) are
    modelled jointly within each branch; constant_liar keeps parallel workers apart."""
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # multivariate/group are flagged experimental
            return optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed,
                                              n_startup_trials=n_startup, constant_liar=True)
    raise InputError(f"--sampler {name}: unknown sampler; use {' or '.join(SAMPLERS)}")
