"""The numeric SGLang flags sweeper checks a study's values against are SGLang's own, and
a value SGLang would read is let through (the refusals: tests/fixtures/hostile/flag-*)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.errors import StudyError
from sweeper.study import load_study
from sweeper.study.flagtypes import FLOAT_FLAGS, INT_FLAGS
from tests.conftest import ROOT, run_cli

FLAGS = json.loads((ROOT / "tests" / "fixtures" / "sglang-0.5.23-flags.json").read_text())


def _named(converter: str) -> set[str]:
    return {o.removeprefix("--") for row in FLAGS if row["type"] == converter
            for o in row["option_strings"] if o.startswith("--")}


def test_the_numeric_flags_are_the_ones_sglangs_argparse_reads_as_numbers() -> None:
    assert _named("int") == INT_FLAGS
    assert _named("float") == FLOAT_FLAGS
    assert {"tp-size", "tensor-parallel-size", "max-running-requests"} <= INT_FLAGS
    assert "mem-fraction-static" in FLOAT_FLAGS
    assert "context-length" not in INT_FLAGS  # SGLang's own reader takes "128k"


def _study(tmp_path: Path, args: str, space: str = "") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nhosts: [{ssh: local}]\nserver:\n"
        "  launcher: \"{python} -m sweeper.sim --sim-profile demo\"\n"
        f"  args: {{model-path: m, speculative-algorithm: EAGLE3, {args}}}\n"
        "space:\n  speculative-num-steps: {int: [1, 3]}\n  speculative-eagle-topk: {choices: [1]}\n"
        + space)
    return path


@pytest.mark.parametrize("args,space", [
    ('tp-size: "4", attn-dp-size: 2', ""),  # a string SGLang's int() reads; its rule holds
    ('mem-fraction-static: "0.85"', ""),
    ("mem-fraction-static: 1", ""),  # float() reads an int
    ("tp-size: 4", "  mem-fraction-static: {float: [0.7, 0.9]}\n"),
    ("cuda-graph-bs-decode: [1, 2, 4]", ""),  # nargs '+': every value read
])
def test_values_sglang_reads_pass(tmp_path: Path, args: str, space: str) -> None:
    load_study(str(_study(tmp_path, args, space)))


@pytest.mark.parametrize("args,key", [
    ("cuda-graph-bs-decode: [1, two]", "server.args.cuda-graph-bs-decode"),
    ("tp-size: true", "server.args.tp-size"),  # a bare --tp-size: argparse wants a value
    ('tp-size: "4", attn-dp-size: 3', "server.args.attn-dp-size"),
])
def test_values_sglang_refuses_fail_at_their_key(tmp_path: Path, args: str, key: str) -> None:
    with pytest.raises(StudyError, match=f": {key}: "):
        load_study(str(_study(tmp_path, args)))


@pytest.mark.parametrize("command", ["validate", "optimize"])
def test_a_value_outside_the_launchers_choices_is_refused_before_anything_starts(
        tmp_path: Path, command: str) -> None:
    """The build's own --help lists a flag's choices (remote/preflight.help_choices): the
    simulator's, like SGLang's, has no attention backend fa9."""
    study = _study(tmp_path, "attention-backend: fa9")
    args = ["--trials", "1"] if command == "optimize" else []
    proc = run_cli(command, "--study", study.name, *args, cwd=tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()
             and not ln.startswith("warning:")]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "host local: --attention-backend 'fa9' is not a value this SGLang build takes " \
        "(did you mean 'fa3'?)" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [study.name]  # nothing written
