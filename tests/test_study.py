"""Study files: the shipped studies load, and every kind of bad input is one clear line
naming the file and the key."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sweeper.errors import InputError, StudyError
from sweeper.remote.target import SSHTarget
from sweeper.study import (
    DRAFT,
    STEPS,
    TOPK,
    HostSpec,
    load_study,
    parse_duration,
    placeholder_message,
)

REPO = Path(__file__).resolve().parent.parent
STUDIES = REPO / "studies"

BASE: dict[str, Any] = {
    "hosts": [{"ssh": "local"}],
    "server": {
        "launcher": "{python} -m sweeper.sim",
        "port": 30817,
        "args": {"model-path": "m", "tp-size": 4, "speculative-algorithm": "EAGLE3"},
    },
    "space": {
        STEPS: {"int": [1, 6]},
        TOPK: {"choices": [1, 2, 4]},
        DRAFT: {"int": [2, 16]},
        "env.NCCL_ALGO": {"choices": ["unset", "Ring"]},
    },
    "start_from": [{STEPS: 5, TOPK: 1, DRAFT: 6}],
}


def write(tmp_path: Path, data: Any, name: str = "s") -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return p


def edit(fn: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    fn(data)
    return data


def error_of(path: Path | str, root: Path | None = None) -> str:
    with pytest.raises(StudyError) as info:
        load_study(str(path), root=root or Path(path).parent)
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert isinstance(info.value, InputError)
    return msg


# --------------------------------------------------------------------- shipped studies
@pytest.mark.parametrize("name", ["demo", "eagle3-kimi"])
def test_shipped_studies_load(name: str) -> None:
    spec = load_study(name, root=STUDIES)
    assert spec.name == name
    assert spec.path == STUDIES / f"{name}.yaml"
    # SGLang 0.5.23's default for a non-Llama target: (3, 1, 4)
    assert spec.start_from and spec.start_from[0][STEPS] == 3
    assert spec.start_from[0][DRAFT] == 4
    # upstream 0.5.23 has no draft-TP flag: a shipped study never passes it
    assert "speculative-draft-tp-size" not in spec.space
    assert "speculative-draft-tp-size" not in spec.server.args


def test_demo_study_shape() -> None:
    spec = load_study(str(STUDIES / "demo.yaml"))
    assert spec.hosts[0].is_local and not spec.hosts[0].is_placeholder
    assert spec.server.launcher == "{python} -m sweeper.sim --sim-profile demo"
    assert spec.server.startup_timeout == 60.0 and spec.server.hang_timeout == 30.0
    assert spec.server.args["tp-size"] == 4
    assert spec.space["attn-dp-size"].choices == (1, 4)
    assert spec.benchmark.max_tokens == 200 and spec.benchmark.runs == 10


def test_kimi_study_placeholder_accepted_and_explained() -> None:
    spec = load_study("eagle3-kimi", root=STUDIES)
    host = spec.hosts[0]
    assert host.is_placeholder and not host.is_local
    assert host.python == "~/ml-env/bin/python3"
    assert spec.server.port == 8000 and spec.server.args["tp-size"] == 8
    assert spec.server.args["trust-remote-code"] is True
    assert spec.benchmark.api == "chat" and spec.benchmark.max_tokens == 500
    assert (spec.benchmark.warmup, spec.benchmark.runs) == (1, 10)
    assert spec.baseline is True
    assert spec.space["env.NCCL_MIN_NCHANNELS"].choices == ("unset", 4, 8, 16)
    expected = ("studies/eagle3-kimi.yaml: hosts[0].ssh is a placeholder: set it to your "
                "GPU node's ~/.ssh/config alias or user@host")
    assert placeholder_message(host) == expected
    assert placeholder_message(spec, 0) == expected.replace(
        "studies/eagle3-kimi.yaml", str(STUDIES / "eagle3-kimi.yaml"))
    assert spec.placeholder_error() is not None
    assert "hosts[0].ssh is a placeholder" in (spec.placeholder_error() or "")


def test_defaults_and_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, BASE, "mystudy")
    monkeypatch.chdir(tmp_path)
    spec = load_study("mystudy", root=Path("."))
    assert spec.name == "mystudy"
    assert spec.storage == "sqlite:///mystudy.db"  # relative to the CWD, like SQLAlchemy
    assert spec.hosts[0].python == sys.executable  # local: this sweeper's python
    assert spec.hosts[0].workdir == "~/.sweeper/mystudy"
    assert spec.server.host == "127.0.0.1" and spec.server.stop_grace == 30.0
    assert spec.benchmark.request_timeout == 600.0
    assert spec.sweep.max_retries == 2 and spec.sweep.sampler == "tpe"


def test_default_storage_absolute_outside_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    path = write(tmp_path, BASE, "far")
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    assert load_study(str(path)).storage == f"sqlite:///{tmp_path}/far.db"  # sqlite:////abs


def test_lax_numbers_and_strings_kept(tmp_path: Path) -> None:
    text = yaml.safe_dump(edit(lambda d: d["space"].update(
        {"mem-fraction-static": {"float": ["1e-3", 0.9]},
         "attention-backend": {"choices": ["fa3", "1e-3", None]}})))
    spec = load_study(str(write(tmp_path, text)))
    p = spec.space["mem-fraction-static"]
    assert p.low == 0.001 and isinstance(p.low, float)
    assert spec.space["attention-backend"].choices == ("fa3", "1e-3", None)


def test_raw_yaml_1e_minus_3(tmp_path: Path) -> None:
    # PyYAML reads 1e-3 as a string: float ranges coerce it on purpose.
    text = yaml.safe_dump(BASE) + "\n"
    text = text.replace("space:\n", "space:\n  mem-fraction-static: {float: [1e-3, 1.0e-1]}\n")
    spec = load_study(str(write(tmp_path, text)))
    assert spec.space["mem-fraction-static"].low == 0.001


def test_env_numbers_coerced_and_durations(tmp_path: Path) -> None:
    data = edit(lambda d: d["server"].update(
        {"env": {"NCCL_MIN_NCHANNELS": 8, "X": 0.5, "HF_HOME": "/d"},
         "startup_timeout": "1m30s", "hang_timeout": 90, "stop_grace": "2.5"}))
    spec = load_study(str(write(tmp_path, data)))
    assert spec.server.env == {"NCCL_MIN_NCHANNELS": "8", "X": "0.5", "HF_HOME": "/d"}
    assert spec.server.startup_timeout == 90.0 and spec.server.hang_timeout == 90.0
    assert spec.server.stop_grace == 2.5


@pytest.mark.parametrize("text,seconds", [
    (90, 90.0), (2.5, 2.5), ("90s", 90.0), ("20m", 1200.0), ("1h", 3600.0),
    ("1m30s", 90.0), ("1h2m3s", 3723.0), ("45", 45.0)])
def test_parse_duration(text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_host_parts() -> None:
    h = HostSpec(ssh="alice@gpu-1.example:2222").target
    assert h is not None and (h.user, h.host, h.port) == ("alice", "gpu-1.example", 2222)
    assert HostSpec(ssh="gpu-node-1").target == SSHTarget("gpu-node-1")
    assert HostSpec(ssh="local").target is None


def test_ssh_and_url_accepted(tmp_path: Path) -> None:
    data = edit(lambda d: d.update(hosts=[
        {"ssh": "alice@10.0.0.2:22", "url": "http://10.0.0.2:30817"},
        {"ssh": "bob@[::1]"}, {"ssh": "CHANGE-ME-gpu-node"}]))
    spec = load_study(str(write(tmp_path, data)))
    assert [h.is_placeholder for h in spec.hosts] == [False, False, True]
    assert spec.hosts[0].python == "python3"  # remote default


def test_launcher_without_placeholder_ok(tmp_path: Path) -> None:
    launcher = "/opt/venv/bin/python -m sglang.launch_server"
    data = edit(lambda d: d["server"].update(launcher=launcher))
    assert load_study(str(write(tmp_path, data))).server.launcher.startswith("/opt")


@pytest.mark.parametrize("launcher", [
    """{python} -c "import runpy; runpy.run_module('sglang.launch_server')" """,
    "{python} -c 'a = 1; b = a | 2 > 1 && 3'",
    "env LD_PRELOAD=x\\;y {python} -m sglang.launch_server",
])
def test_launcher_operators_inside_quotes_are_data(tmp_path: Path, launcher: str) -> None:
    """The launcher's words are quoted one by one on the way out (launch.py): a `;` or
    `|` inside one quoted word is a character of that argument, not a shell's."""
    data = edit(lambda d: d["server"].update(launcher=launcher))
    assert load_study(str(write(tmp_path, data))).server.launcher == launcher


