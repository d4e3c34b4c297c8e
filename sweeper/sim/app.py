"""Process lifecycle of the simulated server: start-up phases, failures, signals, shutdown.

Start-up mirrors SGLang: HTTP up at once (/health 503), weight loading, then the NCCL /
memory failures a configuration hits, CUDA-graph capture, a warm-up generation, and
"The server is fired up and ready to roll!". SIGTERM/SIGINT end the process within a
fraction of a second with exit code 0, in every phase, hang included.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from sweeper.sim import adaptive, fatal, model
from sweeper.sim.cli import launch_args, parse_args
from sweeper.sim.engine import Engine, NoiseSource
from sweeper.sim.faults import ActiveFaults, FaultSpecError, active_faults, parse_cli_fault
from sweeper.sim.log import SimLog
from sweeper.sim.model import WARMUP_TOKENS, InvalidArgs, SimConfig
from sweeper.sim.profiles import Profile, ProfileError, load_profile
from sweeper.sim.server import AppState, SimHTTPServer


def _chatter(megabytes: float) -> None:
    """``--sim-chatty``: numbered filler lines, written straight to stdout in big blocks
    (a debug-level server can print hundreds of MB in a start)."""
    line = "[SIM chatty] DEBUG filler line {:09d} " + "." * 60 + "\n"
    total, n, block = int(megabytes * 1_000_000), 0, []
    written = 0
    while written < total:
        text = line.format(n)
        block.append(text)
        written += len(text)
        n += 1
        if len(block) == 4096:
            sys.stdout.write("".join(block))
            block = []
    sys.stdout.write("".join(block))
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sweeper.sim``; returns the exit code."""
    ns = parse_args(sys.argv[1:] if argv is None else argv)
    log = SimLog()
    try:
        profile = load_profile(ns.sim_profile)
        cli_faults = [parse_cli_fault(text) for text in ns.sim_fault]
    except (ProfileError, FaultSpecError) as exc:
        print(f"python -m sweeper.sim: error: {exc}", file=sys.stderr)
        return 2
    log.info(
        f"SIMULATED SGLang server (sweeper.sim test double, not real hardware; all figures "
        f"are modelled): profile {profile.name}: {profile.description}"
    )
    for name in ns.sim_echo_env:
        # deliberately verbatim, secrets included: tests prove the sweeper scrubs them
        value = os.environ.get(name)
        log.info(f"{name}={value}" if value is not None else f"{name} is not set")
    if ns.sim_chatty > 0:
        _chatter(ns.sim_chatty)
    try:
        cfg = model.resolve_config(profile, launch_args(ns), os.environ)
    except InvalidArgs as exc:
        fatal.invalid_args(log, exc)
        return 1
    for note in ns.deprecations:  # SGLang warns while parsing, before anything else
        log.warning(note)
    for warning in cfg.warnings:
        log.warning(warning)
    faults = active_faults(profile, cfg, cli_faults)
    if faults:
        log.info("SIMULATED fault(s) of this launch: " + "; ".join(faults.describe()))
    state = AppState(
        profile=profile,
        model_path=ns.model_path,
        served_model_name=ns.served_model_name or ns.model_path,
        server_args=server_args(ns, cfg),
        log=log,
        api_key=ns.api_key,
        faults=faults,
    )
    # SGLang prints every field, secrets included (api_key='...'): so does the simulator
    shown = ", ".join(f"{k}={v!r}" for k, v in state.server_args.items())
    log.info(f"server_args=ServerArgs({shown})")
    if cfg.adaptive is not None:
        log.info(f"AdaptiveSpeculativeParams initialized: steps={cfg.steps}, "
                 f"candidate_steps={cfg.adaptive.candidate_steps}, "
                 f"slots={dict(adaptive.describe(cfg.adaptive))}")
    try:
        httpd = SimHTTPServer((ns.host, ns.port), state)
    except OSError as exc:
        log.info(f"ERROR: [Errno {exc.errno}] error while attempting to bind on address "
                 f"({ns.host!r}, {ns.port}): {exc.strerror}")
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    http_thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="sim-http", daemon=True
    )
    http_thread.start()
    try:
        return _start_and_serve(ns, profile, cfg, state, stop, log, faults)
    finally:
        if state.engine is not None:
            state.engine.stop()
        httpd.shutdown()
        httpd.server_close()
        if stop.is_set():
            log.info("Received SIGTERM/SIGINT: the simulated server exits.")


def server_args(ns: argparse.Namespace, cfg: SimConfig) -> dict[str, Any]:
    """SGLang's ServerArgs fields (underscored) after defaults and adjustments."""
    args = {k: v for k, v in vars(ns).items()
            if not k.startswith("sim_") and k not in ("config", "deprecations")}
    args.update(
        tokenizer_path=ns.tokenizer_path or ns.model_path,
        served_model_name=ns.served_model_name or ns.model_path,
        tp_size=cfg.tp,
        attn_dp_size=cfg.attn_dp,
        dp_size=1,
        enable_dp_attention=cfg.attn_dp > 1,  # resolved_dict reports it while DP attention runs
        mem_fraction_static=cfg.mem_fraction,
        cuda_graph_max_bs_decode=cfg.cuda_graph_max_bs,
        disable_cuda_graph=not cfg.cuda_graph,
        max_running_requests=cfg.max_running,
        attention_backend=ns.attention_backend or "fa3",
        # SGLang turns the flag off (with a warning) where adaptive is unsupported
        speculative_adaptive=cfg.adaptive is not None,
    )
    if cfg.speculative:
        args.update(
            speculative_algorithm=cfg.algorithm,
            speculative_num_steps=cfg.steps,
            speculative_eagle_topk=cfg.topk,
            speculative_num_draft_tokens=cfg.draft_tokens,
        )
        if "speculative_draft_tp_size" in args:  # only a build that has the flag
            args["speculative_draft_tp_size"] = cfg.draft_tp
    return args


