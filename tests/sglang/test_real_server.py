"""sweeper against the REAL SGLang 0.5.23 server (CPU, tiny random Llama).

One server is shared by the read-only checks (module fixture ``real_server``): the
preflight on the real ``--help``, ``sweeper bench`` with the real "Decode batch" lines
parsed by sweeper/measure/logs.py, /flush_cache. The taken-port case starts its own.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from sweeper.errors import ConfigurationFailure, PortBusy, PreflightError
from sweeper.launch import LaunchConfig
from sweeper.measure.logs import parse_decode_lines, strip_prefix, summarize_decode
from sweeper.remote import free_port
from sweeper.remote.local import LocalHost
from sweeper.remote.preflight import help_choices, launcher_help, preflight
from sweeper.remote.server import ServerManager
from tests.conftest import ROOT, run_cli
from tests.sglang.real import (
    NOTES,
    READY_LINE,
    START_DEADLINE,
    RealServer,
    server_env,
    server_flags,
    sglang_python,
    tail,
)
from tests.timeouts import scaled

pytestmark = pytest.mark.sglang

FLAGS = ROOT / "tests" / "fixtures" / "sglang-0.5.23-flags.json"


def test_preflight_reads_the_real_help(real_server: RealServer) -> None:
    host = LocalHost()
    argv = [str(sglang_python()), "-m", "sglang.launch_server"]
    wanted = ["model-path", "speculative-algorithm", "speculative-num-steps",
              "speculative-eagle-topk", "speculative-num-draft-tokens",
              "cuda-graph-max-bs-decode", "attention-backend"]
    report = preflight(host, argv, wanted, free_port(), "127.0.0.1", help_timeout=scaled(300))
    assert report.gpu_count is None  # no nvidia-smi on this machine
    # every long option of the recorded table is in the real --help the preflight read,
    # but the two 0.5.23 hides from it (help=argparse.SUPPRESS)
    table = json.loads(FLAGS.read_text())
    recorded = {o[2:] for row in table for o in row["option_strings"] if o.startswith("--")}
    hidden = {"forward-pass-metrics-ipc-name", "forward-pass-metrics-worker-id"}
    assert recorded - report.help_flags == hidden
    # what 0.5.23 does not have is refused before any start, naming the parameter
    with pytest.raises(PreflightError) as err:
        preflight(host, argv, {"speculative-draft-tp-size": "speculative-draft-tp-size",
                               "cuda-graph-max-bs": "cuda-graph-max-bs"},
                  free_port(), "127.0.0.1", help_timeout=scaled(300))
    assert "--cuda-graph-max-bs, --speculative-draft-tp-size" in str(err.value)
    # the choices the real --help prints are SGLang's own, every recorded flag's (the
    # launcher adds options of its own, e.g. --servicer-impl {python,rust}); a value
    # outside them is refused before any start
    text = launcher_help(host, argv, scaled(300))
    choices = help_choices(text)
    with_choices = {o[2:]: {str(c) for c in row["choices"]} for row in table
                    if row["choices"] for o in row["option_strings"] if o.startswith("--")}
    assert {name: choices.get(name) for name in with_choices} == with_choices
    with pytest.raises(PreflightError, match=r"--attention-backend 'fa9' is not a value this "
                                             r"SGLang build takes \(did you mean 'fa3'\?\)"):
        preflight(host, argv, wanted, free_port(), "127.0.0.1", help_text=text,
                  values={"attention-backend": ["fa9"]})
    # the port the real server holds is not taken for ours
    with pytest.raises(PortBusy):
        preflight(host, argv, wanted, real_server.port, "127.0.0.1",
                  help_timeout=scaled(300))


def test_bench_measures_the_real_server_and_its_log_lines_parse(
        real_server: RealServer) -> None:
    before = len(real_server.log().splitlines())
    proc = run_cli("bench", "--url", real_server.url, "--max-tokens", "48", "--runs", "2",
                   "--warmup", "1", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:] + tail(real_server.log_path)
    result = json.loads(proc.stdout)
    assert result["simulated"] is False
    assert result["n_runs"] == 2 and result["n_errors"] == 0 and result["n_short"] == 0
    assert result["value"] > 0 and result["model"] == str(real_server.model)
    assert result["cache_flush_failures"] == 0  # /flush_cache answered 200 before each run
    assert result["accept_length"] is None  # no speculation
    for run in result["runs"]:
        assert [r["completion_tokens"] for r in run["requests"]] == [48]

    window = "\n".join(real_server.log().splitlines()[before:])
    decode = [ln for ln in window.splitlines() if "Decode batch" in ln]
    prefill = [ln for ln in window.splitlines() if "Prefill batch" in ln]
    assert decode and prefill, window[-3000:]
    stats = parse_decode_lines(window)
    # every Decode line parses (3 requests x 48 tokens at --decode-log-interval 40), no
    # Prefill line is taken for one
    assert len(stats) == len(decode)
    for s in stats:
        assert s.running_req == 1 and s.queue_req == 0
        assert s.gen_throughput > 0 and s.token is not None and s.token > 0
        assert s.accept_len is None and s.accept_rate is None  # no speculation
        assert s.cuda_graph is False  # 0.5.23 on CPU writes "cpu graph: False"
    summary = summarize_decode(stats)
    assert summary.n_lines == len(decode) and summary.eager_lines == len(decode)
    NOTES.append(f"sweeper bench (48 tokens, 2 runs): {result['value']:.1f} tok/s; "
                 f"{len(decode)} Decode lines parsed, mean gen throughput "
                 f"{summary.gen_throughput:.1f} tok/s; real lines:")
    NOTES.extend(f"  {strip_prefix(ln)}" for ln in (prefill[0], decode[0]))


def test_flush_cache(real_server: RealServer) -> None:
    r = httpx.post(f"{real_server.url}/flush_cache", timeout=30)
    assert r.status_code == 200, r.text
    assert "Cache flushed" in r.text
    info = httpx.get(f"{real_server.url}/server_info", timeout=30).json()
    assert info["version"] == "0.5.23"
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] > 0


def test_a_taken_port_is_not_taken_for_a_healthy_server(tiny_model: Path,
                                                        tmp_path: Path) -> None:
    """The port is taken after the start: SGLang loads, says it is "ready to roll", and
    exits on the bind. The sweeper must say so (PortBusy: not the configuration's fault),
    never report it healthy nor blame the configuration."""
    host = LocalHost()
    manager = ServerManager(host, str(tmp_path / "host"), str(sglang_python()))
    port = free_port()
    config = LaunchConfig("{python} -m sglang.launch_server",
                          dict(server_flags(tiny_model, port)), server_env())
    handle = manager.start(config, "taken")
    stranger = socket.socket()
    try:
        stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        stranger.bind(("127.0.0.1", port))
        stranger.listen(64)  # accepts, never answers: not an HTTP server
        t0 = time.monotonic()
        with pytest.raises((PortBusy, ConfigurationFailure)) as err:
            manager.wait_healthy(handle, f"http://127.0.0.1:{port}",
                                 startup_timeout=scaled(START_DEADLINE),
                                 hang_timeout=scaled(START_DEADLINE))
        log = manager.log_tail(handle, 200_000)
        assert isinstance(err.value, PortBusy), f"{err.value}\n{log[-3000:]}"
        assert str(port) in str(err.value)
        NOTES.append(f"server start (port taken): exited after {time.monotonic() - t0:.0f} s;"
                     f" ready line printed first: {READY_LINE in log}; sweeper: {err.value}")
    finally:
        stranger.close()
        host.stop_group(handle.pgid, grace=20)
    assert not host.group_alive(handle.pgid)
