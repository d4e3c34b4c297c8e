"""A server launcher for the early Ctrl-C tests: ``python -m sweeper.sim ...`` (the real
simulator), except at one moment, where it holds without returning, so a test can press
Ctrl-C on the sweeper exactly there and not at a moment a sleep guessed.

    python tests/hold_launcher.py MODE FOLDER SECONDS -m sweeper.sim ARGS...

MODE ``help`` holds the preflight's ``--help``; ``start`` holds the first server start (a
later one, the resume's, runs the simulator); ``gate`` holds the first server start until
the test creates FOLDER/release-gate, then runs the simulator (the sweeper is then
certainly mid-sweep while the test acts, however slow the machine); ``nobase`` crashes
the server without speculation while FOLDER/broken exists (FOLDER/broken-PORT: on the
server of that port alone, one host of several); ``slowstop`` runs the
simulator as its child and, told to stop (SIGTERM), stops it but itself holds, as a real
server freeing a node's GPUs takes a while (SIGKILL ends it at once). Holding, it writes
its PID to FOLDER/held-MODE; it ends on its own after SECONDS, so it never outlives a test
that failed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def _hold(marker: Path) -> None:
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    tmp.rename(marker)  # whole, or not there: the test reads the PID from it


def _slow_stop(rest: list[str], marker: Path, seconds: float) -> None:
    child = subprocess.Popen([sys.executable, *rest])
    stopping = threading.Event()

    def on_term(signum: int, frame: object) -> None:
        if not stopping.is_set():
            stopping.set()
            child.terminate()
            _hold(marker)

    signal.signal(signal.SIGTERM, on_term)
    code = child.wait()
    if stopping.is_set():
        threading.Event().wait(seconds)  # the slow part of a stop; SIGKILL cuts it short
    sys.exit(code)


def main() -> None:
    mode, folder, seconds = sys.argv[1:4]
    rest = sys.argv[4:]
    marker = Path(folder) / f"held-{mode}"
    is_help = "--help" in rest
    is_server = rest[:2] == ["-m", "sweeper.sim"] and not is_help
    if mode == "slowstop":
        if is_server:
            _slow_stop(rest, marker, float(seconds))
        os.execv(sys.executable, [sys.executable, *rest])
    if mode == "nobase":
        # the server without speculation crashes while FOLDER/broken exists: a study whose
        # plain server cannot start (every configuration is that server and more)
        port = rest[rest.index("--port") + 1] if "--port" in rest[:-1] else ""
        if is_server and "--speculative-algorithm" not in rest and (
                (Path(folder) / "broken").exists()
                or (Path(folder) / f"broken-{port}").exists()):
            print("RuntimeError: CUDA error: an illegal memory access was encountered",
                  flush=True)
            sys.exit(1)
        os.execv(sys.executable, [sys.executable, *rest])
    if (mode == "help" and is_help) or (mode in ("start", "gate") and is_server
                                        and not marker.exists()):
        _hold(marker)
        release = Path(folder) / f"release-{mode}"
        deadline = time.monotonic() + float(seconds)
        while mode == "gate" and time.monotonic() < deadline:
            if release.exists():
                os.execv(sys.executable, [sys.executable, *rest])
            time.sleep(0.05)
        threading.Event().wait(max(deadline - time.monotonic(), 0.0))
        sys.exit(3)
    os.execv(sys.executable, [sys.executable, *rest])


if __name__ == "__main__":
    main()