def _phase_seconds(ns: argparse.Namespace, profile: Profile, cfg: SimConfig) -> tuple[float, float]:
    """(weight load, graph capture) seconds; --sim-startup-seconds rescales their sum."""
    load = profile.startup.load_seconds
    graphs = len(model.capture_batch_sizes(cfg.cuda_graph_max_bs)) if cfg.cuda_graph else 0
    if cfg.adaptive is not None:
        graphs *= 1 + sum(1 for s in cfg.adaptive.candidate_steps if s)  # a state per depth
    elif cfg.speculative:
        graphs *= 2  # draft graphs too
    capture = profile.startup.capture_seconds_per_graph * graphs
    if ns.sim_startup_seconds is not None:
        scale = max(ns.sim_startup_seconds, 0.0) / max(load + capture, 1e-9)
        load, capture = load * scale, capture * scale
    return load, capture


def _start_and_serve(
    ns: argparse.Namespace,
    profile: Profile,
    cfg: SimConfig,
    state: AppState,
    stop: threading.Event,
    log: SimLog,
    faults: ActiveFaults,
) -> int:
    load_s, capture_s = _phase_seconds(ns, profile, cfg)
    plan = model.memory_plan(profile, cfg)
    log.info("Init torch distributed begin.")
    log.info(f"Init torch distributed ends. mem usage=0.00 GB, tp_size={cfg.tp}")
    log.info(f"Load weight begin. avail mem={plan.total_gb * 0.99:.2f} GB")
    if stop.wait(load_s):
        return 0
    log.info(
        f"Load weight end. type={profile.model or 'SimModel'}, dtype=torch.bfloat16, "
        f"avail mem={plan.total_gb * 0.99 - plan.weights_gb:.2f} GB, "
        f"mem usage={plan.weights_gb:.2f} GB."
    )
    failure = model.startup_failure(profile, cfg)
    if failure and failure.kind == "nccl":
        fatal.nccl_error(log, failure)
        return 1
    if failure and failure.kind == "hang":
        fatal.hang_notice(log, cfg)
        while not stop.wait(0.1):
            pass  # never healthy, never exits on its own: for hang watchdogs
        return 0
    if failure and failure.detail.get("stage") == "kv":
        fatal.not_enough_memory(log)
        return 1
    engine = Engine(profile, cfg, log, NoiseSource(profile, ns.sim_seed, ns.sim_noise),
                    ns.decode_log_interval, faults)
    log.info(
        f"KV Cache is allocated. #tokens: {engine.max_total_tokens}, "
        f"KV size: {max(plan.kv_gb, 0):.2f} GB"
    )
    if cfg.cuda_graph:
        sizes = model.capture_batch_sizes(cfg.cuda_graph_max_bs)
        log.info(
            f"Capture cuda graph begin. This can take up to several minutes. "
            f"avail mem={plan.free_gb + profile.memory.activation_reserve_gb:.2f} GB"
        )
        log.info(f"Capture cuda graph bs {sizes}")
        if failure and failure.detail.get("stage") == "capture":
            # SGLang captures the largest batch first: the OOM comes early
            if stop.wait(capture_s * 0.1):
                return 0
            fatal.capture_oom(log, plan)
            return 1
        started = time.monotonic()
        if stop.wait(capture_s / 2 if cfg.speculative else capture_s):
            return 0
        if cfg.speculative:
            log.info("Capture draft cuda graph begin. This can take up to several minutes.")
            if stop.wait(capture_s / 2):
                return 0
            log.info(f"Capture draft cuda graph end. mem usage={plan.graph_gb / 3:.2f} GB.")
        log.info(
            f"Capture cuda graph end. Time elapsed: {time.monotonic() - started:.2f} s. "
            f"mem usage={plan.graph_gb:.2f} GB. avail mem={plan.free_gb - plan.graph_gb:.2f} GB."
        )
    log.info(
        f"max_total_num_tokens={engine.max_total_tokens}, chunked_prefill_size=8192, "
        f"max_prefill_tokens=16384, max_running_requests={cfg.max_running}, "
        f"context_len={profile.defaults.context_length}"
    )
    engine.start()
    state.startup_time = time.time()
    state.engine = engine
    log.info(f"INFO:     Started server process [{os.getpid()}]")
    log.info(f"INFO:     Uvicorn running on http://{ns.host}:{ns.port} (Press CTRL+C to quit)")
    if not ns.skip_server_warmup and not _warm_up(engine, stop):
        return 0
    state.ready.set()
    log.info("The server is fired up and ready to roll!")
    while not stop.wait(0.05):
        if engine.crashed:
            # the scheduler process died: SGLang's launcher tears the whole tree down
            fatal.sigquit(log)
            return 1
    return 0


def _warm_up(engine: Engine, stop: threading.Event) -> bool:
    """SGLang's warm-up generation; not noisy, so the seed drives client requests only."""
    req = engine.submit(prompt_seed=0, prompt_tokens=4, max_new=WARMUP_TOKENS, natural=None,
                        warmup=True)
    while not stop.is_set():
        try:
            kind, _ = req.events.get(timeout=0.05)
        except Exception:  # queue.Empty: keep waiting, stop-aware
            continue
        if kind in ("done", "abort"):
            return kind == "done"
    return False
