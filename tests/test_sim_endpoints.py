"""The simulator's HTTP surface as SGLang 0.5.23 serves it (entrypoints/http_server.py,
managers/scheduler_components/internal_state.py, metrics_reporter.py, tokenizer_manager.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from sweeper.sim.harness import SimProcess, http_get, http_post
from tests.sim_helpers import (
    EAGLE,
    FAST,
    refused_while_busy,
    spawn,
    spawner,
    sse_events,
)

__all__ = ["spawn"]

INTERVAL = 7


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    gen = spawner(tmp_path_factory.mktemp("sim-endpoints"))
    start = next(gen)
    try:
        server = start([*FAST, "--sim-seed", "3", "--sim-noise", "0", *EAGLE,
                        "--decode-log-interval", str(INTERVAL), "--enable-metrics"])
        server.wait_healthy()
        yield server
    finally:
        gen.close()


def get_json(url: str) -> dict:
    status, body = http_get(url)
    assert status == 200, body
    return json.loads(body)


def post(url: str, body: dict) -> object:
    status, text = http_post(url, body)
    assert status == 200, text
    return json.loads(text)


def generate_ids(url: str, ids: object, n: int) -> object:
    return post(url + "/generate", {"input_ids": ids, "sampling_params": {
        "max_new_tokens": n, "temperature": 0, "ignore_eos": True}})


def test_server_info_is_current_and_old_names_warn(sim: SimProcess) -> None:
    info = get_json(sim.url + "/server_info")
    state = info["internal_states"][0]
    assert state["world_size"] == 4
    assert state["effective_max_running_requests_per_dp"] == 48
    assert set(state["memory_usage"]) >= {"weight", "kvcache", "token_capacity", "graph"}
    assert "Endpoint '/get_server_info' is deprecated" not in sim.log()
    assert get_json(sim.url + "/get_server_info")["internal_states"][0].keys() == state.keys()
    assert ("Endpoint '/get_server_info' is deprecated and will be removed in a future "
            "version. Please use '/server_info' instead.") in sim.log()
    get_json(sim.url + "/get_model_info")
    assert "Endpoint '/get_model_info' is deprecated" in sim.log()
    assert http_get(sim.url + "/ready")[0] == 200


def test_accept_length_appears_after_a_decode_line_and_lags(sim: SimProcess) -> None:
    assert http_post(sim.url + "/flush_cache", {})[0] == 200  # resets the reporter
    assert "avg_spec_accept_length" not in get_json(sim.url + "/server_info")[
        "internal_states"][0]
    # fewer verify iterations than one interval: still nothing to report
    generate_ids(sim.url, [5, 6, 7], 6)
    assert "avg_spec_accept_length" not in get_json(sim.url + "/server_info")[
        "internal_states"][0]
    meta = generate_ids(sim.url, [8, 9], 120)["meta_info"]
    lines = re.findall(r"Decode batch, .*accept len: (\d+\.\d\d)", sim.log())
    assert lines
    reported = get_json(sim.url + "/server_info")["internal_states"][0]["avg_spec_accept_length"]
    # what the server reports counts the logged intervals only: not the request's own figure
    assert reported != pytest.approx(meta["spec_accept_length"], abs=1e-6)
    assert reported == pytest.approx(float(lines[-1]), abs=0.6)


def test_decode_line_is_0_5_23s(sim: SimProcess) -> None:
    generate_ids(sim.url, [1, 2, 3], 60)
    line = [x for x in sim.log().splitlines() if "Decode batch" in x][-1]
    assert line.endswith(re.search(r"#queue-req: \d+$", line).group(0))  # no trailing comma
    accept = float(re.search(r"accept len: (\d+\.\d\d)", line).group(1))
    rate = float(re.search(r"accept rate: (\d+\.\d\d)", line).group(1))
    # correct drafts / (verifies x (draft tokens - 1)), 4 draft tokens
    assert rate == pytest.approx((accept - 1) / 3, abs=0.011)


def test_generate_meta_info_names(sim: SimProcess) -> None:
    meta = generate_ids(sim.url, [1, 2, 3, 4], 50)["meta_info"]
    assert meta["prompt_tokens"] == 4 and meta["completion_tokens"] == 50
    verify = meta["spec_verify_ct"]
    hist = meta["spec_correct_drafts_histogram"]
    assert sum(hist) == verify and "spec_accept_histogram" not in meta
    correct = sum(n * h for n, h in enumerate(hist))
    assert meta["spec_num_correct_drafts"] == correct
    assert meta["spec_num_proposed_drafts"] == verify * 3
    assert meta["spec_accept_rate"] == pytest.approx(correct / (verify * 3))
    assert meta["spec_accept_length"] == pytest.approx(50 / verify)


def test_generate_batches_of_ids_and_texts(sim: SimProcess) -> None:
    out = generate_ids(sim.url, [[1, 2], [3, 4, 5]], 9)
    assert isinstance(out, list) and [o["index"] for o in out] == [0, 1]
    assert [o["meta_info"]["prompt_tokens"] for o in out] == [2, 3]
    texts = post(sim.url + "/generate", {"text": ["a b", "c"], "sampling_params": {
        "max_new_tokens": 5, "ignore_eos": True, "temperature": 0}})
    assert [o["meta_info"]["completion_tokens"] for o in texts] == [5, 5]
    status, body = http_post(sim.url + "/generate", {"sampling_params": {}})
    assert status == 400


def test_generate_batch_streams_with_index(sim: SimProcess) -> None:
    events = sse_events(sim.port, "/generate", {
        "input_ids": [[1, 2], [3]], "stream": True,
        "sampling_params": {"max_new_tokens": 12, "ignore_eos": True, "temperature": 0}})
    assert events[-1] == "[DONE]"
    finals = {}
    for event in events[:-1]:
        data = json.loads(event)
        if data["meta_info"].get("finish_reason"):
            finals[data["index"]] = data["meta_info"]
    assert sorted(finals) == [0, 1]
    assert all(m["completion_tokens"] == 12 for m in finals.values())


def test_v1_completions(sim: SimProcess) -> None:
    out = post(sim.url + "/v1/completions", {"prompt": "hello there", "max_tokens": 7,
                                             "temperature": 0, "ignore_eos": True})
    assert out["object"] == "text_completion" and out["usage"]["completion_tokens"] == 7
    assert len(out["choices"][0]["text"].split()) == 7
    events = sse_events(sim.port, "/v1/completions", {
        "prompt": "x", "max_tokens": 5, "stream": True, "ignore_eos": True,
        "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["usage"]["completion_tokens"] == 5


def test_metrics_only_with_enable_metrics(sim: SimProcess, spawn) -> None:
    status, body = http_get(sim.url + "/metrics")
    assert status == 200 and b"sglang:gen_throughput" in body
    plain = spawn(FAST)
    plain.wait_healthy()
    assert http_get(plain.url + "/metrics")[0] == 404


def test_flush_cache_timeout_waits_for_idle(spawn) -> None:
    server = spawn([*FAST, "--sim-startup-seconds", "0.05"])
    server.wait_healthy()
    with refused_while_busy(
        lambda: generate_ids(server.url, [1], 3000),  # ~4 s of simulated decoding
        lambda: http_post(server.url + "/flush_cache?timeout=0.01", {}),
        lambda status, body: status == 400 and b"Timed out waiting for idle state." in body,
    ) as busy:
        status, _ = http_post(server.url + "/flush_cache?timeout=60", {})
        assert status == 200
        # it waited until the request finished: the server is idle the moment it answers
        # (a flush that did not wait would leave the seconds-long request still running).
        # Asked of the server, not of the client thread, which a loaded machine can hold
        # back a while after the server sent its last token.
        status, body = http_post(server.url + "/flush_cache?timeout=0.01", {})
        assert status == 200, body
        busy.join(30)
        assert busy.done.is_set()
