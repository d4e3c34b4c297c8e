"""The simulated scheduler: one thread that batches requests and paces tokens in real time.

Like SGLang's scheduler it alternates prefill batches (new requests, first token each) and
decode iterations over the running batch; with speculation one iteration is a verify cycle
that hands each request its accepted drafts + 1 bonus token in one chunk. Time advances on
absolute monotonic deadlines computed by sweeper.sim.model, so sleep overshoot never adds
up and a client sees exactly the modelled rate. With --speculative-adaptive the steps of
each cycle come from SGLang's per-batch-size controller (sweeper.sim.adaptive), stepped
with the accepted counts of every verify, as sweeper.sim.model replays it.
"""

from __future__ import annotations

import math
import queue
import random
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from sweeper.sim import fatal, model, prompts
from sweeper.sim.faults import ActiveFaults
from sweeper.sim.log import SimLog
from sweeper.sim.model import SimConfig, StepPatterns
from sweeper.sim.profiles import Profile
from sweeper.sim.text import TextSource

# bytes of KV cache per token, to report SGLang-like token capacities
_KV_BYTES_PER_TOKEN = 70_000


class NoiseSource:
    """What a real node adds to the model (profiles.Noise), seeded: one speed factor for
    this server start, a slow random walk of the speed while it serves, per-request speed
    and acceptance factors drawn in request order, and each prompt's acceptance factor."""

    def __init__(self, profile: Profile, seed: int | None, scale: float,
                 clock: Any = time.monotonic) -> None:
        self._rng = random.Random(seed)
        self._profile, self._scale = profile, scale
        self._cycle_sd = profile.noise.cycle_sd * scale
        self._accept_sd = profile.noise.accept_sd * scale
        self._drift_sd = profile.noise.drift_sd * scale
        # drawn first, so a seed gives the same start factor whatever is served after
        self.start_factor = random_lognormal(self._rng, profile.noise.start_sd * scale)
        self._clock = clock
        self._last = clock()
        self._log_drift = 0.0
        self._lock = threading.Lock()

    def draw(self) -> tuple[float, float]:
        """(time factor, acceptance factor); (1, 1) with noise off."""
        if self._cycle_sd == 0 and self._accept_sd == 0 and self._drift_sd == 0:
            return 1.0 / self.start_factor, 1.0
        with self._lock:
            if self._drift_sd:
                now = self._clock()
                hours = max(0.0, now - self._last) / 3600.0
                self._last = now
                self._log_drift += self._rng.gauss(0.0, self._drift_sd * math.sqrt(hours))
            speed = self.start_factor * math.exp(self._log_drift)
            return (
                random_lognormal(self._rng, self._cycle_sd) / speed,
                random_lognormal(self._rng, self._accept_sd),
            )

    def prompt_factor(self, prompt: str | None) -> float:
        """The prompt's acceptance factor (sweeper.sim.prompts); 1 without a prompt."""
        return 1.0 if prompt is None else prompts.accept_factor(self._profile, prompt,
                                                                self._scale)


def random_lognormal(rng: random.Random, sd: float) -> float:
    return math.exp(rng.gauss(0.0, sd)) if sd else 1.0


@dataclass
class Finish:
    reason: str  # "length", "stop" or "abort"
    prompt_tokens: int
    completion_tokens: int
    e2e_latency: float
    verify_ct: int
    histogram: list[int]


@dataclass
class Request:
    rid: int
    prompt_tokens: int
    limit: int  # tokens to produce
    stop_reason: str  # why generation ends at `limit`: "length" or "stop"
    text: TextSource
    time_factor: float
    patterns: StepPatterns | None  # accepted-draft counts; None without speculation
    histogram: list[int]
    crash: bool = False  # crash_serving: the scheduler fails when this one is admitted
    arrival: float = field(default_factory=time.monotonic)
    produced: int = 0
    verify_ct: int = 0
    cancelled: bool = False
    events: queue.SimpleQueue[tuple[str, Any]] = field(default_factory=queue.SimpleQueue)

    def cancel(self) -> None:
        """The client went away: the scheduler drops the request at its next step."""
        self.cancelled = True


