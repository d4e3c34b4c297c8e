"""A benchmark too short for SGLang's decode log is warned about before anything starts.

SGLang 0.5.23 logs its "Decode batch" line (and adds to its accept-length average) only
every --decode-log-interval decode steps (default 40) after each /flush_cache: a run of
max_tokens at or below the interval gets no accept length (sweeper/study/decode_log.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from sweeper.results import attrs as A
from sweeper.study.decode_log import SGLANG_DEFAULT_INTERVAL, decode_log_warning
from tests.conftest import run_cli

SPEC_ARGS = {"model-path": "sim/demo-model", "tp-size": 4, "speculative-algorithm": "EAGLE3",
             "speculative-draft-model-path": "sim/demo-eagle3"}


@pytest.mark.parametrize("max_tokens, args, warned", [
    (SGLANG_DEFAULT_INTERVAL, {}, True),  # 39 decode steps: one short of the first line
    (SGLANG_DEFAULT_INTERVAL + 1, {}, False),
    (30, {"decode-log-interval": 8}, False),
    (8, {"decode-log-interval": 8}, True),
    (100, {"decode-log-interval": "200"}, True),  # a YAML string is the same flag value
    (60, {"decode-log-interval": 64}, True),
])
def test_warns_exactly_when_no_run_reaches_a_decode_line(
        max_tokens: int, args: dict[str, Any], warned: bool) -> None:
    note = decode_log_warning(max_tokens, args)
    assert (note is not None) is warned, note


def test_the_warning_names_both_keys_and_the_fix() -> None:
    note = decode_log_warning(30, {})
    assert note is not None and "\n" not in note
    assert "benchmark.max_tokens 30" in note
    assert "server.args decode-log-interval 40 (not set: SGLang's default 40)" in note
    assert "raise benchmark.max_tokens above 40" in note
    assert "set server.args.decode-log-interval to 29 or less" in note
    # the interval the study sets is the one named, without the default's note
    set_note = decode_log_warning(50, {"decode-log-interval": 100})
    assert set_note is not None and "decode-log-interval 100:" in set_note
    assert "default" not in set_note.split(":")[0]


def test_an_interval_the_launcher_would_refuse_is_not_second_guessed() -> None:
    """A value that is not a positive integer is the --help check's to refuse."""
    for bad in ("often", 0, -3, True):
        assert decode_log_warning(10, {"decode-log-interval": bad}) is None


def _warnings(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "decode-log-interval" in ln]


def test_validate_warns_on_one_line(make_study: Callable[..., Path]) -> None:
    short = make_study(server={"args": SPEC_ARGS},
                       benchmark={"api": "chat", "max_tokens": 30, "runs": 2, "warmup": 1})
    proc = run_cli("validate", "--study", str(short))
    assert proc.returncode == 0, proc.stderr
    lines = _warnings(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"warning: {short}: benchmark.max_tokens 30 is not above "
                               "server.args decode-log-interval 40")
    # long enough for the interval it sets: no warning
    fine = make_study(name="fine", server={"args": {**SPEC_ARGS, "decode-log-interval": 8}},
                      benchmark={"api": "chat", "max_tokens": 30, "runs": 2, "warmup": 1})
    proc = run_cli("validate", "--study", str(fine))
    assert proc.returncode == 0 and not _warnings(proc.stderr), proc.stderr


def test_optimize_warns_before_the_first_start_and_the_warning_is_true(
        make_study: Callable[..., Path], tmp_path: Path) -> None:
    """optimize says it before any server starts, then sweeps (a warning, not an error);
    the simulator, which logs like 0.5.23, indeed gives the speculative trial no accept
    length."""
    study = make_study(server={"args": SPEC_ARGS},
                       benchmark={"api": "chat", "max_tokens": 30, "runs": 2, "warmup": 1})
    proc = run_cli("optimize", "--study", str(study), "--trials", "2", "--no-confirm")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    lines = _warnings(proc.stderr)
    assert len(lines) == 1 and "benchmark.max_tokens 30" in lines[0], proc.stderr
    trials = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}"
                               ).get_trials()
    spec = [t for t in trials if t.state == TrialState.COMPLETE
            and t.user_attrs.get(A.ROLE) != A.BASELINE]
    assert spec, [(t.number, t.state) for t in trials]
    assert all(t.user_attrs.get(A.ACCEPT) is None for t in spec), \
        [t.user_attrs.get(A.ACCEPT) for t in spec]
