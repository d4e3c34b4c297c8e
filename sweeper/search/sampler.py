"""The study's sampler, by name: ``SAMPLERS`` maps a name to a factory
``(seed, n_startup_trials) -> BaseSampler``; a new sampler is one more entry."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import optuna

from sweeper.errors import InputError

SamplerFactory = Callable[[int | None, int], optuna.samplers.BaseSampler]


def _tpe(seed: int | None, n_startup: int) -> optuna.samplers.BaseSampler:
    """TPE with multivariate + group: parameters that only some branches use (the draft
    tokens' position is absent from topk-1 trials) are modelled jointly within each
    group; constant_liar keeps parallel workers apart."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # multivariate/group are flagged experimental
        return optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed,
                                          n_startup_trials=n_startup, constant_liar=True)


def _random(seed: int | None, n_startup: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


SAMPLERS: dict[str, SamplerFactory] = {"tpe": _tpe, "random": _random}


def make_sampler(name: str, seed: int | None, n_startup: int) -> optuna.samplers.BaseSampler:
    factory = SAMPLERS.get(name)
    if factory is None:
        raise InputError(f"--sampler {name}: unknown sampler; use {' or '.join(SAMPLERS)}")
    return factory(seed, n_startup)
