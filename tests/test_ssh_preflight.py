"""Preflight against LocalHost and SSHHost with a fake launcher (a bash script): real processes."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from sweeper.errors import PortBusy, PreflightError
from sweeper.remote.host import Host, free_port
from sweeper.remote.preflight import help_choices, help_flags, preflight
from tests.test_ssh_contract import wait_for

HELP = """\
usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]
                        [--speculative-algorithm {EAGLE,EAGLE3,NEXTN}]
options:
  -h, --help            show this help message and exit
  --model-path MODEL_PATH, --model MODEL_PATH
  --tp-size TP_SIZE, --tp TP_SIZE
  --speculative-num-steps SPECULATIVE_NUM_STEPS
  --speculative-eagle-topk SPECULATIVE_EAGLE_TOPK
  --speculative-num-draft-tokens SPECULATIVE_NUM_DRAFT_TOKENS
  --enable-nccl-nvls    Enable NCCL NVLS for prefill heavy requests.
  --speculative-algorithm {EAGLE,EAGLE3,NEXTN}
  --cuda-graph-bs-decode {1,2,4,8} [{1,2,4,8} ...]
"""
STUDY_FLAGS = {
    "model-path",
    "tp-size",
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
    "enable-nccl-nvls",
}


@pytest.fixture
def launcher(tmp_path: Path) -> list[str]:
    """A fake `python -m sglang.launch_server`: prints argparse-like help."""
    script = tmp_path / "fake launcher.sh"  # a space in the path, on purpose
    script.write_text(f"#!/bin/bash\ncat <<'EOF'\n{HELP}EOF\n")
    script.chmod(0o755)
    return [str(script)]


def test_help_flags() -> None:
    flags = help_flags(HELP)
    assert {"model-path", "model", "tp", "help", "enable-nccl-nvls"} <= flags
    assert "MODEL_PATH" not in flags and "h" not in flags


def test_preflight_ok(any_host: Host, launcher: list[str]) -> None:
    report = preflight(any_host, launcher, STUDY_FLAGS, free_port(), "127.0.0.1")
    assert report.help_flags >= STUDY_FLAGS
    assert report.gpu_count is None  # no nvidia-smi on this machine: fine
    assert not report.port_held_by_own_server


def test_preflight_missing_flag_names_parameter(any_host: Host, launcher: list[str]) -> None:
    flags = {f: f for f in STUDY_FLAGS} | {
        "speculative-draft-tp-size": "speculative-draft-tp-size",
        "--enable-symm-mem": "nccl_symm",
    }
    with pytest.raises(PreflightError) as info:
        preflight(any_host, launcher, flags, free_port(), "127.0.0.1")
    message = str(info.value)
    assert "this SGLang build has no --enable-symm-mem (for parameter 'nccl_symm'), " \
        "--speculative-draft-tp-size;" in message
    assert message.count("--enable-symm-mem") == 1  # each flag named once
    assert "did you mean" not in message  # nothing close in this help
    assert "remove it in the study's space or server.args" in message
    assert any_host.name in message


def test_preflight_typo_in_server_args_gets_a_did_you_mean(any_host: Host,
                                                          launcher: list[str]) -> None:
    flags = (STUDY_FLAGS - {"tp-size"}) | {"tp-sise"}
    with pytest.raises(PreflightError) as info:
        preflight(any_host, launcher, flags, free_port(), "127.0.0.1")
    message = str(info.value)
    assert "has no --tp-sise (did you mean --tp-size?);" in message
    assert message.count("tp-sise") == 1, message


def test_did_you_mean_is_a_typo_not_a_lookalike() -> None:
    from sweeper.remote.preflight import did_you_mean

    flags = help_flags(HELP)
    assert did_you_mean("tp-siez", flags) == "tp-size"  # neighbours swapped
    assert did_you_mean("speculative-num-step", flags) == "speculative-num-steps"
    # another flag with the same long prefix is not what the user meant
    assert did_you_mean("speculative-draft-tp-size", flags) is None
    assert did_you_mean("enable-symm-mem", flags) is None


def test_preflight_launcher_fails(any_host: Host, tmp_path: Path) -> None:
    broken = tmp_path / "broken.sh"
    broken.write_text("#!/bin/bash\necho 'No module named sglang' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(
        PreflightError, match=r"broken\.sh --help` failed with exit code 1: No module named sglang"
    ):
        preflight(any_host, [str(broken)], STUDY_FLAGS, free_port(), "127.0.0.1")
    with pytest.raises(PreflightError, match="exit code 127"):
        preflight(
            any_host, [str(tmp_path / "missing-python")], STUDY_FLAGS, free_port(), "127.0.0.1"
        )


def test_preflight_launcher_hangs(any_host: Host, tmp_path: Path) -> None:
    slow = tmp_path / "slow.sh"
    slow.write_text("#!/bin/bash\nsleep 3\n")
    slow.chmod(0o755)
    with pytest.raises(PreflightError, match="did not finish in 1s"):
        preflight(any_host, [str(slow)], STUDY_FLAGS, free_port(), "127.0.0.1", help_timeout=0.6)


def test_preflight_port_held_by_stranger(any_host: Host, launcher: list[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as stranger:
        port = stranger.getsockname()[1]
        with pytest.raises(PortBusy, match=f"port {port}"):
            preflight(any_host, launcher, STUDY_FLAGS, port, "127.0.0.1", owned_pgids={999999})


def test_preflight_port_held_by_our_server(
    any_host: Host, launcher: list[str], tmp_path: Path
) -> None:
    port = free_port()
    pgid = any_host.start_detached(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        env={},
        cwd=str(tmp_path),
        log_path=str(tmp_path / "log"),
        exit_path=str(tmp_path / "exit"),
    )
    try:
        assert wait_for(lambda: not any_host.port_free(port))
        report = preflight(any_host, launcher, STUDY_FLAGS, port, "127.0.0.1", owned_pgids={pgid})
        assert report.port_held_by_own_server
    finally:
        any_host.stop_group(pgid, grace=2)


def test_help_choices() -> None:
    assert help_choices(HELP) == {"speculative-algorithm": {"EAGLE", "EAGLE3", "NEXTN"},
                                  "cuda-graph-bs-decode": {"1", "2", "4", "8"}}


def test_preflight_refuses_a_value_outside_the_builds_choices(any_host: Host,
                                                              launcher: list[str]) -> None:
    ok = {"speculative-algorithm": ["EAGLE3"], "cuda-graph-bs-decode": [[1, "08"]],
          "tp-size": ["anything: no choices"], "enable-nccl-nvls": [True, False]}
    preflight(any_host, launcher, STUDY_FLAGS, free_port(), "127.0.0.1", values=ok)
    for flag, bad, said in (("speculative-algorithm", "EAGEL3", " (did you mean 'EAGLE3'?)"),
                            ("cuda-graph-bs-decode", [1, 3], "")):
        with pytest.raises(PreflightError) as info:
            preflight(any_host, launcher, STUDY_FLAGS, free_port(), "127.0.0.1",
                      values={**ok, flag: [bad]})
        message = str(info.value)
        assert f"host {any_host.name}: --{flag} " in message
        assert f"is not a value this SGLang build takes{said}" in message
