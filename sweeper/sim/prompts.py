"""What a prompt does to acceptance on the simulated server (a test double).

A draft model predicts code, extraction and arithmetic better than a story: published
EAGLE-3 model cards give one draft an accept length of 5.3 on HumanEval and 3.5 on MT-Bench.
The profile's ``noise.categories`` say which words put a prompt in which category and how
much that scales its acceptance; ``noise.prompt_sd`` adds a fixed factor per prompt (seeded
by its words). Both scale with --sim-noise, like every other departure from the model.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Iterable

from sweeper.sim.profiles import Profile, PromptCategory

# role names a transcript may add around the same contents (/generate's plain text)
_ROLE_WORDS = frozenset({"user", "assistant", "system"})


def category(profile: Profile, text: str) -> PromptCategory | None:
    """The first category of the profile whose words the prompt contains."""
    low = text.lower()
    for cat in profile.noise.categories:
        if any(w in low for w in cat.words):
            return cat
    return None


def accept_factor(profile: Profile, text: str, scale: float = 1.0) -> float:
    """The prompt's acceptance factor at --sim-noise ``scale`` (1.0: none)."""
    if scale == 0 or not (profile.noise.categories or profile.noise.prompt_sd):
        return 1.0
    return _factor(profile, text) ** scale


def _factor(profile: Profile, text: str) -> float:
    cat = category(profile, text)
    f = cat.accept if cat is not None else 1.0
    if profile.noise.prompt_sd:
        f *= math.exp(profile.noise.prompt_sd * random.Random(_key(text)).gauss(0.0, 1.0))
    return f


def _key(text: str) -> int:
    """A seed from the prompt's words, the same for its chat and its /generate form."""
    words = sorted(set(re.findall(r"[a-z0-9]+", text.lower())) - _ROLE_WORDS)
    return int.from_bytes(hashlib.sha256(" ".join(words).encode()).digest()[:8], "big")


def mean_factor(profile: Profile, texts: Iterable[str]) -> float:
    """The mean acceptance factor over a prompt set (for a quick look; the ground truth
    averages tok/s over the prompts, not factors)."""
    fs = [accept_factor(profile, t) for t in texts]
    return sum(fs) / len(fs) if fs else 1.0
