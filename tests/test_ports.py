"""The server's port: a stranger answering /health on it is never taken for our server;
`--port`; a port of its own for a local simulated study that sets none, so two demos at
once on one machine both finish."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from sweeper.errors import PortBusy
from sweeper.remote.host import Host, free_port
from sweeper.remote.server import ServerHandle, ServerManager
from sweeper.run.ports import AUTO_PORTS, auto_port, choose_port
from sweeper.study import load_study

from .conftest import ROOT
from .timeouts import duration, scaled


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stranger() -> Iterator[int]:
    """Another process's server (this test process's) answering /health 200 on a port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_strangers_health_is_not_taken_for_our_server(any_host: Host, stranger: int,
                                                         tmp_path: Path) -> None:
    # our "server": starts, never binds (the port is taken), then exits as SGLang does
    fake = tmp_path / "fake-server.sh"
    fake.write_text("#!/bin/bash\necho loading the model\nsleep 2\n"
                    "echo 'OSError: [Errno 98] Address already in use'\nexit 1\n")
    fake.chmod(0o755)
    manager = ServerManager(any_host, str(tmp_path / "work"), sys.executable)
    workdir = manager.workdir
    pgid = any_host.start_detached([str(fake)], env={}, cwd=workdir,
                                   log_path=f"{workdir}/s.log", exit_path=f"{workdir}/s.exit")
    handle = ServerHandle(any_host.name, pgid, stranger, "127.0.0.1", f"{workdir}/s.log",
                          f"{workdir}/s.exit", "cfg", time.time())
    try:
        with pytest.raises(PortBusy, match=f"port {stranger}"):
            manager.wait_healthy(handle, f"http://127.0.0.1:{stranger}",
                                 startup_timeout=scaled(30), hang_timeout=scaled(30))
    finally:
        any_host.stop_group(pgid, grace=2)


def test_our_server_is_recognised_on_its_port(tmp_path: Path) -> None:
    from sweeper.remote.local import LocalHost
    from sweeper.remote.owner import stranger_on_port

    host = LocalHost()
    port = free_port()
    pgid = host.start_detached([sys.executable, "-m", "http.server", str(port), "--bind",
                                "127.0.0.1"], env={}, cwd=str(tmp_path),
                               log_path=str(tmp_path / "l.log"), exit_path=str(tmp_path / "e"))
    try:
        from .conftest import wait_for

        wait_for(lambda: not host.port_free(port), 20, "the server's port")
        assert stranger_on_port(host, sys.executable, port, pgid) is None  # ours
        other = stranger_on_port(host, sys.executable, port, os.getpgid(0))
        assert other is not None and other.split()[0] != str(os.getpid())  # not the test's
        assert "http.server" in other
    finally:
        host.stop_group(pgid, grace=2)


def test_the_chosen_port_is_stable_per_storage_and_skips_a_busy_one(tmp_path: Path) -> None:
    a = auto_port(f"sqlite:///{tmp_path / 'a.db'}", "demo")
    assert a == auto_port(f"sqlite:///{tmp_path / 'a.db'}", "demo")  # a resume finds it
    assert a in AUTO_PORTS
    others = {auto_port(f"sqlite:///{tmp_path / f'{i}.db'}", "demo") for i in range(8)}
    assert len(others) >= 7  # another storage, another port (1 in 10000 collide)
    with socket.socket() as holder:
        try:
            holder.bind(("127.0.0.1", a))
        except OSError:
            pytest.skip(f"port {a} is taken on this machine")
        holder.listen()
        moved = auto_port(f"sqlite:///{tmp_path / 'a.db'}", "demo")
    assert moved != a and moved in AUTO_PORTS


def test_port_option_and_which_studies_get_a_chosen_port(make_study) -> None:
    demo = load_study("demo")
    assert "port" not in demo.server.model_fields_set
    chosen = choose_port(demo, "sqlite:///x.db")
    assert chosen.spec.server.port in AUTO_PORTS and "--port" in (chosen.note or "")
    assert choose_port(demo, "sqlite:///x.db", 41234).spec.server.port == 41234
    pinned = load_study(str(make_study()))  # sets server.port: kept as it is
    assert choose_port(pinned, pinned.storage).spec.server.port == pinned.server.port
    kimi = load_study("eagle3-kimi")  # a real node: its own port, never a chosen one
    assert choose_port(kimi, kimi.storage).spec.server.port == kimi.server.port


def _demo_copy(tmp_path: Path, name: str) -> Path:
    """studies/demo.yaml as shipped (no server.port), its storage and workdir under tmp,
    a short benchmark so two sweeps on a loaded machine take a minute, not ten."""
    data = yaml.safe_load((ROOT / "studies" / "demo.yaml").read_text())
    assert "port" not in data["server"]
    data["storage"] = f"sqlite:///{tmp_path / name}.db"
    data["hosts"][0]["workdir"] = str(tmp_path / f"{name}-host")
    data["benchmark"].update(runs=2, max_runs=2, max_tokens=60)
    data["server"]["startup_timeout"] = duration(60)
    data["server"]["hang_timeout"] = duration(8)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_two_demos_at_once_on_one_machine_both_finish(tmp_path: Path) -> None:
    studies = [_demo_copy(tmp_path, n) for n in ("one", "two")]
    env = {**os.environ, "COLUMNS": "200"}
    procs = [subprocess.Popen([sys.executable, "-m", "sweeper", "optimize", "--study", str(s),
                               "--trials", "3", "--no-confirm"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for s in studies]
    outs = [p.communicate(timeout=scaled(600)) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err + out
        assert "its own on this machine: the study sets no server.port" in out
    ports = set()
    for s in studies:
        study = optuna.load_study(study_name="demo", storage=f"sqlite:///{s.with_suffix('.db')}")
        done = study.get_trials(states=(TrialState.COMPLETE,))
        assert done and not study.get_trials(states=(TrialState.FAIL,))
        ports |= {t.user_attrs["server"]["port"] for t in done if t.user_attrs.get("server")}
    assert len(ports) == 2  # each on its own port
