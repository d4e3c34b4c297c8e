"""A 20-trial sweep over SSH, with a confirm phase, killed and faulted at every phase;
prints what survived.

The same command is run again and again until it finishes; each run is killed or faulted
at a different moment:
  * kill -9 at start-up (study opened and locked, before any trial)  -> resumed
  * kill -9 between a server's start and its record in the study     -> found by its marker
  * a server crash mid-benchmark (its process group SIGKILLed)       -> pruned "crash"
  * a concurrent `optimize` of the same study on the same host       -> refused, exit 2
  * an SSH drop (every live sshd session cut)                        -> retried
  * kill -9 mid-benchmark                                            -> resumed, server stopped
  * kill -9 when a confirm-phase server has started, then mid-confirm-benchmark -> the same
    command resumes the confirm phase (not a new batch of trials)
  * one configuration whose server answers HTTP 500 to every request -> server_error
The kills at exact moments use SWEEPER_KILLPOINT (sweeper/run/killpoint.py, test-only).

At the end: finished trials (against the target), servers left (found by the port, by the
study's marker in every process's environment, and by the recorded process groups, not
only by what was recorded), measurements lost (every value seen before a kill, still there).

Everything is real and local: an OpenSSH server on a free loopback port with throwaway
keys, the simulated SGLang server (a test double) started through it, SQLite.

    .venv/bin/python -m bench.fault_injection   # from the repo root (it uses tests/sshd.py); ~4 min
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from sweeper.remote import free_port
from sweeper.results.storage import storage_key
from sweeper.run.reconcile import counts_as_finished
from sweeper.sim.profiles import PROFILE_DIR
from tests.conftest import group_alive as alive
from tests.conftest import streaming_trial
from tests.sshd import make_sshd

ROOT = Path(__file__).resolve().parent.parent

TRIALS = 20
optuna.logging.set_verbosity(optuna.logging.WARNING)
# the configuration whose server answers 500 to every generation request
HTTP_500 = {"speculative-num-steps": 1, "speculative-eagle-topk": 4,
            "speculative-num-draft-tokens": 4, "env.NCCL_PROTO": "Simple"}


def profile_with_500(tmp: Path) -> Path:
    data = yaml.safe_load((PROFILE_DIR / "demo.yaml").read_text())
    data["faults"] = [*(data.get("faults") or []), {
        "kind": "http_500", "reason": "fault injection",
        "when": {"args": {k: v for k, v in HTTP_500.items() if not k.startswith("env.")},
                 "env": {"NCCL_PROTO": HTTP_500["env.NCCL_PROTO"]}}}]
    path = tmp / "demo-500.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def study_file(tmp: Path, port: int) -> Path:
    data = {
        "name": "faults",
        "storage": f"sqlite:///{tmp / 'faults.db'}",
        "hosts": [{"ssh": "gpu-test", "python": sys.executable, "workdir": str(tmp / "remote")}],
        "server": {"launcher": f"{{python}} -m sweeper.sim --sim-profile {profile_with_500(tmp)}"
                               " --sim-seed 11 --sim-startup-seconds 0.3",
                   "port": port, "startup_timeout": "60s", "hang_timeout": "10s",
                   "stop_grace": "5s",
                   "args": {"model-path": "sim/demo-model", "tp-size": 4,
                            "speculative-algorithm": "EAGLE3",
                            "speculative-draft-model-path": "sim/demo-eagle3"}},
        "space": {"speculative-num-steps": {"int": [1, 6]},
                  "speculative-eagle-topk": {"choices": [1, 2, 4]},
                  "speculative-num-draft-tokens": {"int": [2, 16]},
                  "env.NCCL_PROTO": {"choices": ["unset", "LL", "Simple"]}},
        "start_from": [HTTP_500],
        "benchmark": {"max_tokens": 300, "runs": 2, "warmup": 1, "retry_wait_s": 0.2},
        "sweep": {"seed": 5, "max_retries": 3, "confirm_top": 2, "confirm_runs": 2},
    }
    path = tmp / "faults.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def marked_groups(needle: bytes) -> set[int]:
    """Process groups of every live process whose environment carries ``needle``."""
    found = set()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if needle in environ.read_bytes():
                found.add(os.getpgid(int(environ.parent.name)))
    return {p for p in found if alive(p)}


class Campaign:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.sshd = make_sshd(tmp / "sshd")
        home = tmp / "home"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "config").write_text(self.sshd.config_block("gpu-test"))
        shutil.copy(self.sshd.known_hosts, home / ".ssh" / "known_hosts")
        self.port = free_port()
        self.path = study_file(tmp, self.port)
        self.db = tmp / "faults.db"
        self.cmd = [sys.executable, "-m", "sweeper", "optimize", "--study", str(self.path),
                    "--trials", str(TRIALS)]
        self.env = {**os.environ, "HOME": str(home)}
        self.seen: dict[int, float | None] = {}  # every value measured before a kill
        self.events: list[str] = []
        self.injected = 0

    def study(self) -> optuna.Study:
        return optuna.load_study(study_name="faults", storage=f"sqlite:///{self.db}")

    def snapshot(self) -> None:
        if self.db.exists():
            with contextlib.suppress(KeyError):
                for t in self.study().get_trials(states=(TrialState.COMPLETE,)):
                    self.seen[t.number] = t.value

    def run(self, killpoint: str | None, plan: list[tuple[str, int]]) -> int:
        """One run of the same command, SIGKILLing itself at ``killpoint`` (if any), with
        the faults of ``plan`` injected when a trial numbered at least N is streaming."""
        env = {**self.env, **({"SWEEPER_KILLPOINT": killpoint} if killpoint else {})}
        proc = subprocess.Popen(self.cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            while plan and proc.poll() is None:
                kind, at = plan[0]
                t = streaming_trial(self.db, name="faults", min_number=at)
                if t is not None:
                    self.inject(kind, t, proc)
                    plan.pop(0)
                time.sleep(0.05)
            _, err = proc.communicate(timeout=900)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.snapshot()
        if killpoint:
            ok = proc.returncode == -signal.SIGKILL
            self.injected += ok
            self.events.append(f"kill -9 at {killpoint}: {'killed' if ok else 'NOT killed'} "
                               f"(exit {proc.returncode})")
        if plan:
            self.events.append(f"not injected (the run ended first): {plan}")
        self.stderr = err
        return proc.returncode

    def inject(self, kind: str, t: optuna.trial.FrozenTrial, proc: subprocess.Popen[str]
               ) -> None:
        if kind == "crash":
            os.killpg(t.user_attrs["server"]["pgid"], signal.SIGKILL)
            self.events.append(f"server crash at trial {t.number}")
        elif kind == "ssh_drop":
            n = self.sshd.kill_sessions()
            self.events.append(f"SSH drop at trial {t.number} ({n} sessions cut)")
        elif kind == "concurrent":
            other = subprocess.run(self.cmd, cwd=ROOT, env=self.env, capture_output=True,
                                   text=True, timeout=120)
            line = other.stderr.strip()
            refused = other.returncode == 2 and f"PID {proc.pid}" in line and \
                len(line.splitlines()) == 1
            said = f"refused naming PID {proc.pid}" if refused else f"NOT refused: {line[-200:]}"
            self.events.append(f"concurrent optimize at trial {t.number}: exit "
                               f"{other.returncode}, {said}")
            self.injected += refused
            return
        elif kind == "kill -9":
            self.snapshot()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            self.events.append(f"kill -9 mid-benchmark at trial {t.number}")
        self.injected += 1


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="sweeper-faults-"))
    started = time.monotonic()
    c = Campaign(tmp)
    try:
        c.run("startup", [])
        c.run("started:2", [])
        c.run(None, [("crash", 4), ("concurrent", 6), ("ssh_drop", 8), ("kill -9", 11)])
        c.run("confirm-started", [])
        c.run("confirm-benchmark", [])
        final = c.run(None, [])
    finally:
        c.sshd.stop()
    study = c.study()
    trials = study.get_trials()
    finished = [t for t in trials if counts_as_finished(t)]
    recorded = {t.user_attrs["server"]["pgid"] for t in trials if t.user_attrs.get("server")}
    needle = f"SWEEPER_SERVER={storage_key(f'sqlite:///{c.db}', 'faults')}@".encode()
    left = {p for p in recorded if alive(p)} | marked_groups(needle)
    busy = not port_free(c.port)
    now = {t.number: t.value for t in trials if t.state == TrialState.COMPLETE}
    lost = [n for n, v in c.seen.items() if now.get(n) != v]
    errors = [t for t in finished if t.user_attrs.get("failure") == "server_error"]
    print("sweeper fault injection (simulated SGLang server over a real loopback sshd)")
    for event in c.events:
        print(f"  {event}")
    starts = sum(t.user_attrs.get("failure") == "server_error" and not t.user_attrs.get("skipped")
                 for t in trials)  # a skipped proposal cost no start
    print(f"5xx server: {len(errors)} configuration(s) recorded server_error after {starts} "
          "starts")
    print(f"confirm phase finished: {bool(study.user_attrs.get('sweeper:confirmed'))}")
    print(f"last run's exit code: {final}" + (f" ({c.stderr.strip()[-200:]})" if final else ""))
    print(f"finished {len(finished)}/{TRIALS}")
    print(f"servers left {len(left)}" + (" (and the port is still taken)" if busy else ""))
    print(f"measurements lost {len(lost)}")
    print("failures: " + ", ".join(f"#{t.number} {t.state.name.lower()} "
                                   f"{t.user_attrs.get('failure')}" for t in trials
                                   if t.user_attrs.get("failure")))
    print(f"wall time {time.monotonic() - started:.0f}s")
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p, signal.SIGKILL)
    shutil.rmtree(tmp, ignore_errors=True)
    ok = (len(finished) == TRIALS and not left and not busy and not lost and final == 0
          and errors and c.injected == 8 and study.user_attrs.get("sweeper:confirmed"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
