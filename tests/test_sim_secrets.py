"""Secrets in the simulator's log and API, like real SGLang: --api-key and --sim-echo-env."""

from __future__ import annotations

import json
import re

from sweeper.sim.harness import http_get, http_post, stream_chat
from tests.sim_helpers import EAGLE, FAST, spawn

__all__ = ["spawn"]

KEY = "sk-sim-4f1c9e"


def test_api_key_is_logged_in_server_args_and_guards_the_api(spawn) -> None:
    sim = spawn([*FAST, *EAGLE, "--api-key", KEY, "--sim-echo-env", "SIM_TOKEN",
                 "--sim-echo-env", "SIM_NOT_SET"], env={"SIM_TOKEN": "hf_secret_value"})
    sim.wait_healthy()  # /health needs no key
    log = sim.log()
    line = re.search(r"server_args=ServerArgs\((.*)\)$", log, re.MULTILINE)
    assert line is not None and f"api_key='{KEY}'" in line.group(1)
    assert "SIM_TOKEN=hf_secret_value" in log and "SIM_NOT_SET is not set" in log
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
            "temperature": 0, "ignore_eos": True}
    gen = {"text": "hi", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}
    good = {"Authorization": f"Bearer {KEY}"}
    for path, body in (("/v1/chat/completions", chat), ("/generate", gen)):
        status, payload = http_post(sim.url + path, body)
        assert status == 401 and json.loads(payload) == {"error": "Unauthorized"}
        assert http_post(sim.url + path, body, headers={"Authorization": "Bearer nope"}
                         )[0] == 401
        assert http_post(sim.url + path, body, headers=good)[0] == 200
    # SGLang's middleware guards every route but /health* and /metrics
    assert http_get(sim.url + "/get_server_info")[0] == 401
    info = json.loads(http_get(sim.url + "/get_server_info", headers=good)[1])
    assert info["api_key"] == KEY
    assert http_get(sim.url + "/health_generate")[0] == 200
    assert stream_chat(sim.url, "streamed", 20, api_key=KEY).completion_tokens == 20


def test_without_api_key_nothing_is_guarded(spawn) -> None:
    sim = spawn([*FAST])
    sim.wait_healthy()
    assert "api_key=None" in sim.log()
    assert http_get(sim.url + "/get_server_info")[0] == 200
    assert stream_chat(sim.url, "open", 5).completion_tokens == 5
