"""Throughput benchmark of a running SGLang server over HTTP (httpx, streaming).

One benchmark = ``warmup`` unmeasured runs, then ``runs`` measured runs. A run is one round of
``concurrency`` concurrent streaming requests (threads sharing one ``httpx.Client``). Per
request we time the first token and the end of the stream, read the token count from the
server's usage / meta_info (a chunk may carry several tokens when a verify step accepts
several drafts, so chunks are never counted) and keep the generated text for the lossless
check. Runs with errors or short outputs are flagged and excluded from the statistics.

Failure handling, and why it looks like this (measure/runner.py does it): a transport
error (connection refused or cut, a stalled stream, a 5xx) may mean the server process
died, which is the configuration's fault and must become a crash trial, or a blip on the
network, which deserves a retry. So on a transport error we first ask ``check_server()``
(it raises ``ConfigurationFailure`` when the process is gone) and only then retry, within
a hard time budget; when retries run out we raise ``BenchmarkTransportError`` (the
infrastructure's fault). A server that answers with an error event or a 4xx is not
retried: asking again gives the same answer.

Typical use::

    result = run_benchmark("http://127.0.0.1:30000", BenchSpec(runs=5))
    print(result.value, result.stats.ci_low, result.stats.ci_high)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import httpx

from sweeper.errors import BenchmarkInterrupted
from sweeper.measure.accept import acceptance_per_position, window_accept_length
from sweeper.measure.prompts import PromptSet, load_prompts
from sweeper.measure.runner import Runner
from sweeper.measure.runs import BenchmarkError, BenchResult, RunResult
from sweeper.measure.stats import Stats, summarize
from sweeper.study import BenchSpec


def rounds_accept_length(readings: list[tuple[float | None, int]]) -> float | None:
    """The measured rounds' accept length from per-round server readings.

    SGLang 0.5.23 zeroes its accept counters on every /flush_cache and adds to them only at
    each decode log line, so a reading taken after a round holds that round's logged
    intervals (the last --decode-log-interval - 1 iterations not yet counted; a round
    shorter than one interval reports nothing). Rounds are pooled as tokens / verify steps:
    sum(tokens) / sum(tokens / accept length) over the rounds that reported.
    """
    usable = [(a, t) for a, t in readings if a is not None and a > 0 and t > 0]
    if not usable:
        return None
    return sum(t for _, t in usable) / sum(t / a for a, t in usable)


def _fmt_run(run: RunResult, label: str) -> str:
    if not run.ok:
        return f"{label}: ERROR {run.error}"
    short = " (SHORT: fewer than max_tokens)" if run.short else ""
    return f"{label}: {run.tok_s:.1f} tok/s{short}"


def run_benchmark(
    base_url: str,
    spec: BenchSpec,
    *,
    on_progress: Callable[[str], None] | None = None,
    check_server: Callable[[], None] | None = None,
    prompts: PromptSet | None = None,
    api_key: str | None = None,
    more: Callable[[list[float]], int] | None = None,
    first_round: int = 0,
    on_run: Callable[[RunResult], None] | None = None,
) -> BenchResult:
    """Benchmark the server at ``base_url``: warm-up, measured runs, statistics.

    ``check_server`` is called between runs and after any transport error (possibly from a
    worker thread); it should raise ``ConfigurationFailure`` when the server process died.
    Raises ``BenchmarkTransportError`` when the server cannot be reached after retries and
    ``BenchmarkError`` when no measured run was usable.

    ``api_key``: the server's ``--api-key``, sent as ``Authorization: Bearer`` on every
    request (SGLang answers 401 without it). It is a header only: never in a result, a
    message or a log line.

    ``more``: asked after the ``runs`` measured runs, with the counted runs' tok/s, how many
    further runs to make (0: stop); asked again after those, up to ``spec.max_runs`` in all
    (only when ``spec.extends``).

    ``first_round``: where in the prompt set's one sequence the measured runs start, in
    rounds of ``concurrency`` prompts: the rounds this configuration was measured with
    before (measure/prompts.next_round), so a replicate or confirm visit continues where
    the previous batch stopped; 0 for a configuration's first benchmark. Warm-up run w sends
    the prompts of measured run w (the cache is flushed in between).

    ``on_run``: called with every measured run once it is done (a Ctrl-C handled in another
    thread keeps them: run/worker.py).
    """
    prompt_set = prompts or load_prompts(spec.prompts, spec.input_tokens)
    progress = on_progress or (lambda _msg: None)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    timeout = httpx.Timeout(
        connect=spec.connect_timeout,
        read=min(spec.stall_timeout, spec.request_timeout),
        write=spec.connect_timeout,
        pool=spec.request_timeout,
    )
    streams = spec.concurrency
    assert isinstance(streams, int), "run_benchmark measures one level (BenchSpec.at_level)"
    limits = httpx.Limits(max_connections=streams + 2, max_keepalive_connections=None)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with (
        httpx.Client(timeout=timeout, limits=limits, headers=headers) as client,
        ThreadPoolExecutor(max_workers=streams, thread_name_prefix="bench") as pool,
    ):
        runner = Runner(base_url, spec, prompt_set, client, check_server)
        if spec.api == "chat" and runner.model is None:
            runner.model = runner.resolve_model()
        a_start = runner.server_accept_length()
        warm: list[RunResult] = []
        unflushed = 0
        # a server whose accept average a flush empties (0.5.23) is read after every round
        per_round: list[tuple[float | None, int]] | None = None
        decided = False

        def one_round(index: int, warmup: bool) -> RunResult:
            """A round from an empty cache (benchmark.flush_cache), the server checked."""
            nonlocal unflushed, per_round, decided
            runner.check_server()
            flushed = runner.flush_cache()
            unflushed += not flushed
            if not warmup and not decided and flushed and spec.flush_cache:
                # first measured round: did the flush empty the server's accept average?
                decided = True
                per_round = [] if runner.server_accept_length() is None else None
            run = runner.run_round(pool, index, warmup=warmup,
                                   prompt_round=first_round + index)
            if per_round is not None and not warmup:
                per_round.append((runner.server_accept_length(),
                                  sum(r.completion_tokens for r in run.requests)))
            if on_run is not None and not warmup:
                on_run(run)
            return run

        for w in range(spec.warmup):
            warm.append(one_round(w, warmup=True))
            progress(_fmt_run(warm[-1], f"warm-up {w + 1}/{spec.warmup}"))
        a_before = runner.server_accept_length() if spec.warmup else a_start
        runs: list[RunResult] = []
        try:
            for i in range(spec.runs):
                runs.append(one_round(i, warmup=False))
                progress(_fmt_run(runs[-1], f"run {i + 1}/{spec.runs}"))
            cap = spec.max_runs or 0
            ask = more if spec.extends else None
            while ask is not None and len(runs) < cap:
                extra = min(ask([r.per_request_tok_s for r in runs if r.counted]),
                            cap - len(runs))
                if extra <= 0:
                    break
                for _ in range(extra):
                    runs.append(one_round(len(runs), warmup=False))
                    progress(_fmt_run(runs[-1], f"run {len(runs)} (close to the best: "
                                                f"measured longer, at most {cap})"))
        except KeyboardInterrupt as exc:
            # the runs already measured are not thrown away with the interrupted one
            raise BenchmarkInterrupted(
                {streams: [r.per_request_tok_s for r in runs if r.counted]}) from exc
        a_after = runner.server_accept_length()

    def tokens(rs: list[RunResult]) -> int:
        return sum(r.completion_tokens for run in rs for r in run.requests)

    accept, source = window_accept_length(a_start, a_before, a_after, tokens(warm), tokens(runs))
    if per_round is not None:
        accept = rounds_accept_length(per_round)
        source = "server_rounds" if accept is not None else "none"
    hist: list[int] | None = None
    measured = [r for run in runs for r in run.requests if r.ok]
    verify = sum(r.spec_verify_ct or 0 for r in measured)
    if verify > 0:
        # /generate reports verify steps per request: exact, no estimate needed.
        accept, source = sum(r.completion_tokens for r in measured) / verify, "generate_meta"
    hists = [r.spec_accept_histogram for r in measured if r.spec_accept_histogram]
    if hists:
        hist = [0] * max(len(h) for h in hists)
        for h in hists:
            for k, v in enumerate(h):
                hist[k] += v

    counted = [r.tok_s for r in runs if r.counted]
    result = BenchResult(
        runs=runs,
        warmup_runs=warm,
        stats=summarize(counted) if counted else Stats(0, *(math.nan,) * 7),
        spec=spec,
        prompt_hash=prompt_set.hash,
        base_url=base_url,
        model=runner.model,
        started_at=started,
        duration_s=time.perf_counter() - t_start,
        accept_length=accept,
        accept_length_source=source,
        accept_length_server={"start": a_start, "before": a_before, "after": a_after},
        accept_histogram=hist,
        per_position_acceptance=acceptance_per_position(hist) if hist else None,
        cache_flush_failures=unflushed if spec.flush_cache else None,
    )
    if not counted:
        reasons = sorted({run.error or "short output" for run in runs})
        raise BenchmarkError(f"no usable measured run at {base_url}: {'; '.join(reasons)}", result)
    return result

