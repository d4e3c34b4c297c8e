"""The few distribution functions the statistics use: Student's t and chi-square quantiles,
the normal's cdf, log cdf and density.

Written over ``scipy.special`` rather than taken from ``scipy.stats``: importing
``scipy.stats`` costs ~1 s of CPU, paid by every ``sweeper`` command (status, export, each
resume), where ``scipy.special``, which ``scipy.stats`` itself calls for these, costs a
quarter of it. Same functions, same figures.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

_SQRT_2PI = math.sqrt(2.0 * math.pi)


def t_quantile(q: float, df: float) -> float:
    """Student's t with ``df`` degrees of freedom: the value below which ``q`` of it lies."""
    return float(special.stdtrit(df, q))


def chi2_quantile(q: float, df: float) -> float:
    """Chi-square with ``df`` degrees of freedom: the value below which ``q`` of it lies."""
    return float(special.chdtri(df, 1.0 - q))  # chdtri inverts the upper tail


def norm_cdf(x: Any) -> Any:
    """The standard normal's cdf, elementwise."""
    return special.ndtr(x)


def norm_logcdf(x: Any) -> Any:
    """log of the standard normal's cdf, accurate far in the lower tail, elementwise."""
    return special.log_ndtr(x)


def norm_pdf(x: Any) -> Any:
    """The standard normal's density, elementwise."""
    return np.exp(-0.5 * np.square(x)) / _SQRT_2PI
