"""sweeper: find the fastest speculative-decoding configuration for an SGLang server."""

__version__ = "0.1.0"
