"""Every configuration a space can produce, with the Optuna parameters that produce it.

The space (search/space.py) is walked branch by branch through its public ``effective``:
a probe mapping answers the parameters assigned so far and raises for the next one, which
is then tried at each value of its distribution. So whatever names and branches the space
uses, the candidates are exactly its valid configurations, SGLang's rules applied. A float
parameter has no finite domain: a grid of midpoints stands for it (fine enough that a
float which picks one of up to FLOAT_POINTS values, such as the draft tokens' position
inside a branch, reaches every value; configurations are deduplicated by config_id).
The enumeration is done once per space object.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from sweeper.search.space import SearchSpace

FLOAT_POINTS = 32
# A space larger than this is sampled by TPE alone. The candidates cost ~5 kB each while
# enumerated (~1.4 GB and ~25 s for the 270k of a 1T-MoE study with its kernel and NCCL
# knobs, once per sampler), and the model scores them all in one vectorised pass per
# proposal: far below a restart's minutes. At 200k the shipped Kimi study (270k) fell back
# to TPE without a word, and its picks were 0/7 within 1% in the emulation.
MAX_CANDIDATES = 1_000_000


class _Need(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


class _Probe(Mapping[str, Any]):
    def __init__(self, fixed: dict[str, Any]) -> None:
        self.fixed = fixed

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> Any:
        if key in self.fixed:
            return self.fixed[key]
        raise _Need(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.fixed)

    def __len__(self) -> int:
        return len(self.fixed)


def domain(dist: BaseDistribution) -> list[Any]:
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    if isinstance(dist, FloatDistribution):
        mid = (np.arange(FLOAT_POINTS) + 0.5) / FLOAT_POINTS
        if dist.log:
            return [float(x) for x in np.exp(np.log(dist.low) + mid * np.log(dist.high / dist.low))]
        return [float(x) for x in dist.low + mid * (dist.high - dist.low)]
    raise TypeError(f"cannot enumerate {dist!r}")


@dataclass(frozen=True)
class Candidate:
    params: dict[str, Any]  # Optuna (internal) parameters
    effective: dict[str, Any]
    config_id: str


_CACHE: WeakKeyDictionary[SearchSpace, list[Candidate] | None] = WeakKeyDictionary()


def enumerate_candidates(space: SearchSpace) -> list[Candidate] | None:
    """The space's configurations, one per distinct config_id; None when it is too large."""
    if space not in _CACHE:
        _CACHE[space] = _enumerate(space)
    return _CACHE[space]


def _enumerate(space: SearchSpace) -> list[Candidate] | None:
    try:  # the space's own walk: every branch's draft-token positions at their values
        out: dict[str, Candidate] = {}
        for params, eff in space.configurations():
            cid = space.launch_config(eff).config_id()
            out.setdefault(cid, Candidate(dict(params), eff, cid))
            if len(out) > MAX_CANDIDATES:
                return None
        return list(out.values())
    except TypeError:  # a float range among the plain parameters: a grid stands for it
        return _probe_walk(space)


def _probe_walk(space: SearchSpace) -> list[Candidate] | None:
    dists = space.distributions()
    seen: set[str] = set()
    stack: list[dict[str, Any]] = [{}]
    out: dict[str, Candidate] = {}
    while stack:
        fixed = stack.pop()
        try:
            eff = space.effective(_Probe(fixed))
        except _Need as need:
            for v in reversed(domain(dists[need.name])):
                stack.append({**fixed, need.name: v})
            continue
        key = repr(sorted((k, repr(v)) for k, v in eff.items()))
        if key in seen:  # another position of the same value: no need to launch it
            continue
        seen.add(key)
        cid = space.launch_config(eff).config_id()
        out.setdefault(cid, Candidate(dict(fixed), eff, cid))
        if len(out) > MAX_CANDIDATES:
            return None
    return list(out.values())
