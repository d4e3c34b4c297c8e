"""Deterministic output text: a function of the prompt only (speculation is lossless),
unless a ``lossy`` fault (sweeper.sim.faults) corrupts it the way a broken kernel would."""

from __future__ import annotations

import hashlib
import random

_VOCABULARY = (
    "the model decodes tokens while a small draft proposes several and the target verifies "
    "them in one forward pass so accepted tokens arrive together and latency falls when the "
    "draft agrees often enough to pay for its own cost on every cycle of the server which "
    "streams results back to clients over HTTP as events with usage counted at the end "
    "kernels graphs memory cache batch request scheduler tensor parallel ranks exchange "
    "partial sums through collective operations over links between devices"
)
_WORDS = tuple(_VOCABULARY.split())
_DISTINCT = tuple(sorted(set(_WORDS)))


def prompt_seed(prompt: str) -> int:
    return int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big")


class TextSource:
    """Yields the same token sequence for the same seed; a token is one word.

    ``corrupt_every`` > 0 replaces one token in that many (positions every/2, every/2 +
    every, ...) by a different word: the rest of the stream is unchanged, so a comparison
    with the lossless output finds exactly those positions.
    """

    def __init__(self, seed: int, corrupt_every: int = 0) -> None:
        self._rng = random.Random(seed)
        self._count = 0
        self._every = corrupt_every

    def take(self, n: int) -> list[str]:
        out = []
        for _ in range(n):
            word = self._rng.choice(_WORDS)
            if self._every and self._count % self._every == self._every // 2:
                # a wrongly accepted draft token: some other word of the vocabulary
                others = [w for w in _DISTINCT if w != word]
                word = others[self._count % len(others)]
            self._count += 1
            # an occasional full stop keeps the text looking like prose
            out.append(" " + word + ("." if self._count % 17 == 0 else ""))
        return out


def natural_length(prompt: str) -> int:
    """Where the model would stop (EOS) without ignore_eos: 64..543 tokens."""
    return 64 + prompt_seed(prompt) % 480


def count_tokens(text: str) -> int:
    """Prompt 'tokens': words, at least one."""
    return max(1, len(text.split()))
