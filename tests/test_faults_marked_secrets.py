"""A secret whose name the rule misses (HUGGING_FACE_HUB_AUTH), marked in the study file
(``server.secrets``), is scrubbed everywhere a TOKEN-named one is: the database, the
artifacts, the output, `status`, and `export` writes a reference. Real parts: the CLI, the
simulator (which echoes the variable into its log), SQLite."""

from __future__ import annotations

from pathlib import Path

from sweeper.study import load_study

from .conftest import SIM_LAUNCHER, run_cli
from .test_cli_errors import assert_one_line_error

AUTH = "hub_auth_71c0ffee93"


def test_marked_secret_is_scrubbed_everywhere(make_study, tmp_path: Path) -> None:
    study_file = make_study(server={
        "launcher": SIM_LAUNCHER + " --sim-echo-env HUGGING_FACE_HUB_AUTH",
        "env": {"HUGGING_FACE_HUB_AUTH": AUTH}, "secrets": ["HUGGING_FACE_HUB_AUTH"]})
    assert load_study(str(study_file)).name == "t"
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "2")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    raw = "".join(p.read_text() for p in (tmp_path / "host").rglob("*.log"))
    assert AUTH in raw, "the server logged it: a scrubber that missed it would be caught"
    status = run_cli("status", "--study", str(study_file), "--all")
    out = tmp_path / "best.yaml"
    export = run_cli("export", "--study", str(study_file), "-o", str(out))
    assert export.returncode == 0, export.stderr
    written = [tmp_path / "t.db", *[p for p in (tmp_path / "t.artifacts").rglob("*")
                                    if p.is_file()], out, out.with_suffix(".env")]
    for path in written:
        assert AUTH.encode() not in path.read_bytes(), path
    for text in (proc.stdout, proc.stderr, status.stdout, export.stdout):
        assert AUTH not in text
    assert "HUGGING_FACE_HUB_AUTH" in out.with_suffix(".env").read_text(), "a reference"


def test_marking_an_unknown_name_is_refused(make_study) -> None:
    study_file = make_study(server={"secrets": ["NOT_SET_ANYWHERE"]})
    proc = run_cli("validate", "--study", str(study_file))
    assert_one_line_error(proc, "server.secrets[0]", "NOT_SET_ANYWHERE")
