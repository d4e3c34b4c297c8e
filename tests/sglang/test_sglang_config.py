"""SGLang 0.5.23's own loaders take what sweeper exports, and the recorded flag table is
SGLang's own (no server is started here).

- every distinct configuration of every shipped study (studies/*.yaml), as the launch
  YAML ``sweeper export`` writes, goes through SGLang's ``--config`` merger and argparse
  (tests/sglang/sglang_check.py) and each value arrives as written;
- ``sweeper export --adaptive`` of the shipped two-level study: the YAML through the same,
  the JSON through SGLang's adaptive-config loader;
- tests/fixtures/sglang-0.5.23-flags.json is what tools/sglang_flags.py prints from the
  installed SGLang today.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import create_trial

from sweeper.results import attrs as A
from sweeper.search.space import SearchSpace
from sweeper.study import load_study
from tests.conftest import ROOT, run_cli
from tests.sglang.real import sglang_env, sglang_python

pytestmark = pytest.mark.sglang

HERE = Path(__file__).resolve().parent
FLAGS = ROOT / "tests" / "fixtures" / "sglang-0.5.23-flags.json"
STUDIES = sorted(p.name for p in (ROOT / "studies").glob("*.yaml"))


def sglang_check(kind: str, paths: list[Path]) -> list[dict[str, Any]]:
    proc = subprocess.run([str(sglang_python()), str(HERE / "sglang_check.py"), kind,
                           *map(str, paths)], capture_output=True, text=True, timeout=900,
                          env=sglang_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def exported_yamls(study: Path, out: Path) -> list[Path]:
    """The launch YAML of every distinct configuration a study can produce (the baseline
    and start_from included), as ``sweeper export`` writes it (LaunchConfig.sglang_yaml:
    flags only, secrets left out; the environment goes to the .env file)."""
    spec = load_study(str(study))
    space = SearchSpace(spec)
    configs = [space.baseline_config()]
    configs += [space.launch_config(space.effective(space.internal_params(p)))
                for p in spec.start_from]
    configs += [space.launch_config(eff) for _internal, eff in space.configurations()]
    # one YAML per distinct set of flags, dumped once: the space's configurations differ
    # mostly in their environment (NCCL), which the YAML leaves out, and dumping each of
    # the Kimi study's 269,568 took 4 of this test's 5.5 minutes
    distinct = {repr(list(c.args.items())): c for c in configs}
    texts = sorted({c.sglang_yaml(redact=True) for c in distinct.values()})
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, text in enumerate(texts):
        path = out / f"{study.stem}-{i:04d}.yaml"
        path.write_text(f"# sweeper export of study {spec.name!r}\n" + text)
        paths.append(path)
    return paths


def assert_accepted(results: list[dict[str, Any]]) -> None:
    refused = [r for r in results if not r["ok"]]
    assert not refused, (f"SGLang 0.5.23 refused {len(refused)} of {len(results)} exports; "
                         f"first: {refused[0]['file']}: {refused[0]['error']}")
    for r in results:  # every value reaches SGLang as written
        written = yaml.safe_load(Path(r["file"]).read_text())
        for key, value in written.items():
            got = r["parsed"][key]
            want = [str(v) for v in value] if isinstance(value, list) else value
            if isinstance(value, bool):
                assert got is value, (r["file"], key, got)
            else:
                assert str(got) == str(want) or got == want, (r["file"], key, got, value)


@pytest.mark.parametrize("study", STUDIES)
def test_sglang_takes_every_export_of_a_shipped_study(study: str, tmp_path: Path) -> None:
    paths = exported_yamls(ROOT / "studies" / study, tmp_path)
    assert len(paths) > 1
    assert_accepted(sglang_check("config", paths))


def test_sglang_refuses_what_it_should(tmp_path: Path) -> None:
    """The check is SGLang's: a flag 0.5.23 lacks and a deprecated action in a YAML are
    refused with SGLang's own words (so an accepted export means something)."""
    bad = {"gone.yaml": {"model-path": "m", "speculative-draft-tp-size": 4},
           "deprecated.yaml": {"model-path": "m", "disable-cuda-graph": True},
           "renamed.yaml": {"model-path": "m", "cuda-graph-max-bs": 8}}
    paths = []
    for name, data in bad.items():
        (tmp_path / name).write_text(yaml.safe_dump(data))
        paths.append(tmp_path / name)
    got = {Path(r["file"]).name: r for r in sglang_check("config", paths)}
    assert not any(r["ok"] for r in got.values())
    assert "unrecognized arguments: --speculative-draft-tp-size" in got["gone.yaml"]["error"]
    assert "Unsupported config option 'disable_cuda_graph'" in got["deprecated.yaml"]["error"]
    assert "ambiguous option: --cuda-graph-max-bs" in got["renamed.yaml"]["error"]


