"""A 20-trial sweep over SSH with injected faults; prints what survived.

Faults, each injected while a trial is streaming its benchmark:
  * a server crash (its process group SIGKILLed)          -> trial pruned as "crash"
  * an SSH drop (every live sshd session cut)             -> infrastructure fault, retried
  * a kill -9 of the sweeper itself, then the same command -> resumed, orphan server stopped

Everything is real and local: an OpenSSH server on a free loopback port with throwaway
keys, the simulated SGLang server (a test double) started through it, SQLite.

    .venv/bin/python bench/fault_injection.py            # ~2 minutes on 2 cores
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweeper.remote import free_port  # noqa: E402
from tests.conftest import group_alive as alive  # noqa: E402
from tests.conftest import streaming_trial  # noqa: E402
from tests.sshd import make_sshd  # noqa: E402

TRIALS = 20
optuna.logging.set_verbosity(optuna.logging.WARNING)


def study_file(tmp: Path) -> Path:
    data = {
        "name": "faults",
        "storage": f"sqlite:///{tmp / 'faults.db'}",
        "hosts": [{"ssh": "gpu-test", "python": sys.executable, "workdir": str(tmp / "remote")}],
        "server": {"launcher": "{python} -m sweeper.sim --sim-profile demo --sim-seed 11 "
                               "--sim-startup-seconds 0.3",
                   "port": free_port(), "startup_timeout": "30s", "hang_timeout": "5s",
                   "stop_grace": "5s",
                   "args": {"model-path": "sim/demo-model", "tp-size": 4,
                            "speculative-algorithm": "EAGLE3",
                            "speculative-draft-model-path": "sim/demo-eagle3"}},
        "space": {"speculative-num-steps": {"int": [1, 6]},
                  "speculative-eagle-topk": {"choices": [1, 2, 4]},
                  "speculative-num-draft-tokens": {"int": [2, 16]},
                  "env.NCCL_PROTO": {"choices": ["unset", "LL", "Simple"]}},
        "benchmark": {"max_tokens": 300, "runs": 2, "warmup": 1},
        "sweep": {"seed": 5, "max_retries": 3},
    }
    path = tmp / "faults.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="sweeper-faults-"))
    sshd = make_sshd(tmp / "sshd")
    home = tmp / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(sshd.config_block("gpu-test"))
    shutil.copy(sshd.known_hosts, home / ".ssh" / "known_hosts")
    path = study_file(tmp)
    db = tmp / "faults.db"
    cmd = [sys.executable, "-m", "sweeper", "optimize", "--study", str(path), "--trials",
           str(TRIALS)]
    env = {**os.environ, "HOME": str(home)}
    started = time.monotonic()
    injected: dict[str, int] = {}
    seen_complete: dict[int, float] = {}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        plan = [("crash", 3), ("ssh_drop", 7), ("kill -9", 11)]
        while plan and proc.poll() is None:
            kind, at = plan[0]
            t = streaming_trial(db, name="faults")
            if t is not None and t.number >= at:
                if kind == "crash":
                    os.killpg(t.user_attrs["server"]["pgid"], signal.SIGKILL)
                elif kind == "ssh_drop":
                    sshd.kill_sessions()
                else:
                    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{db}")
                    seen_complete = {x.number: x.value for x in study.get_trials(
                        states=(TrialState.COMPLETE,))}
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE, text=True,
                                            start_new_session=True)
                injected[kind] = t.number
                plan.pop(0)
            time.sleep(0.05)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{db}")
    trials = study.get_trials()
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    pgids = {t.user_attrs["server"]["pgid"] for t in trials if t.user_attrs.get("server")}
    left = [p for p in pgids if alive(p)]
    now_complete = {t.number: t.value for t in trials if t.state == TrialState.COMPLETE}
    lost = [n for n, v in seen_complete.items() if now_complete.get(n) != v]
    print("sweeper fault injection (simulated SGLang server over a real loopback sshd)")
    print("faults injected:")
    states = {t.number: t for t in trials}
    for kind, number in injected.items():
        t = states[number]
        retry = [r.number for r in trials if r.user_attrs.get("retry_of") == number]
        print(f"  {kind:9s} at trial {number}: {t.state.name.lower()}"
              + (f" ({t.user_attrs['failure']})" if t.user_attrs.get("failure") else "")
              + (f", re-run as trial {retry[0]} ({states[retry[0]].state.name.lower()})"
                 if retry else ""))
    print(f"sweeper exit code: {proc.returncode}" + (f" ({err.strip()[-200:]})"
                                                     if proc.returncode else ""))
    print(f"finished trials {len(finished)}/{TRIALS}")
    print(f"servers left running {len(left)}")
    print(f"measurements lost {len(lost)}")
    print("failures: " + ", ".join(f"#{t.number} {t.state.name.lower()} "
                                   f"{t.user_attrs.get('failure')}" for t in trials
                                   if t.user_attrs.get("failure")))
    print(f"wall time {time.monotonic() - started:.0f}s")
    sshd.stop()
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p, signal.SIGKILL)
    shutil.rmtree(tmp, ignore_errors=True)
    ok = len(finished) == TRIALS and not left and not lost and len(injected) == 3
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
