"""Bad input through the real CLI: one line naming file/key/host, exit 2, nothing
written and nothing started."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from .conftest import ROOT, run_cli


def assert_one_line_error(proc, *needles: str) -> None:  # noqa: ANN001
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


def test_malformed_yaml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nspace: {speculative-num-steps: {int: [1, 6]\n")
    proc = run_cli("optimize", "--study", str(bad), "--trials", "1")
    assert_one_line_error(proc, str(bad))
    assert not list(tmp_path.glob("*.db"))


def test_unknown_key_named_with_its_file(make_study, tmp_path: Path) -> None:
    path = make_study()
    data = yaml.safe_load(path.read_text())
    data["benchmark"]["max_token"] = 10
    path.write_text(yaml.safe_dump(data))
    proc = run_cli("optimize", "--study", str(path), "--trials", "1")
    assert_one_line_error(proc, str(path), "max_token", "max_tokens")
    assert not (tmp_path / "t.db").exists()


def test_unknown_study_name() -> None:
    proc = run_cli("validate", "--study", "no-such-study")
    assert_one_line_error(proc, "no-such-study")


def test_bad_storage_url(make_study, tmp_path: Path) -> None:
    path = make_study()
    proc = run_cli("optimize", "--study", str(path), "--trials", "1", "--storage",
                   "nosuchdb://x/y")
    assert_one_line_error(proc, "nosuchdb://x/y")
    assert not (tmp_path / "host").exists(), "no server was started"


def test_changed_space_is_refused_without_writing(make_study, tmp_path: Path) -> None:
    path = make_study()
    assert run_cli("optimize", "--study", str(path), "--trials", "1").returncode == 0
    storage = f"sqlite:///{tmp_path / 't.db'}"
    before = len(optuna.load_study(study_name="t", storage=storage).get_trials())
    data = yaml.safe_load(path.read_text())
    data["space"]["speculative-num-steps"] = {"int": [1, 3]}
    data["start_from"] = []
    path.write_text(yaml.safe_dump(data))
    proc = run_cli("optimize", "--study", str(path), "--trials", "1")
    assert_one_line_error(proc, str(path), "space", "speculative-num-steps")
    assert len(optuna.load_study(study_name="t", storage=storage).get_trials()) == before


def test_placeholder_host_validates_but_does_not_optimize() -> None:
    assert run_cli("validate", "--study", "eagle3-kimi").returncode == 0
    proc = run_cli("optimize", "--study", "eagle3-kimi", "--trials", "1",
                   "--storage", "sqlite:///" + str(ROOT / "studies" / "never.db"))
    assert_one_line_error(proc, "placeholder", "hosts[0].ssh")
    assert not (ROOT / "studies" / "never.db").exists()


def test_unknown_sampler(make_study, tmp_path: Path) -> None:
    proc = run_cli("optimize", "--study", str(make_study()), "--trials", "1",
                   "--sampler", "annealing")
    assert_one_line_error(proc, "annealing")
    assert not (tmp_path / "t.db").exists()


def test_unreachable_host_named_and_nothing_written(make_study, tmp_path: Path) -> None:
    from sweeper.remote.host import free_port

    path = make_study(hosts=[{"ssh": f"root@127.0.0.1:{free_port()}",
                              "workdir": str(tmp_path / "host")}])
    proc = run_cli("optimize", "--study", str(path), "--trials", "1", timeout=120)
    assert_one_line_error(proc, str(path), "hosts[0].ssh", "127.0.0.1")
    assert not (tmp_path / "t.db").exists()


def test_bench_url_that_is_not_a_server_address() -> None:
    # it was tried three times as a request, then exit 1
    for url in ("localhost:30000", "ftp://127.0.0.1:30000", "http://:30000"):
        proc = run_cli("bench", "--url", url)
        assert_one_line_error(proc, f"--url {url}: give the server's base URL")
