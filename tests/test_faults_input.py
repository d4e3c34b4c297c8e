"""Values that reach a host or a socket, and duplicate keys, are refused at `validate`
time: one line naming the file and key, exit 2 (issue: a bind address with shell syntax
passed `validate`, then `optimize` printed a 102-line traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sweeper.study.limits import parse_yaml

from .conftest import run_cli
from .test_cli_errors import assert_one_line_error


@pytest.mark.parametrize("key,edit,needle", [
    ("server.host", lambda d: d["server"].update(host="127.0.0.1;touch x"), "server.host"),
    ("server.host", lambda d: d["server"].update(host="-oProxyCommand=x"), "server.host"),
    ("hosts[0].url", lambda d: d["hosts"][0].update(url="http://gpu:99999"), "hosts[0].url"),
    ("hosts[0].url", lambda d: d["hosts"][0].update(url="http://a;b:80"), "hosts[0].url"),
    ("hosts[0].workdir", lambda d: d["hosts"][0].update(workdir="/tmp/x\ntouch y"),
     "hosts[0].workdir"),
])
def test_values_reaching_a_host_refused_at_validate(make_study, tmp_path: Path, key: str,
                                                    edit, needle: str) -> None:  # noqa: ANN001
    path = make_study()
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    proc = run_cli("validate", "--study", str(path))
    assert_one_line_error(proc, str(path), needle)
    assert not (tmp_path / "x").exists() and not Path("x").exists()


def test_addresses_and_names_accepted(make_study) -> None:
    path = make_study()
    data = yaml.safe_load(path.read_text())
    for host in ("0.0.0.0", "::1", "gpu-node-1.example.org"):
        data["server"]["host"] = host
        data["hosts"][0]["url"] = "http://[::1]:8000"
        path.write_text(yaml.safe_dump(data))
        proc = run_cli("validate", "--study", str(path))
        assert proc.returncode == 0, proc.stderr


def test_duplicate_key_names_the_key_and_both_lines(make_study) -> None:
    path = make_study()
    text = path.read_text()
    assert text.startswith("baseline") or "name: t\n" in text
    path.write_text(text + "name: other\n")  # a second `name:` at the top level
    first = next(i for i, ln in enumerate(path.read_text().splitlines(), 1)
                 if ln == "name: t")
    last = len(path.read_text().splitlines())
    proc = run_cli("validate", "--study", str(path))
    assert_one_line_error(proc, str(path), "name", f"lines {first} and {last}")


def test_duplicate_nested_key_refused(make_study) -> None:
    path = make_study()
    data = yaml.safe_load(path.read_text())
    data["server"]["env"] = {"A": "1"}
    text = yaml.safe_dump(data).replace("    A: '1'\n", "    A: '1'\n    A: '2'\n")
    assert text.count("A: ") == 2
    path.write_text(text)
    proc = run_cli("validate", "--study", str(path))
    assert_one_line_error(proc, "server.env.A", "written twice")


def test_merge_key_override_still_allowed(tmp_path: Path) -> None:
    """``<<`` is YAML's own override: not a duplicate."""
    data = parse_yaml("a: &c {x: 1, y: 1}\nb:\n  <<: *c\n  x: 2\n", tmp_path / "s.yaml")
    assert data["b"] == {"x": 2, "y": 1}


@pytest.mark.parametrize("value", ["-5", "0", "nan"])
def test_timeout_must_be_positive(make_study, tmp_path: Path, value: str) -> None:
    path = make_study()
    proc = run_cli("optimize", "--study", str(path), "--trials", "1", "--timeout", value)
    assert_one_line_error(proc, "--timeout")
    assert not (tmp_path / "t.db").exists(), "nothing written"
