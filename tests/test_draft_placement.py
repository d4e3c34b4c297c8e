"""Draft placement as the host's SGLang build allows: a speculative-draft-tp-size dimension
is searched only where the build's --help has the flag, else the preflight takes it out of
the space with one line; attention DP (--attn-dp-size) is the upstream mechanism, with
SGLang's rules checked when the study is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from sweeper.errors import StudyError
from sweeper.remote.preflight import drop_unavailable
from sweeper.sim.profiles import PROFILE_DIR
from sweeper.study import parse_study
from sweeper.study.load import load_study

from .conftest import SIM_LAUNCHER, demo_study_data, run_cli

DRAFT_TP = "speculative-draft-tp-size"


def study_with_draft_tp(tmp_path: Path, launcher: str) -> Path:
    data = demo_study_data(
        tmp_path,
        start_from=[{"speculative-num-steps": 2, "speculative-eagle-topk": 1, DRAFT_TP: 4}],
        benchmark={"api": "chat", "max_tokens": 30, "runs": 1, "warmup": 0},
        sweep={"seed": 3, "n_startup_trials": 2, "sampler": "random", "confirm_top": 0},
    )
    data["server"]["launcher"] = launcher
    data["space"] = {"speculative-num-steps": {"int": [1, 3]},
                     "speculative-eagle-topk": {"choices": [1]},
                     DRAFT_TP: {"choices": [1, 4]}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def trials(tmp_path: Path) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}")
    return study.get_trials()


def test_upstream_build_takes_the_draft_tp_dimension_out(tmp_path: Path) -> None:
    path = study_with_draft_tp(tmp_path, SIM_LAUNCHER)
    proc = run_cli("optimize", "--study", str(path), "--trials", "3")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    lines = [x for x in proc.stdout.splitlines() if "taken out" in x]
    assert len(lines) == 1, proc.stdout
    assert "speculative-draft-tp-size" in lines[0] and "attn-dp-size" in lines[0]
    done = [t for t in trials(tmp_path) if t.state.is_finished()]
    assert len(done) >= 3 and all(t.state == optuna.trial.TrialState.COMPLETE for t in done)
    assert all(DRAFT_TP not in t.params for t in done)
    assert all("--speculative-draft-tp-size" not in t.user_attrs["launch"]["command"]
               for t in done)
    # status reads them with the study file's full space
    status = run_cli("status", "--study", str(path))
    assert status.returncode == 0, status.stderr


def test_a_build_with_the_flag_keeps_the_dimension(tmp_path: Path) -> None:
    profile = yaml.safe_load((PROFILE_DIR / "demo.yaml").read_text())
    profile["build"] = {"version": "0.5.23+drafttp", "draft_tp_flag": True}
    (tmp_path / "drafttp.yaml").write_text(yaml.safe_dump(profile))
    launcher = SIM_LAUNCHER.replace("--sim-profile demo",
                                    f"--sim-profile {tmp_path / 'drafttp.yaml'}")
    assert launcher != SIM_LAUNCHER
    path = study_with_draft_tp(tmp_path, launcher)
    proc = run_cli("optimize", "--study", str(path), "--trials", "3")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "taken out" not in proc.stdout
    spec = [t for t in trials(tmp_path) if t.user_attrs.get("role") == "start_from"]
    assert spec and spec[0].params[DRAFT_TP] == 4
    assert "--speculative-draft-tp-size 4" in spec[0].user_attrs["launch"]["command"]


def test_drop_unavailable_is_pure_and_names_why(tmp_path: Path) -> None:
    spec = load_study(str(study_with_draft_tp(tmp_path, SIM_LAUNCHER)))
    kept, notes = drop_unavailable(spec, frozenset({DRAFT_TP}))
    assert kept is spec and notes == []
    dropped, notes = drop_unavailable(spec, frozenset())
    assert DRAFT_TP not in dropped.space and DRAFT_TP in spec.space
    assert all(DRAFT_TP not in entry for entry in dropped.start_from)
    assert len(notes) == 1 and notes[0].startswith("space: speculative-draft-tp-size")


BASE: dict[str, Any] = {
    "name": "r",
    "hosts": [{"ssh": "local"}],
    "server": {"launcher": "python -m sglang.launch_server",
               "args": {"model-path": "m", "tp-size": 8, "speculative-algorithm": "EAGLE3"}},
    "space": {"speculative-num-steps": {"int": [1, 3]},
              "speculative-eagle-topk": {"choices": [1]}},
}


def study(space: dict[str, Any] | None = None, args: dict[str, Any] | None = None) -> Any:
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["space"].update(space or {})
    data["server"]["args"].update(args or {})
    return parse_study(data, Path("r.yaml"))


@pytest.mark.parametrize(("space", "args", "key", "words"), [
    ({"attn-dp-size": {"choices": [1, 3]}}, {}, "space.attn-dp-size", "does not divide"),
    ({}, {"attn-dp-size": 2, "dp-size": 2}, "server.args.attn-dp-size", "replicas"),
    ({}, {"enable-dp-attention": True, "dp-size": 3}, "server.args.dp-size",
     "does not divide"),
    ({"speculative-attention-mode": {"choices": ["prefill", "decoed"]}}, {},
     "space.speculative-attention-mode", "did you mean 'decode'"),
    ({"speculative-draft-model-quantization": {"choices": [None, "fp9"]}}, {},
     "space.speculative-draft-model-quantization", "not a value SGLang takes"),
    ({}, {"disable-cuda-graph": True}, "server.args.disable-cuda-graph", "retired"),
    ({"cuda-graph-max-bs": {"choices": [8, 16]}}, {}, "space.cuda-graph-max-bs",
     "cuda-graph-max-bs-decode"),
    ({}, {"speculative-algorithm": "EAGLE4"}, "server.args.speculative-algorithm",
     "unknown speculative algorithm"),
    ({"speculative-ngram-max-bfs-breadth": {"choices": [1, 2]}}, {},
     "space.speculative-ngram-max-bfs-breadth", "only NGRAM"),
])
def test_sglang_rules_refuse_at_validate(space: dict, args: dict, key: str, words: str) -> None:
    with pytest.raises(StudyError) as err:
        study(space, args)
    assert key in str(err.value) and words in str(err.value)


def test_ngram_study_searches_its_own_flags() -> None:
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["server"]["args"]["speculative-algorithm"] = "NGRAM"
    data["space"] = {"speculative-num-draft-tokens": {"int": [4, 12]},
                     "speculative-ngram-max-bfs-breadth": {"choices": [1, 2, 4]}}
    spec = parse_study(data, Path("n.yaml"))
    from sweeper.search.space import SearchSpace

    sp = SearchSpace(spec)
    assert set(sp.distributions()) == {"speculative-num-draft-tokens",
                                       "speculative-ngram-max-bfs-breadth"}
    data["space"]["speculative-eagle-topk"] = {"choices": [1, 2]}
    with pytest.raises(StudyError, match="NGRAM ignores it"):
        parse_study(data, Path("n.yaml"))
    data["space"].pop("speculative-eagle-topk")
    data["space"]["attn-dp-size"] = {"choices": [1, 2]}
    with pytest.raises(StudyError, match="refuses DP attention for NGRAM"):
        parse_study(data, Path("n.yaml"))


def test_knobs_a_kimi_user_tunes_are_accepted() -> None:
    spec = study({"attn-dp-size": {"choices": [1, 2, 8]},
                  "speculative-attention-mode": {"choices": ["prefill", "decode"]},
                  "speculative-draft-model-quantization": {"choices": [None, "fp8"]},
                  "speculative-draft-attention-backend": {"choices": [None, "fa3"]},
                  "disable-overlap-schedule": {"choices": [False, True]},
                  "cuda-graph-max-bs-decode": {"choices": [16, 64]}})
    assert len(spec.space) == 8