class Engine:
    """Scheduler thread + the counters /get_server_info reports."""

    def __init__(
        self,
        profile: Profile,
        cfg: SimConfig,
        log: SimLog,
        noise: NoiseSource,
        decode_log_interval: int = 40,
        faults: ActiveFaults | None = None,
    ) -> None:
        self.profile = profile
        self.cfg = cfg
        self.log = log
        self.noise = noise
        self.decode_log_interval = max(1, decode_log_interval)
        self.faults = faults or ActiveFaults()
        self.controller = model.new_controller(cfg)
        self.current_steps = cfg.steps
        self.generation_requests = 0
        self.crashed = False  # the scheduler died: the process must exit with code 1
        plan = model.memory_plan(profile, cfg)
        self.max_total_tokens = max(1, int(plan.kv_gb * 1e9 / _KV_BYTES_PER_TOKEN))
        self._cond = threading.Condition()
        self._pending: list[Request] = []
        self._running: list[Request] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sim-scheduler", daemon=True)
        self._next_rid = 0
        self._cycle_cache: dict[tuple[int, int], float] = {}
        self._window = _Window()
        # cumulative like SGLang 0.5.23's metrics reporter: added to at each decode log line
        # (so /server_info lags the window not yet logged), zeroed by a cache flush
        self.verify_ct_total = 0
        self.verify_tokens_total = 0
        self.last_gen_throughput = 0.0
        self._forward_ct = 0
        self._log_tic = time.monotonic()

    # ------------------------------------------------------------ public

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            doomed = self._pending + self._running
            self._pending = []
            self._cond.notify_all()
        for req in doomed:
            req.events.put(("abort", None))

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def busy(self) -> bool:
        with self._cond:
            return bool(self._pending or self._running)

    def avg_accept_length(self) -> float | None:
        """avg_spec_accept_length: None until a decode log line has counted a verify."""
        with self._cond:
            if not self.verify_ct_total:
                return None
            return self.verify_tokens_total / self.verify_ct_total

    def flush(self) -> bool:
        """Scheduler.flush_cache: only when idle; resets the metrics reporter's counters."""
        with self._cond:
            if self._pending or self._running:
                return False
            self.verify_ct_total = self.verify_tokens_total = 0
            self._forward_ct = 0
            self._window.restart()
            return True

    def submit(
        self, prompt_seed: int, prompt_tokens: int, max_new: int, natural: int | None,
        warmup: bool = False, prompt: str | None = None,
    ) -> Request:
        """Queue a request; ``natural`` is where EOS would stop it (None = ignore_eos);
        ``prompt``: its text, whose category sets its acceptance (sweeper.sim.prompts)."""
        time_factor, accept_factor = (1.0, 1.0) if warmup else self.noise.draw()
        if not warmup:
            accept_factor *= self.noise.prompt_factor(prompt)
        limit, reason = max(1, max_new), "length"
        if natural is not None and natural < limit:
            limit, reason = natural, "stop"
        patterns, histogram = None, []
        if self.cfg.speculative:
            patterns = StepPatterns(self.profile, self.cfg, accept_factor)
            # one slot per accepted count the deepest chain this server may run allows
            c = self.cfg
            depths = c.max_steps if c.adaptive else len(
                model.depth_candidates(c.steps, c.topk, c.draft_tokens))
            histogram = [0] * (depths + 1)
        with self._cond:
            self._next_rid += 1
            crash = False
            if not warmup:
                self.generation_requests += 1
                budget = self.faults.crash_after
                crash = budget is not None and self.generation_requests > budget
            req = Request(
                rid=self._next_rid,
                prompt_tokens=prompt_tokens,
                limit=limit,
                stop_reason=reason,
                text=TextSource(prompt_seed, self.faults.lossy_every or 0),
                time_factor=time_factor,
                patterns=patterns,
                histogram=histogram,
                crash=crash,
            )
            if self._stop.is_set():
                req.events.put(("abort", None))
                return req
            self._pending.append(req)
            self._cond.notify_all()
        return req

    # ------------------------------------------------------------ scheduler

    def _cycle_s(self, batch: int, steps: int) -> float:
        key = (batch, steps)
        if key not in self._cycle_cache:
            cfg = model.at_steps(self.cfg, steps)
            self._cycle_cache[key] = model.cycle_ms(self.profile, cfg, batch) / 1000.0
        return self._cycle_cache[key]

    def _sleep_until(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining > 0:
            self._stop.wait(remaining)

    def _run(self) -> None:
        try:
            self._loop()
        except SchedulerCrash:
            fatal.scheduler_crash(self.log)
            self.crashed = True
            self.stop()
        except Exception:
            # like SGLang: log it and stop serving (handlers see the engine stopped)
            self.log.raw("Scheduler hit an exception: " + traceback.format_exc())
            self.crashed = True
            self.stop()

    def _loop(self) -> None:
        clock = time.monotonic()
        window = self._window
        while not self._stop.is_set():
            with self._cond:
                self._running = [r for r in self._running if not r.cancelled]
                while not self._pending and not self._running and not self._stop.is_set():
                    self._cond.wait(0.1)
                room = max(0, self.cfg.max_running - len(self._running))
                new, self._pending = self._pending[:room], self._pending[room:]
                running = list(self._running)
                queued = len(self._pending)
            if self._stop.is_set():
                break
            if any(r.crash for r in new):
                raise SchedulerCrash  # crash_serving: this request's batch kills the scheduler
            if not running:
                # idle: the timeline restarts when the request arrived, not when this thread
                # got to run, so a late wake-up does not slow the request down
                now = time.monotonic()
                clock = max(clock, min((r.arrival for r in new), default=now))
            if new:
                factor = sum(r.time_factor for r in new) / len(new)
                duration = model.prefill_ms(self.profile, self.cfg, len(new)) * factor / 1000.0
                clock += duration
                window.busy += duration
                self._sleep_until(clock)
                if self._stop.is_set():
                    break
                for req in new:
                    self._emit(req, 1)
                self.log.info(
                    f"Prefill batch. #new-seq: {len(new)}, "
                    f"#new-token: {sum(r.prompt_tokens for r in new)}, #cached-token: 0, "
                    f"token usage: 0.00, #running-req: {len(running)}, #queue-req: {queued},"
                )
                with self._cond:
                    self._running.extend(r for r in new if r.produced < r.limit and not r.cancelled)
                continue
            factor = sum(r.time_factor for r in running) / len(running)
            batch = len(running)
            steps = self.cfg.steps
            if self.controller is not None:
                steps = self.controller.steps_for(batch)
            self.current_steps = steps
            duration = self._cycle_s(batch, steps) * factor
            clock += duration
            window.busy += duration
            self._sleep_until(clock)
            if self._stop.is_set():
                break
            accepted_all: list[int] = []
            for req in running:
                if req.cancelled:
                    continue
                n = 1
                if req.patterns is not None and steps:
                    accepted = req.patterns.next(steps)
                    accepted_all.append(accepted)
                    req.histogram[accepted] += 1
                    req.verify_ct += 1
                    n = accepted + 1
                    window.verify_ct += 1
                    window.verify_tokens += n
                elif req.patterns is not None:
                    accepted_all.append(0)  # a no-drafting cycle of an adaptive server
                n = min(n, req.limit - req.produced)
                window.tokens += n
                self._emit(req, n)
            with self._cond:
                self._running = [r for r in self._running if r.produced < r.limit]
            if self.controller is not None and accepted_all:
                switch = self.controller.observe(accepted_all, batch)
                if switch:
                    old, new_steps, ema = switch
                    self.log.info(f"Adaptive spec params updated: steps {old} -> {new_steps} "
                                  f"(ema_accept_len={ema:.2f})")
            with self._cond:
                self._forward_ct += 1
                log_now = self._forward_ct % self.decode_log_interval == 0
            if log_now:
                self._log_decode(running, queued, window)

    def _emit(self, req: Request, n: int) -> None:
        if req.cancelled or n <= 0:
            return
        req.produced += n
        req.events.put(("tokens", req.text.take(n)))
        if req.produced >= req.limit:
            req.events.put(
                ("done", Finish(
                    reason=req.stop_reason,
                    prompt_tokens=req.prompt_tokens,
                    completion_tokens=req.produced,
                    e2e_latency=time.monotonic() - req.arrival,
                    verify_ct=req.verify_ct,
                    histogram=list(req.histogram),
                ))
            )

    def _log_decode(self, running: list[Request], queued: int, window: _Window) -> None:
        """SGLang 0.5.23's line (metrics_reporter.report_decode_stats): gen throughput over
        the wall-clock gap since the last line, accept rate = correct drafts / (verifies x
        (draft tokens - 1)), no trailing comma."""
        now = time.monotonic()
        gen = window.tokens / max(now - self._log_tic, 1e-9)
        self._log_tic = now
        self.last_gen_throughput = gen
        tokens = sum(r.prompt_tokens + r.produced for r in running)
        graph = not model.eager(self.cfg, len(running))
        parts = [
            f"Decode batch, #running-req: {len(running)}, #token: {tokens}, "
            f"token usage: {tokens / self.max_total_tokens:.2f}, "
        ]
        if self.cfg.speculative and window.verify_ct:
            accept = window.verify_tokens / window.verify_ct
            draft_tokens = (self.current_steps + 1 if self.cfg.adaptive is not None
                            else self.cfg.draft_tokens)
            proposed = window.verify_ct * max(draft_tokens - 1, 0)
            correct = window.verify_tokens - window.verify_ct
            rate = correct / proposed if proposed else 0.0
            parts.append(f"accept len: {accept:.2f}, accept rate: {rate:.2f}, ")
            with self._cond:
                self.verify_ct_total += window.verify_ct
                self.verify_tokens_total += window.verify_tokens
        parts.append(
            f"cuda graph: {graph}, gen throughput (token/s): {gen:.2f}, #queue-req: {queued}"
        )
        self.log.info("".join(parts))
        window.restart()


class SchedulerCrash(Exception):
    """crash_serving: the simulated scheduler fails on the request that exceeds its budget."""


@dataclass
class _Window:
    """Counters between two decode log lines."""

    busy: float = 0.0
    tokens: int = 0
    verify_ct: int = 0
    verify_tokens: int = 0

    def restart(self) -> None:
        self.busy, self.tokens, self.verify_ct, self.verify_tokens = 0.0, 0, 0, 0
