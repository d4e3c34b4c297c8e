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
  * kill -9 between a trial's `ask` and its owner write               -> closed, not counted
  * SIGHUP (the terminal closed) mid-trial                            -> recorded, requeued
  * Ctrl-C (SIGINT) mid-trial                    -> its completed runs kept, requeued, exit 130
  * a second study file (same name and storage, another port) with
    `--fresh --yes` while the sweep runs                              -> refused, exit 2
  * the run folder on the host made unwritable mid-sweep (chattr +i)  -> host fault, retried
  * the storage refusing a trial's value (a SQLite trigger), then the
    replay of the kept measurement half-failing the same way          -> kept, then written
  * a server that reports 10 x max_tokens (a loopback HTTP server)    -> benchmark error
The kills at exact moments use SWEEPER_KILLPOINT (sweeper/run/killpoint.py, test-only).
The server's environment holds two secrets (HF_TOKEN, and one marked in `server.secrets`),
its flags a third (`api-key`); every file written on both sides (a host log, 0600, may hold
the key the server printed) and every process's command line during the trials are
searched for their values. Every server start prints 2 MB of filler (`--sim-chatty`): each
start's log must stay within `server.log_keep_mb` (0.25 MB) of each end plus its cut line.

At the end: finished trials (against the target), servers left (found by the port, by the
study's marker in every process's environment, and by the recorded process groups, not
only by what was recorded), measurements lost (every value seen before a kill, still there),
good configurations recorded as failures (PRUNED other than by an injected crash or the
5xx configuration), secret values found (files and command lines).

Everything is real and local: an OpenSSH server on a free loopback port with throwaway
keys, the simulated SGLang server (a test double) started through it, SQLite.

    .venv/bin/python -m bench.fault_injection   # from the repo root (it uses tests/sshd.py); ~7 min

The chattr fault needs root (skipped otherwise, and said so).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
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
# made-up secrets: one the name rule catches, one only its mark in the study file does
SECRETS = {"HF_TOKEN": "hf_faults_" + "q7" * 10, "HUB_AUTH_VALUE": "hub_" + "x9" * 10}
API_KEY = "sk_faults_" + "k3" * 10  # the server's --api-key: never on a command line
KEEP_MB, CHATTY_MB = 0.25, 2
REFUSE = ("CREATE TRIGGER refuse BEFORE INSERT ON trial_values "
          "BEGIN SELECT RAISE(ABORT, 'refused by fault injection'); END")
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


