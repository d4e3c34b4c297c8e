"""A server whose token counts cannot be true (ten times max_tokens, or fewer tokens than
the chunks it streamed) makes a benchmark error, never a tok/s figure. Real HTTP on
loopback (the scripted server of test_bench_http)."""

from __future__ import annotations

import pytest

from sweeper.measure import BenchmarkError, run_benchmark
from sweeper.measure.runner import implausible_count

from .test_bench_http import DONE, PROMPTS, FakeServer, chunk, fake, send_sse, spec, usage

__all__ = ["fake"]  # the fixture, imported for use here


@pytest.mark.parametrize("parts,needle", [
    ([chunk("Hel"), chunk("lo"), usage(80), DONE], "max_tokens 8"),  # 10 x max_tokens
    ([chunk("a"), chunk("b"), chunk("c"), chunk("d"), usage(2), DONE], "4 streamed chunks"),
])
def test_lying_token_counts_are_a_benchmark_error(fake: FakeServer, parts: list[str],  # noqa: F811
                                                  needle: str) -> None:
    fake.routes[("POST", "/v1/chat/completions")] = lambda h, b, n: send_sse(h, parts)
    try:
        res = run_benchmark(fake.url, spec(runs=1), prompts=PROMPTS)
    except BenchmarkError as exc:
        assert needle in str(exc) or "cannot be true" in str(exc), exc
        return
    assert res.n_errors > 0, "a lying run must not count"
    assert all(not r.ok and needle in (r.error or "") for run in res.runs for r in run.requests)


def test_true_counts_pass() -> None:
    assert implausible_count(8, 8, 3) is None  # several tokens in one chunk: speculative
    assert implausible_count(0, 8, 0) is None