@pytest.mark.parametrize("launcher,word", [
    ("{python} -m sglang.launch_server; touch X", "sglang.launch_server;"),
    ("{python} -c 'x' && touch X", "&&"),
    ('{python} -c "$(touch X)"', "$(touch X)"),
    ('{python} -c "`id`"', "`id`"),
    ("{python} -m sim 2>'log'", "2>log"),
])
def test_launcher_operators_outside_quotes_are_refused(tmp_path: Path, launcher: str,
                                                       word: str) -> None:
    """Outside quotes, or substituted inside double quotes, a shell would act on them."""
    path = write(tmp_path, edit(lambda d: d["server"].update(launcher=launcher)))
    msg = error_of(path)
    assert msg.startswith(f"{path}: server.launcher: "), msg
    assert "shell syntax" in msg and word in msg, msg


def test_other_storage_urls_accepted(tmp_path: Path) -> None:
    for url in ["postgresql://u@h/db", "postgresql+psycopg2://u:p@h:5432/db",
                "mysql://u@h/db", "journal:///tmp/x.log", "sqlite:////abs/x.db"]:
        data = edit(lambda d, url=url: d.update(storage=url))
        assert load_study(str(write(tmp_path, data))).storage == url


# --------------------------------------------------------------------- file-level errors
def test_missing_file_lists_studies(tmp_path: Path) -> None:
    write(tmp_path, BASE, "alpha")
    msg = error_of(tmp_path / "nope.yaml")
    assert msg.startswith(f"{tmp_path}/nope.yaml: no such study file") and "alpha" in msg


