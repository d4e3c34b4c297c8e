"""Fixtures for the tests against the REAL SGLang 0.5.23 (``make test-sglang``).

``make test-sglang`` installs SGLang into a venv cached outside the clone and names its
interpreter in ``SWEEPER_SGLANG_PYTHON``; without it these tests are skipped (``make
test`` never runs them). The server runs CPU-only on a tiny random Llama made here
(tiny_model.py), with the test-only ``sgl_kernel`` stand-in (stand_in/) first on its
PYTHONPATH. Every server is started in its own session and stopped by process group in a
``finally``, whatever the test did; a server that does not come up fails the test with
its log tail.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sglang.real import (
    NOTES,
    RealServer,
    sglang_env,
    sglang_python,
)

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("SWEEPER_SGLANG_PYTHON"):
        return
    skip = pytest.mark.skip(reason="needs SGLang 0.5.23 in a venv: run `make test-sglang`")
    for item in items:
        if "sglang" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The closing note: install and start-up times, the real log lines parsed."""
    if not NOTES:
        return
    terminalreporter.section("real SGLang 0.5.23: what was seen")
    for line in NOTES:
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama + tokenizer (``llama/``) and its EAGLE-3 draft (``eagle3/``) on
    local disk, made in the SGLang venv."""
    out = tmp_path_factory.mktemp("tiny-llama")
    t0 = time.monotonic()
    proc = subprocess.run([str(sglang_python()), str(HERE / "tiny_model.py"), str(out)],
                          capture_output=True, text=True, timeout=600,
                          env=sglang_env())
    assert proc.returncode == 0, f"tiny_model.py failed:\n{proc.stderr[-3000:]}"
    NOTES.append(f"tiny models made in {time.monotonic() - t0:.0f} s: {out}")
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny_models: Path) -> Path:
    return tiny_models / "llama"


@pytest.fixture(scope="session")
def tiny_draft(tiny_models: Path) -> Path:
    return tiny_models / "eagle3"


@pytest.fixture(scope="module")
def real_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[RealServer]:
    """One real SGLang server shared by a module's read-only checks; always stopped."""
    server = RealServer(tiny_model, tmp_path_factory.mktemp("real-server"))
    try:
        server.start()
        server.wait_ready("shared server")
        yield server
    finally:
        server.stop()
