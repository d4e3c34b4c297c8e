"""Deterministic output text: a function of the prompt only (speculation is lossless)."""

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


def prompt_seed(prompt: str) -> int:
    return int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big")


class TextSource:
    """Yields the same token sequence for the same seed; a token is one word."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._count = 0

    def take(self, n: int) -> list[str]:
        out = []
        for _ in range(n):
            word = self._rng.choice(_WORDS)
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