def study_file(tmp: Path, port: int, name: str = "faults.yaml",
               workdir: str = "remote") -> Path:
    data = {
        "name": "faults",
        "storage": f"sqlite:///{tmp / 'faults.db'}",
        "hosts": [{"ssh": "gpu-test", "python": sys.executable, "workdir": str(tmp / workdir)}],
        "server": {"launcher": f"{{python}} -m sweeper.sim --sim-profile {profile_with_500(tmp)}"
                               " --sim-seed 11 --sim-startup-seconds 0.3"
                               f" --sim-chatty {CHATTY_MB}", "log_keep_mb": KEEP_MB,
                   "port": port, "startup_timeout": "60s", "hang_timeout": "10s",
                   "stop_grace": "5s", "env": dict(SECRETS), "secrets": ["HUB_AUTH_VALUE"],
                   "args": {"model-path": "sim/demo-model", "tp-size": 4,
                            "speculative-algorithm": "EAGLE3",
                            "speculative-draft-model-path": "sim/demo-eagle3",
                            "api-key": API_KEY}},
        "space": {"speculative-num-steps": {"int": [1, 6]},
                  "speculative-eagle-topk": {"choices": [1, 2, 4]},
                  "speculative-num-draft-tokens": {"int": [2, 16]},
                  "env.NCCL_PROTO": {"choices": ["unset", "LL", "Simple"]}},
        "start_from": [HTTP_500],
        "benchmark": {"max_tokens": 300, "runs": 2, "warmup": 1, "retry_wait_s": 0.2},
        "sweep": {"seed": 5, "max_retries": 3, "confirm_top": 2, "confirm_runs": 2},
    }
    path = tmp / name
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
        self.env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(tmp / "state")}
        self.seen: dict[int, float | None] = {}  # every value measured before a kill
        self.events: list[str] = []
        self.injected = 0
        # the README's set-up for a second machine: same name and storage, another port
        self.second = study_file(tmp, free_port(), "faults-b.yaml", "remote-b")
        self.run_dir = tmp / "remote" / storage_key(f"sqlite:///{self.db}", "faults")
        self.crashed: set[int] = set()  # trials whose server the campaign killed
        self.cmdline_hits = 0  # secret values seen on a process's command line
        self.cmdline_scans = 0
        self._last_scan = 0.0

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
            while proc.poll() is None:
                self.scan_cmdlines()
                if not plan:
                    time.sleep(0.05)
                    continue
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

    def scan_cmdlines(self) -> None:
        """Every process's command line on the node (this machine), twice a second while a
        trial streams: no secret value may be there."""
        now = time.monotonic()
        if now - self._last_scan < 0.5 or streaming_trial(self.db, name="faults") is None:
            return
        self._last_scan = now
        self.cmdline_scans += 1
        for f in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):
                data = f.read_bytes()
                self.cmdline_hits += sum(v.encode() in data
                                         for v in [*SECRETS.values(), API_KEY])

    def inject(self, kind: str, t: optuna.trial.FrozenTrial, proc: subprocess.Popen[str]
               ) -> None:
        if kind == "crash":
            os.killpg(t.user_attrs["server"]["pgid"], signal.SIGKILL)
            self.crashed.add(t.number)
            self.events.append(f"server crash at trial {t.number}")
        elif kind == "sighup":
            os.kill(proc.pid, signal.SIGHUP)
            code = proc.wait(timeout=120)
            self.events.append(f"SIGHUP at trial {t.number}: exit {code}")
            self.injected += code == 130
            return
        elif kind == "sigint":
            os.kill(proc.pid, signal.SIGINT)
            code = proc.wait(timeout=120)
            after = next(x for x in self.study().get_trials() if x.number == t.number)
            kept = after.user_attrs.get("interrupted_runs") or {}
            n = sum(len(v) for v in kept.values())
            self.events.append(f"Ctrl-C at trial {t.number}: exit {code}, {n} completed "
                               f"run{'' if n == 1 else 's'} kept, {after.state.name.lower()} "
                               f"{after.user_attrs.get('failure')}")
            self.injected += code == 130
            return
        elif kind == "fresh":
            other = subprocess.run([*self.cmd[:5], str(self.second), "--trials", "1", "--fresh",
                                    "--yes"], cwd=ROOT, env=self.env, capture_output=True,
                                   text=True, timeout=120)
            line = other.stderr.strip()
            refused = other.returncode == 2 and f"PID {proc.pid} on" in line and \
                len(line.splitlines()) == 1 and "deleted" not in other.stdout
            said = f"refused naming PID {proc.pid}" if refused else f"NOT refused: {line[-200:]}"
            self.events.append(f"--fresh from a second study file at trial {t.number}: exit "
                               f"{other.returncode}, {said}")
            self.injected += refused
            return
        elif kind == "unwritable":
            done = subprocess.run(["chattr", "+i", str(self.run_dir)], capture_output=True,
                                  text=True)
            self.events.append(f"run folder made unwritable (chattr +i) at trial {t.number}"
                               + (f": FAILED {done.stderr.strip()}" if done.returncode else ""))
            if done.returncode:
                return
        elif kind == "refuse":
            with sqlite3.connect(self.db) as con:
                con.execute(REFUSE)
            self.events.append(f"storage refusing trial values from trial {t.number}")
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


