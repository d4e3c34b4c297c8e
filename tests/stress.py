"""``make test-stress``: the SSH and sweep tests while both cores are kept busy.

One CPU burner per core (plain Python loops, at normal priority) runs for the whole session;
the tests get ``SWEEPER_TEST_TIMEOUT_FACTOR`` (tests/timeouts.py) so their deadlines
stretch instead of failing. The burners are stopped by pid, whatever pytest does.

    .venv/bin/python tests/stress.py                 # the default test files
    .venv/bin/python tests/stress.py -k kill_9       # extra pytest arguments
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ["tests/test_sweep_ssh.py", "tests/test_ssh_resilience.py", "tests/test_ssh_contract.py",
         "tests/test_resilience.py", "tests/test_evidence.py"]
FACTOR = "4"
BURN = "while True:\n    pass\n"


def main(argv: list[str]) -> int:
    burners = [subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.DEVNULL)
               for _ in range(os.cpu_count() or 2)]
    print(f"test-stress: {len(burners)} CPU burners (pids "
          f"{', '.join(str(b.pid) for b in burners)}), timeout factor {FACTOR}", flush=True)
    try:
        env = {**os.environ, "SWEEPER_TEST_TIMEOUT_FACTOR": FACTOR}
        return subprocess.call([sys.executable, "-m", "pytest", "-q", *FILES, *argv],
                               cwd=ROOT, env=env)
    finally:
        for burner in burners:
            os.kill(burner.pid, signal.SIGKILL)
            burner.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