def _adaptive_study(tmp: Path) -> Path:
    """The shipped two-level study with a sweep's record in a storage of its own: the
    baseline, a 3-step chain fastest alone, a 1-step chain fastest at 16."""
    data = yaml.safe_load((ROOT / "studies" / "demo-traffic.yaml").read_text())
    data["storage"] = f"sqlite:///{tmp / 'traffic.db'}"
    path = tmp / "demo-traffic.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    spec = load_study(str(path))
    space = SearchSpace(spec)
    study = optuna.create_study(storage=spec.storage, study_name=spec.name,
                                direction="maximize")
    study.set_user_attr(A.OBJECTIVE, spec.objective.signature())
    study.set_user_attr(A.SIMULATED, True)
    dists = space.distributions()

    def levels(per1: float, per16: float) -> dict[str, Any]:
        def one(per: float, level: int) -> dict[str, Any]:
            runs = [per * 0.99, per * 1.01]
            return {"per_request_runs": runs, "total_runs": [r * level for r in runs],
                    "per_request": {"mean": per}, "total": {"mean": per * level},
                    "ttft_s": {"mean": 0.03}, "itl_s": {"mean": 0.002}, "accept_length": 2.0}
        return {"1": one(per1, 1), "16": one(per16, 16)}

    s3 = {"speculative-num-steps": 3, "speculative-eagle-topk": 1}
    s1 = {"speculative-num-steps": 1, "speculative-eagle-topk": 1}
    for role, point, per1, per16 in ((A.BASELINE, None, 330.0, 250.0),
                                     (A.START_FROM, s3, 520.0, 370.0),
                                     (A.START_FROM, s1, 440.0, 390.0)):
        params = space.internal_params(point) if point else {}
        eff = space.effective(params) if point else {}
        config = space.launch_config(eff) if point else space.baseline_config()
        mix = [(per1 * per16) ** 0.5 * f for f in (0.99, 1.01)]
        study.add_trial(create_trial(
            params=params, distributions={k: dists[k] for k in params}, value=sum(mix) / 2,
            user_attrs={A.ROLE: role, A.CONFIG_ID: config.config_id(), A.EFFECTIVE: eff,
                        A.RUNS: mix, A.LEVELS: levels(per1, per16)}))
    return path


def _export_adaptive(tmp_path: Path) -> Path:
    study = _adaptive_study(tmp_path)
    out = tmp_path / "out" / "best.yaml"
    proc = run_cli("export", "--study", str(study), "--adaptive", "-o", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return out


def test_sglang_loads_the_adaptive_json_of_an_export(tmp_path: Path) -> None:
    out = _export_adaptive(tmp_path)
    [result] = sglang_check("adaptive", [out.with_suffix(".adaptive.json")])
    assert result["ok"], result["error"]
    assert result["slots"] == {"1": [3], "16": [1]}
    assert result["candidate_steps"] == [1, 3]


def test_sglang_takes_the_yaml_of_an_adaptive_export(tmp_path: Path) -> None:
    out = _export_adaptive(tmp_path)
    [result] = sglang_check("config", [out])
    assert_accepted([result])
    assert result["parsed"]["speculative-adaptive"] is True


def test_the_recorded_flag_table_is_sglangs_own() -> None:
    """tools/sglang_flags.py, run on the installed SGLang, prints the committed fixture."""
    proc = subprocess.run([str(sglang_python()), str(ROOT / "tools" / "sglang_flags.py")],
                          capture_output=True, text=True, timeout=600, env=sglang_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == json.loads(FLAGS.read_text())
    table = json.loads(FLAGS.read_text())
    names = {o for row in table for o in row["option_strings"]}
    assert "--speculative-num-steps" in names and "--cuda-graph-max-bs-decode" in names
    assert "--speculative-draft-tp-size" not in names and "--cuda-graph-max-bs" not in names
    assert next(r for r in table if "--disable-cuda-graph" in r["option_strings"])["deprecated"]