def test_unknown_study_name(tmp_path: Path) -> None:
    write(tmp_path, BASE, "alpha")
    write(tmp_path, BASE, "beta")
    with pytest.raises(StudyError) as info:
        load_study("alpah", root=tmp_path)
    msg = str(info.value)
    assert "unknown study 'alpah'" in msg and "alpha, beta" in msg and "did you mean 'alpha'" in msg


def test_yml_suffix_found(tmp_path: Path) -> None:
    (tmp_path / "gamma.yml").write_text(yaml.safe_dump(BASE))
    assert load_study("gamma", root=tmp_path).name == "gamma"


def test_malformed_yaml_has_line_number(tmp_path: Path) -> None:
    p = write(tmp_path, "name: x\nhosts:\n  - ssh: local\nserver: {port: 1\nspace: [\n")
    msg = error_of(p)
    assert msg.startswith(f"{p}: malformed YAML at line ") and "; " in msg


def test_not_a_mapping(tmp_path: Path) -> None:
    msg = error_of(write(tmp_path, "- a\n- b\n"))
    assert "expected a mapping" in msg and "got a list" in msg


def test_empty_file(tmp_path: Path) -> None:
    assert "the file is empty" in error_of(write(tmp_path, ""))


# --------------------------------------------------------------------- key-level errors
CASES: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    # (id, edit, key path in the message, what the message says)
    ("unknown top key", lambda d: d.update(storag="sqlite:///x.db"),
     "storag", "did you mean 'storage'"),
    ("unknown server key", lambda d: d["server"].update(prot=1),
     "server.prot", "did you mean 'port'"),
    ("unknown host key", lambda d: d["hosts"][0].update(pyhton="p"),
     "hosts[0].pyhton", "did you mean 'python'"),
    ("unknown benchmark key", lambda d: d.update(benchmark={"max_token": 5}),
     "benchmark.max_token", "did you mean 'max_tokens'"),
    ("unknown param key", lambda d: d["space"].update({STEPS: {"intt": [1, 2]}}),
     f"space.{STEPS}.intt", "did you mean 'int'"),
    ("wrong type port", lambda d: d["server"].update(port="abc"),
     "server.port", "integer"),
    ("string for int", lambda d: d.update(benchmark={"runs": "5"}),
     "benchmark.runs", "integer"),
    ("wrong type hosts", lambda d: d.update(hosts="local"),
     "hosts", "list"),
    ("wrong type baseline", lambda d: d.update(baseline="yes"),
     "baseline", "boolean"),
    ("bad literal", lambda d: d.update(benchmark={"api": "grpc"}),
     "benchmark.api", "'grpc'"),
    ("no hosts", lambda d: d.update(hosts=[]), "hosts", "no hosts"),
    ("missing hosts", lambda d: d.pop("hosts"), "hosts", "missing"),
    ("empty choices", lambda d: d["space"].update({TOPK: {"choices": []}}),
     f"space.{TOPK}.choices", "empty choices"),
    ("duplicate choices", lambda d: d["space"].update({TOPK: {"choices": [1, 2, 2]}}),
     f"space.{TOPK}.choices[2]", "duplicate choice"),
    ("duplicate rendered", lambda d: d["space"].update({"env.X": {"choices": [1, "1"]}}),
     "space.env.X.choices[1]", "duplicate choice"),
    ("low > high", lambda d: d["space"].update({STEPS: {"int": [6, 1]}}),
     f"space.{STEPS}.int", "low 6 > high 1"),
    ("int bound float", lambda d: d["space"].update({STEPS: {"int": [1.0, 6]}}),
     f"space.{STEPS}.int[0]", "not an integer"),
    ("int bound string", lambda d: d["space"].update({STEPS: {"int": ["1", 6]}}),
     f"space.{STEPS}.int[0]", "not an integer"),
    ("float bound text", lambda d: d["space"].update({"mem-fraction-static": {"float": ["x", 1]}}),
     "space.mem-fraction-static.float[0]", "not a number"),
    ("range shape", lambda d: d["space"].update({STEPS: {"int": [1, 2, 3]}}),
     f"space.{STEPS}.int", "expected [low, high]"),
    ("two kinds", lambda d: d["space"].update({STEPS: {"int": [1, 2], "choices": [1]}}),
     f"space.{STEPS}", "exactly one of"),
    ("param not a mapping", lambda d: d["space"].update({STEPS: [1, 2]}),
     f"space.{STEPS}", "expected a mapping"),
    ("log low <= 0", lambda d: d["space"].update(
        {"cuda-graph-max-bs": {"int": [0, 64], "log": True}}),
     "space.cuda-graph-max-bs.log", "low > 0"),
    ("log with step", lambda d: d["space"].update(
        {"cuda-graph-max-bs": {"int": [1, 64], "log": True, "step": 2}}),
     "space.cuda-graph-max-bs.step", "log scale"),
    ("step misfit", lambda d: d["space"].update({"cuda-graph-max-bs": {"int": [1, 64], "step": 8}}),
     "space.cuda-graph-max-bs.step", "not a multiple"),
    ("underscore flag in space", lambda d: d["space"].update({"tp_size": {"choices": [1, 8]}}),
     "space.tp_size", "use SGLang's dashed name tp-size"),
    ("underscore flag in args", lambda d: d["server"]["args"].update({"trust_remote_code": True}),
     "server.args.trust_remote_code", "dashed name trust-remote-code"),
    ("leading dashes", lambda d: d["server"]["args"].update({"--tp-size": 8}),
     "server.args.--tp-size", "without dashes: tp-size"),
    ("uppercase flag", lambda d: d["space"].update({"Tp-Size": {"choices": [1]}}),
     "space.Tp-Size", "not an SGLang flag name"),
    ("reserved port flag", lambda d: d["server"]["args"].update({"port": 1}),
     "server.args.port", "set server.port instead"),
    ("fixed and searched", lambda d: d["server"]["args"].update({STEPS: 3}),
     f"space.{STEPS}", "both fixed in server.args and searched"),
    ("env fixed and searched", lambda d: d["server"].update(env={"NCCL_ALGO": "Ring"}),
     "space.env.NCCL_ALGO", "both fixed in server.env and searched"),
    ("spec without algorithm", lambda d: d["server"]["args"].pop("speculative-algorithm"),
     f"space.{STEPS}", "no speculative-algorithm"),
    ("topk without steps", lambda d: d["space"].pop(STEPS),
     f"space.{TOPK}", f"without {STEPS}"),
    ("steps without topk", lambda d: d["space"].pop(TOPK),
     f"space.{STEPS}", f"without {TOPK}"),
    ("topk >1 without draft", lambda d: d["space"].pop(DRAFT),
     f"space.{TOPK}", f"{DRAFT} is not set"),
    ("draft searched, topk always 1", lambda d: d["space"].update({TOPK: {"choices": [1]}}),
     f"space.{DRAFT}", "topk is always 1"),
    ("impossible topk", lambda d: d["space"].update(
        {STEPS: {"int": [1, 2]}, DRAFT: {"int": [8, 16]}}),
     f"space.{TOPK}", "topk=2 admits no"),
    ("spec takes ints", lambda d: d["space"].update({STEPS: {"float": [1, 3]}}),
     f"space.{STEPS}", "positive integers"),
    ("unset for a flag", lambda d: d["space"].update(
        {"attention-backend": {"choices": ["unset", "fa3"]}}),
     "space.attention-backend.choices[0]", "only for env.* parameters"),
    ("null env choice", lambda d: d["space"].update({"env.NCCL_PROTO": {"choices": [None, "LL"]}}),
     "space.env.NCCL_PROTO.choices[0]", "use 'unset'"),
    ("bad env name in space", lambda d: d["space"].update({"env.1BAD": {"choices": ["a"]}}),
     "space.env.1BAD", "not a valid environment variable name"),
    ("bad env name in server.env", lambda d: d["server"].update(env={"A-B": "1"}),
     "server.env.A-B", "not a valid environment variable name"),
    ("bool env value", lambda d: d["server"].update(env={"X": True}),
     "server.env.X", "string or a number"),
    ("nested arg", lambda d: d["server"]["args"].update({"json-model-override-args": {"a": 1}}),
     "server.args.json-model-override-args", "nested maps"),
    ("null arg", lambda d: d["server"]["args"].update({"attention-backend": None}),
     "server.args.attention-backend", "remove the key"),
    ("empty space", lambda d: d.update(space={}), "space", "empty"),
    ("bad storage scheme", lambda d: d.update(storage="redis://h/0"),
     "storage", "unsupported storage URL"),
    ("sqlite without file", lambda d: d.update(storage="sqlite:///"),
     "storage", "names no file"),
    ("bad duration", lambda d: d["server"].update(startup_timeout="20 minutes"),
     "server.startup_timeout", "not a duration"),
    ("negative duration", lambda d: d["server"].update(hang_timeout=-5),
     "server.hang_timeout", "positive"),
    ("bool duration", lambda d: d["server"].update(stop_grace=True),
     "server.stop_grace", "boolean"),
    ("empty launcher", lambda d: d["server"].update(launcher="  "),
     "server.launcher", "empty launcher"),
    ("port out of range", lambda d: d["server"].update(port=70000),
     "server.port", "65535"),
    ("ssh port out of range", lambda d: d.update(hosts=[{"ssh": "u@h:70000"}]),
     "hosts[0].ssh", "out of range"),
    ("ssh option injection", lambda d: d.update(hosts=[{"ssh": "-oProxyCommand=x"}]),
     "hosts[0].ssh", "is not a host"),
    ("duplicate host", lambda d: d.update(hosts=[{"ssh": "a"}, {"ssh": "a"}]),
     "hosts[1].ssh", "listed twice"),
    ("bad url", lambda d: d["hosts"][0].update(url="gpu:8000"),
     "hosts[0].url", "not an http(s) URL"),
    ("start_from unknown param", lambda d: d["start_from"][0].update({"speculative-num-stepz": 2}),
     "start_from[0].speculative-num-stepz", "did you mean 'speculative-num-steps'"),
    ("start_from outside space", lambda d: d["start_from"][0].update({STEPS: 9}),
     f"start_from[0].{STEPS}", "outside the space"),
    ("start_from wrong choice type", lambda d: d["start_from"][0].update({TOPK: "1"}),
     f"start_from[0].{TOPK}", "outside the space"),
    ("start_from fixed mismatch", lambda d: d["start_from"][0].update({"tp-size": 8}),
     "start_from[0].tp-size", "fixed to 4"),
    ("start_from topk1 draft", lambda d: d["start_from"][0].update({DRAFT: 7}),
     f"start_from[0].{DRAFT}", "steps + 1 = 6"),
    ("start_from draft cap", lambda d: d.update(start_from=[{STEPS: 1, TOPK: 2, DRAFT: 5}]),
     f"start_from[0].{DRAFT}", "breaks SGLang's rule"),
    ("start_from missing topk", lambda d: d.update(start_from=[{STEPS: 1}]),
     "start_from[0]", f"{TOPK} is missing"),
    ("start_from missing draft", lambda d: d.update(start_from=[{STEPS: 1, TOPK: 2}]),
     "start_from[0]", f"{DRAFT} is missing"),
    ("start_from not a list", lambda d: d.update(start_from={STEPS: 1}),
     "start_from", "list"),
    ("bad name", lambda d: d.update(name="a b"), "name", "not a usable study name"),
]


@pytest.mark.parametrize("edit_fn,key,what", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_study_errors(tmp_path: Path, edit_fn: Callable[[dict[str, Any]], None], key: str,
                      what: str) -> None:
    path = write(tmp_path, edit(edit_fn))
    msg = error_of(path)
    assert msg.startswith(f"{path}: {key}: "), msg
    assert what in msg, msg
    assert "; " in msg, msg  # what is wrong; what to do


def test_values_are_never_evaluated(tmp_path: Path) -> None:
    data = edit(lambda d: d["server"]["args"].update({"model-path": "$(rm -rf /); `id`"}))
    spec = load_study(str(write(tmp_path, data)))
    assert spec.server.args["model-path"] == "$(rm -rf /); `id`"
