"""A secret given as a server flag (``api-key``, or a flag marked in ``server.secrets``)
never appears on the host's process list: it reaches the server through a FIFO ``--config``
YAML that holds it only while the server reads it (remote/secretflags.py). Every process's
command line on the node is read while a trial streams, over a real sshd on loopback (the
node is this machine) and locally; the server still answers only with the key, and no file
the host keeps holds it. Real parts: the simulator (SGLang 0.5.23's --config rules), the
CLI, SQLite, OpenSSH."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import optuna

from .conftest import SIM_LAUNCHER, run_cli, streaming_trial, wait_for
from .test_cli_errors import assert_one_line_error
from .test_faults_secrets_ssh import _cmdlines
from .test_sweep_ssh import opened, ssh_study, sweep

KEY = "sk-flag-" + "Qx7" * 8  # made up: what must never be on a command line
MARKED = "mk-served-" + "Lw4" * 6  # a value of a flag the name rule misses, marked secret
ARGS = {"model-path": "sim/demo-model", "tp-size": 4, "speculative-algorithm": "EAGLE3",
        "speculative-draft-model-path": "sim/demo-eagle3", "decode-log-interval": 8,
        "api-key": KEY}


def _watch(db: Path, seen: dict[str, object]) -> threading.Thread:
    def watcher() -> None:
        t = wait_for(lambda: streaming_trial(db), 90, "a streaming trial")
        seen["lines"] = [c for c in _cmdlines() if KEY.encode() in c or MARKED.encode() in c]
        seen["config"] = [c for c in _cmdlines() if b"--config" in c and b"sweeper" in c]
        seen["trial"] = t
    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    return thread


def _no_secret_in_files(folder: Path) -> None:
    """Nothing sweeper wrote holds a value: the study file is the user's, and a host log
    (0600) holds what the server printed (its args, as SGLang does), scrubbed when stored."""
    for path in folder.rglob("*"):
        if path.is_file() and path.name != "t.yaml":
            data = path.read_bytes()
            assert KEY.encode() not in data or path.suffix == ".log", path
            assert MARKED.encode() not in data or path.suffix == ".log", path


def test_secret_flags_never_on_the_process_list_locally(make_study, tmp_path: Path) -> None:
    study_file = make_study(server={
        "args": {**ARGS, "served-model-name": MARKED},
        "secrets": ["served-model-name"], "launcher": SIM_LAUNCHER},
        benchmark={"max_tokens": 300, "runs": 2, "warmup": 1})
    seen: dict[str, object] = {}
    thread = _watch(tmp_path / "t.db", seen)
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "2", "--keep-best")
    thread.join(timeout=5)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "lines" in seen, "the trial was never seen streaming"
    assert seen["lines"] == [], "a secret flag's value on a process's command line"
    assert seen["config"], "the server was started with the FIFO --config"
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}")
    kept = study.user_attrs["sweeper:kept_server"]
    url = f"http://127.0.0.1:{kept['port']}"
    # the server took both flags from the FIFO: it wants the key and serves the marked name
    assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401
    models = httpx.get(f"{url}/v1/models", timeout=10,
                       headers={"Authorization": f"Bearer {KEY}"}).json()
    assert [m["id"] for m in models["data"]] == [MARKED]
    _no_secret_in_files(tmp_path)
    assert KEY not in proc.stdout + proc.stderr and MARKED not in proc.stdout + proc.stderr
    assert not list(Path("/tmp").glob("sweeper-secrets.*")), "the FIFO's folder is removed"


def test_secret_flag_never_on_the_process_list_over_ssh(sshd, tmp_path: Path) -> None:
    spec = ssh_study(tmp_path, server={"args": ARGS},
                     benchmark={"max_tokens": 400, "runs": 2, "warmup": 1})
    host = sshd.ssh_host("gpu-test")
    pool = opened(spec, 1, host)
    seen: dict[str, object] = {}
    thread = _watch(tmp_path / "t.db", seen)
    sweep(pool)
    thread.join(timeout=5)
    assert "lines" in seen, "the trial was never seen streaming"
    assert seen["lines"] == [], "a secret flag's value on a process's command line"
    assert seen["config"], "the server was started with the FIFO --config"
    _no_secret_in_files(tmp_path)


def test_own_config_file_beside_a_secret_flag_is_refused(make_study, tmp_path: Path) -> None:
    (tmp_path / "flags.yaml").write_text("tp-size: 4\n")
    study_file = make_study(server={"args": {**ARGS, "config": str(tmp_path / "flags.yaml")}})
    proc = run_cli("validate", "--study", str(study_file))
    assert_one_line_error(proc, "server.args.config", "api-key")
    assert KEY not in proc.stderr + proc.stdout