def lying_server() -> tuple[int, int]:
    """A loopback HTTP server that streams a few tokens and reports ten times max_tokens:
    how many of the benchmark's requests were taken as tok/s, of how many."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from sweeper.measure import BenchmarkError, BenchSpec, PromptSet, run_benchmark

    class Liar(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            parts = [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in "ab"]
            parts.append({"choices": [], "usage": {"prompt_tokens": 3,
                                                   "completion_tokens": 80}})
            body = "".join(f"data: {json.dumps(p)}\n\n" for p in parts) + "data: [DONE]\n\n"
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Liar)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    prompts = PromptSet(prompts=[[{"role": "user", "content": f"q{i}"}] for i in range(3)],
                        hash="h" * 64, source="fault injection")
    spec = BenchSpec(max_tokens=8, runs=2, warmup=0, retry_budget_s=2.0, retry_wait_s=0.05)
    try:
        result = run_benchmark(f"http://127.0.0.1:{httpd.server_address[1]}", spec,
                               prompts=prompts)
        reqs = [r for run in result.runs for r in run.requests]
    except BenchmarkError as exc:
        reqs = [r for run in (exc.result.runs if exc.result else []) for r in run.requests]
    finally:
        httpd.shutdown()
        httpd.server_close()
    return sum(r.ok for r in reqs), len(reqs)


def secrets_in_files(tmp: Path) -> list[str]:
    """Every file written on either side (storage, artifacts, kept measurements, the host's
    run folders and logs), less the study files, which hold the secrets by design."""
    found = []
    for path in tmp.rglob("*"):
        if not path.is_file() or path.suffix == ".yaml" or "sshd" in path.parts \
                or ".ssh" in path.parts:
            continue
        with contextlib.suppress(OSError):
            data = path.read_bytes()
            found += [str(path) for v in SECRETS.values() if v.encode() in data]
            private = path.suffix == ".log" and path.stat().st_mode & 0o077 == 0
            found += [str(path)] if API_KEY.encode() in data and not private else []
    return found


def logs_over_cap(tmp: Path) -> tuple[int, int, int]:
    """(host logs over the cap, host logs, logs that say how much was cut)."""
    keep = int(KEEP_MB * 1_000_000)
    logs = list((tmp / "remote").rglob("*.log")) + list((tmp / "remote-b").rglob("*.log"))
    over = sum(p.stat().st_size > 3 * keep + 200 for p in logs)
    cut = sum(b"MB cut here]" in p.read_bytes() for p in logs)
    return over, len(logs), cut


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="sweeper-faults-"))
    started = time.monotonic()
    c = Campaign(tmp)
    root = os.geteuid() == 0 and shutil.which("chattr") is not None
    try:
        c.run("startup", [])
        c.run("started:2", [])
        c.run("asked:2", [])  # killed between a trial's ask and its owner write
        c.run(None, [("sighup", 0)])
        c.run(None, [("sigint", 0)])
        if root:
            try:
                code = c.run(None, [("unwritable", 0)])
            finally:
                subprocess.run(["chattr", "-i", str(c.run_dir)], check=False)
            host_faults = [t for t in c.study().get_trials()
                           if t.user_attrs.get("failure") == "host_storage"]
            c.events.append(f"  -> exit {code}, {len(host_faults)} host_storage failures "
                            "(retried), folder writable again")
            c.injected += code == 1 and bool(host_faults)
        else:
            c.events.append("run folder unwritable: SKIPPED (needs root for chattr)")
        code = c.run(None, [("refuse", 0)])
        kept = list(tmp.glob(".faults.db.pending/*/trial-*.json"))
        c.events.append(f"  -> exit {code}, {len(kept)} measurement kept on disk")
        code = c.run(None, [])  # the replay's value refused too: a half-written replay
        c.events.append(f"replay with the storage still refusing: exit {code}, kept file "
                        f"{'still there' if all(k.exists() for k in kept) else 'GONE'}")
        c.injected += code == 1 and bool(kept) and all(k.exists() for k in kept)
        with sqlite3.connect(c.db) as con:
            con.execute("DROP TRIGGER refuse")
        c.run(None, [("crash", 4), ("concurrent", 6), ("fresh", 6), ("ssh_drop", 8),
                     ("kill -9", 11)])
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
    # a configuration recorded PRUNED (its fault) that was measured fine in another trial,
    # other than by the crash the campaign caused itself
    good = {t.user_attrs.get("config_id") for t in trials if t.state == TrialState.COMPLETE}
    wrongly = [t for t in trials if t.state == TrialState.PRUNED and not
               t.user_attrs.get("skipped_known_failure") and t.number not in c.crashed
               and t.user_attrs.get("config_id") in good]
    on_500 = [f"#{t.number} {t.state.name.lower()} {t.user_attrs.get('failure')} "
              f"attempt {t.user_attrs.get('attempt', 0)}" for t in trials
              if t.params.get("env.NCCL_PROTO") == "Simple"
              and t.params.get("speculative-eagle-topk") == 4
              and t.params.get("speculative-num-steps") == 1]
    replayed = [t for t in trials if t.user_attrs.get("replayed_from") is not None]
    pending_left = list(tmp.glob(".faults.db.pending/*/trial-*.json")) + \
        list((tmp / "state").rglob("trial-*.json"))
    leaked = secrets_in_files(tmp)
    over, n_logs, n_cut = logs_over_cap(tmp)
    lied, asked = lying_server()
    print("sweeper fault injection (simulated SGLang server over a real loopback sshd)")
    for event in c.events:
        print(f"  {event}")
    starts = sum(t.user_attrs.get("failure") == "server_error" and not t.user_attrs.get("skipped")
                 for t in trials)  # a skipped proposal cost no start
    print(f"5xx server: {len(errors)} configuration(s) recorded server_error after {starts} "
          "starts")
    print("  the 5xx configuration's trials: " + ", ".join(on_500))
    print(f"confirm phase finished: {bool(study.user_attrs.get('sweeper:confirmed'))}")
    print(f"last run's exit code: {final}" + (f" ({c.stderr.strip()[-200:]})" if final else ""))
    print(f"finished {len(finished)}/{TRIALS}")
    print(f"servers left {len(left)}" + (" (and the port is still taken)" if busy else ""))
    print(f"measurements lost {len(lost)}" + (f" (kept measurements written in: "
                                              f"{len(replayed)}, left on disk: "
                                              f"{len(pending_left)})"))
    print(f"good configurations recorded as failures {len(wrongly)}"
          + (": " + ", ".join(f"#{t.number} {t.user_attrs.get('failure')}" for t in wrongly)
             if wrongly else ""))
    print(f"secret values found {len(leaked) + c.cmdline_hits} (files: {len(leaked)}, "
          f"command lines in {c.cmdline_scans} scans of every process during trials: "
          f"{c.cmdline_hits})")
    print(f"lying server: {lied} of {asked} requests taken as tok/s")
    print(f"server logs over the cap {over} (of {n_logs} starts' logs, {n_cut} saying how "
          f"much was cut; {CHATTY_MB} MB printed per start, {KEEP_MB} MB kept per end)")
    print("failures: " + ", ".join(f"#{t.number} {t.state.name.lower()} "
                                   f"{t.user_attrs.get('failure')}" for t in trials
                                   if t.user_attrs.get("failure")))
    print(f"wall time {time.monotonic() - started:.0f}s")
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p, signal.SIGKILL)
    shutil.rmtree(tmp, ignore_errors=True)
    ok = (len(finished) == TRIALS and not left and not busy and not lost and final == 0
          and errors and c.injected == 14 + 2 * root and not over
          and study.user_attrs.get("sweeper:confirmed") and not wrongly and not leaked
          and not c.cmdline_hits and not lied and replayed and not pending_left)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
