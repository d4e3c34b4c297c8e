"""The study's sampler, by name: ``SAMPLERS`` maps a name to a factory
``(seed, n_startup_trials) -> BaseSampler``; a new sampler is one more entry."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import optuna

from sweeper.errors import InputError

if TYPE_CHECKING:
    from sweeper.search.space import SearchSpace

SamplerFactory = Callable[[int | None, int, "SearchSpace | None"], optuna.samplers.BaseSampler]


def _tpe(seed: int | None, n_startup: int,
         space: SearchSpace | None = None) -> optuna.samplers.BaseSampler:
    """TPE with multivariate + group: parameters that only some branches use (the draft
    tokens' position is absent from topk-1 trials) are modelled jointly within each
    group; constant_liar keeps parallel workers apart. It learns from its host's group of
    hardware's trials alone (grouped.py), once the sweep sets the group."""
    from sweeper.search.grouped import GroupSampler

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # multivariate/group are flagged experimental
        return GroupSampler(optuna.samplers.TPESampler(
            multivariate=True, group=True, seed=seed, n_startup_trials=n_startup,
            constant_liar=True))


def _random(seed: int | None, n_startup: int,
            space: SearchSpace | None = None) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


def _model(seed: int | None, n_startup: int,
           space: SearchSpace | None = None) -> optuna.samplers.BaseSampler:
    """search/model/: tok/s predicted from the speculative physics and the data, over the
    configurations of ``space``, with TPE for what it does not model."""
    if space is None:
        raise ValueError("the model sampler needs the study's SearchSpace")
    from sweeper.search.model import ModelSampler

    return ModelSampler(space, _tpe(seed, n_startup), n_startup, seed)


SAMPLERS: dict[str, SamplerFactory] = {"tpe": _tpe, "random": _random, "model": _model}


def make_sampler(name: str, seed: int | None, n_startup: int,
                 space: SearchSpace | None = None) -> optuna.samplers.BaseSampler:
    factory = SAMPLERS.get(name)
    if factory is None:
        names = list(SAMPLERS)
        raise InputError(f"--sampler {name}: unknown sampler; use {', '.join(names[:-1])} "
                         f"or {names[-1]}")
    return factory(seed, n_startup, space)
