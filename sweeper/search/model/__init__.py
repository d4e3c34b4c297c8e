"""The model-based sampler for speculative decoding (``sweep.sampler: model``)."""

from sweeper.search.model.sampler import ModelSampler

__all__ = ["ModelSampler"]
