"""Exports as SGLang 0.5.23 itself reads them: its own --config merger (loaded from the
wheel) and its own flags (the recorded argparse table) accept every export of the shipped
studies; what the build cannot take never reaches the file."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from sweeper.launch import LaunchConfig
from sweeper.results.exportable import Build, for_build
from sweeper.search.space import SearchSpace
from sweeper.study.load import load_study

from .conftest import run_cli
from .sglang_source import accepts, adaptive_candidate_steps
from .test_traffic_export import stored_study

STUDIES = Path(__file__).resolve().parent.parent / "studies"


def configs(name: str) -> list[LaunchConfig]:
    """The baseline, every start_from entry, the speculative numbers of the whole space at
    the first value of the other knobs, and every value of every other knob."""
    spec = load_study(str(STUDIES / f"{name}.yaml"))
    space = SearchSpace(spec)
    out = [space.baseline_config()]
    out += [space.launch_config(space.effective(space.internal_params(entry)) | {
        k: v for k, v in entry.items()}) for entry in spec.start_from]
    out += [space.launch_config(eff) for _, eff in
            itertools.islice(space.configurations(every_plain=False), 400)]
    base = space.effective(next(space.configurations(every_plain=False))[0])
    for pname, param in spec.space.items():
        if param.kind == "choices":
            out += [space.launch_config({**base, pname: v}) for v in param.choices]
    return out


@pytest.mark.parametrize("name", ["demo", "demo-traffic", "eagle3-kimi"])
def test_sglangs_merger_accepts_every_export_of_the_shipped_studies(name: str,
                                                                     tmp_path: Path) -> None:
    seen = set()
    for config in configs(name):
        text = for_build(config, Build()).config.sglang_yaml(redact=True)
        if text in seen:
            continue
        seen.add(text)
        path = tmp_path / "best.yaml"
        path.write_text(text)
        ns = accepts(path)  # raises as SGLang would
        data = yaml.safe_load(text)
        assert "port" not in data and "host" not in data  # where the sweep ran it
        for key, value in data.items():
            got = getattr(ns, key.replace("-", "_"))
            assert str(got) == str(value), (key, got, value)
    assert len(seen) > 3


def test_the_real_merger_refuses_what_old_exports_wrote(tmp_path: Path) -> None:
    """The apparatus is SGLang's: a deprecated action and the retired flag name fail."""
    old = tmp_path / "old.yaml"
    old.write_text("model-path: m\ndisable-cuda-graph: true\n")
    with pytest.raises(ValueError, match="Unsupported config option 'disable_cuda_graph'"):
        accepts(old)
    gone = tmp_path / "gone.yaml"
    gone.write_text("model-path: m\nspeculative-draft-tp-size: 4\n")
    with pytest.raises(SystemExit):
        accepts(gone)


def test_deprecated_spellings_are_exported_as_their_replacements(tmp_path: Path) -> None:
    config = LaunchConfig(args={"model-path": "m", "tp-size": 8, "disable-cuda-graph": True,
                                "enable-dp-attention": True, "dp-size": 4, "port": 8000,
                                "host": "127.0.0.1"})
    out = for_build(config, Build())
    path = tmp_path / "best.yaml"
    path.write_text(out.config.sglang_yaml())
    ns = accepts(path)
    assert ns.cuda_graph_backend_decode == "disabled"
    assert ns.cuda_graph_backend_prefill == "disabled"
    assert ns.attn_dp_size == "4" and not ns.enable_dp_attention
    assert len(out.notes) == 2


def test_a_build_without_a_flag_gets_no_such_key() -> None:
    build = Build(version="0.5.9", flags=frozenset({"model-path", "tp-size", "port"}),
                  deprecated=frozenset())
    out = for_build(LaunchConfig(args={"model-path": "m", "tp-size": 2,
                                       "speculative-attention-mode": "decode"}), build)
    assert out.config.args == {"model-path": "m", "tp-size": 2}
    assert "speculative-attention-mode left out" in out.notes[0]


@pytest.mark.parametrize("base16", [250.0, 420.0])  # a 1-step slot at 16, or a 0-step one
def test_sglangs_own_loaders_accept_the_adaptive_export(tmp_path: Path, base16: float) -> None:
    study = stored_study(tmp_path, base16=base16)
    data = yaml.safe_load(study.read_text())  # on upstream 0.5.23: no draft-TP flag
    del data["server"]["args"]["speculative-draft-tp-size"]
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "out" / "best.yaml"
    proc = run_cli("export", "--study", str(study), "--adaptive", "-o", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    ns = accepts(out)
    assert ns.speculative_adaptive is True
    steps = adaptive_candidate_steps(Path(ns.speculative_adaptive_config))
    assert steps == ([1, 3] if base16 < 300 else [0, 3])


def test_sglangs_adaptive_loader_is_the_apparatus(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"ema_alpha": 0.2}')
    with pytest.raises(ValueError, match="at least one integer-string"):
        adaptive_candidate_steps(bad)


def test_a_boolean_optional_flag_is_not_written_to_the_yaml(tmp_path: Path) -> None:
    build = Build(version="0.5.23", flags=frozenset({"model-path", "mm-enable-dp-encoder",
                                                     "no-mm-enable-dp-encoder"}))
    out = for_build(LaunchConfig(args={"model-path": "m", "mm-enable-dp-encoder": True}),
                    build)
    path = tmp_path / "best.yaml"
    path.write_text(out.config.sglang_yaml())
    accepts(path)
    assert "pass --mm-enable-dp-encoder on the command line" in out.notes[0]
    bad = tmp_path / "bad.yaml"
    bad.write_text("model-path: m\nmm-enable-dp-encoder: true\n")
    with pytest.raises(ValueError, match="BooleanOptionalAction"):
        accepts(bad)
