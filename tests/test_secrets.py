"""Secrets (issue 16): the server gets them, the benchmark client authenticates with the
key, nothing sweeper writes or prints holds them, and `export` writes references that
still start a server that accepts the key.

The simulator writes both secrets into its own log, like SGLang prints its ServerArgs
(``api_key='...'``) and like a server that logs its environment (``--sim-echo-env``): the
raw logs on the host are checked to hold them, so the scrubbing is really exercised.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import httpx
import optuna
import pytest
import yaml
from optuna.trial import TrialState

from sweeper.remote import free_port

from .conftest import SIM_LAUNCHER, kill_group, run_cli, wait_http_ok

TOKEN = "hf_tok_5e3a91c7"
KEY = "sk-key-8d2f40b6"


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


@pytest.fixture
def swept(make_study, tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    study_file = make_study(server={
        "launcher": SIM_LAUNCHER + " --sim-echo-env HF_TOKEN",
        "env": {"HF_TOKEN": TOKEN, "NCCL_DEBUG": "WARN"},
        "args": {"model-path": "sim/demo-model", "tp-size": 4, "api-key": KEY,
                 "speculative-algorithm": "EAGLE3",
                 "speculative-draft-model-path": "sim/demo-eagle3"}})
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "2")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return study_file, proc


def test_the_client_authenticates_and_nothing_written_holds_a_secret(swept, tmp_path: Path
                                                                     ) -> None:
    study_file, proc = swept
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}")
    done = study.get_trials(states=(TrialState.COMPLETE,))
    # measured: the server answers 401 to a client without the key
    assert len(done) == 2, [t.user_attrs.get("failure_msg") for t in study.get_trials()]
    # the server really logged both secrets: a scrubber that missed one would be caught
    raw = "".join(p.read_text() for p in (tmp_path / "host").rglob("*.log"))
    assert f"HF_TOKEN={TOKEN}" in raw and f"api_key='{KEY}'" in raw
    # ... and sweeper kept those logs, scrubbed
    logs = [p for p in files_under(tmp_path / "t.artifacts") if b"Decode batch" in p.read_bytes()]
    assert logs, "the server logs are artifacts"
    assert any(b"HF_TOKEN=***" in p.read_bytes() for p in logs)
    status = run_cli("status", "--study", str(study_file), "--all")
    written = [tmp_path / "t.db", *files_under(tmp_path / "t.artifacts")]
    for secret in (TOKEN, KEY):
        for path in written:
            assert secret.encode() not in path.read_bytes(), (secret, path)
        assert secret not in proc.stdout + proc.stderr + status.stdout + status.stderr
    # the stored command is a reference that still starts the same server
    command = done[0].user_attrs["launch"]["command"]
    assert 'HF_TOKEN="$HF_TOKEN"' in command and '--api-key "$SGLANG_API_KEY"' in command


def test_export_writes_references_that_start_a_server_with_the_key(swept, tmp_path: Path
                                                                   ) -> None:
    study_file, _ = swept
    out = tmp_path / "best.yaml"
    proc = run_cli("export", "--study", str(study_file), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    env_file = out.with_suffix(".env")
    for text in (out.read_text(), env_file.read_text(), out.with_suffix(".sh").read_text(),
                 proc.stdout):
        assert TOKEN not in text and KEY not in text and "***" not in text
    # docker --env-file / systemd: the secret is a reference by name, never its value
    assert "HF_TOKEN" in env_file.read_text().splitlines()
    assert "api-key" not in yaml.safe_load(out.read_text())  # SGLang's YAML has no variables
    assert "secrets are not written: set HF_TOKEN, SGLANG_API_KEY before launching" \
        in proc.stdout
    launch = next(ln for ln in proc.stdout.splitlines() if ln.startswith("launch: "))
    command = launch.removeprefix("launch: ")
    assert command.endswith('--api-key "$SGLANG_API_KEY")')
    assert "port" not in yaml.safe_load(out.read_text())  # where the sweep ran it
    port = free_port()
    command = command[:-1] + f" --port {port})"
    url = f"http://127.0.0.1:{port}"
    base_env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "SGLANG_API_KEY")}

    # without the secrets set, the launch stops at once and says which one is missing
    refused = subprocess.run(["bash", "-c", command], env=base_env, capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode != 0 and "set HF_TOKEN" in refused.stderr

    # with them, the exported launch starts a server that wants exactly that key
    server = subprocess.Popen(["bash", "-c", command], start_new_session=True,
                              env={**base_env, "HF_TOKEN": TOKEN, "SGLANG_API_KEY": KEY},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_http_ok(f"{url}/health", 60, server)
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        chat = f"{url}/v1/chat/completions"
        assert httpx.post(chat, json=body, timeout=30).status_code == 401
        good = httpx.post(chat, json=body, timeout=30,
                          headers={"Authorization": f"Bearer {KEY}"})
        assert good.status_code == 200, good.text
        info = httpx.get(f"{url}/get_server_info", timeout=30,
                         headers={"Authorization": f"Bearer {KEY}"}).json()
        assert info["api_key"] == KEY and info["tp_size"] == 4
    finally:
        kill_group(server.pid)
        server.wait(timeout=10)
    log = server.stdout.read() if server.stdout else ""
    assert re.search(rf"HF_TOKEN={TOKEN}", log), "the server got the token from the env file"


def test_a_secret_is_shown_as_a_reference_in_every_rendering() -> None:
    from sweeper.launch import LaunchConfig

    cfg = LaunchConfig(args={"model-path": "m", "api-key": KEY, "hf-token": TOKEN},
                       env={"HF_TOKEN": TOKEN, "NCCL_ALGO": "Ring"})
    line = cfg.command_line("python3")
    assert KEY not in line and TOKEN not in line and "***" not in line
    assert '--api-key "$SGLANG_API_KEY" --hf-token "$SGLANG_HF_TOKEN"' in line
    env = {"HF_TOKEN": TOKEN, "SGLANG_API_KEY": KEY, "SGLANG_HF_TOKEN": TOKEN}
    argv = subprocess.run(["bash", "-c", line.replace("python3", "printf '%s\\n'", 1)],
                          env={**os.environ, **env}, capture_output=True, text=True,
                          check=True).stdout.splitlines()
    assert argv == ["-m", "sglang.launch_server", "--model-path", "m", "--api-key", KEY,
                    "--hf-token", TOKEN]
    assert sum(ln.startswith("export ") for ln in cfg.env_file().splitlines()) == 4
    assert TOKEN not in cfg.env_file()
    assert "NCCL_ALGO=Ring" in cfg.env_file()
    assert yaml.safe_load(cfg.sglang_yaml()) == {"model-path": "m"}
    assert yaml.safe_load(cfg.sglang_yaml(redact=False))["api-key"] == KEY

