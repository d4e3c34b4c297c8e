"""The confirm phase: fresh interleaved measurements overturn a lucky one."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState, create_trial

from sweeper.search.space import SearchSpace
from sweeper.study import load_study

from .conftest import run_cli

# a real configuration of the demo space that the simulator's ground truth rates low
SLOW = {"speculative-num-steps": 1, "speculative-eagle-topk": 4,
        "speculative-num-draft-tokens": 2, "env.NCCL_ALGO": "Tree"}


def test_confirm_overturns_a_lucky_measurement(make_study, tmp_path: Path) -> None:
    study_file = make_study()
    assert run_cli("optimize", "--study", str(study_file), "--trials", "4").returncode == 0
    spec = load_study(str(study_file))
    space = SearchSpace(spec)
    storage = f"sqlite:///{tmp_path / 't.db'}"
    study = optuna.load_study(study_name="t", storage=storage)
    honest_best = max(t.value for t in study.get_trials(states=(TrialState.COMPLETE,)))
    # A trial of SLOW whose measurement was high by chance (recorded as it would be).
    params = space.internal_params(SLOW)
    dists = space.distributions()
    effective = space.effective(params)
    config = space.launch_config(effective)
    lucky = honest_best * 1.5
    study.add_trial(create_trial(
        params=params, distributions={k: dists[k] for k in params}, value=lucky,
        state=TrialState.COMPLETE,
        user_attrs={"role": "sampler", "config_id": config.config_id(), "effective": effective,
                    "tok_s_runs": [lucky, lucky], "launch": config.to_dict()}))
    status = run_cli("status", "--study", str(study_file))
    assert "steps=1 topk=4 draft=2" in status.stdout.split("Best:")[1].splitlines()[0]

    proc = run_cli("confirm", "--study", str(study_file), "--top", "2", "--runs", "4")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "winner" in proc.stdout and "vs baseline" in proc.stdout
    out = tmp_path / "best.yaml"
    assert run_cli("export", "--study", str(study_file), "-o", str(out)).returncode == 0
    exported = yaml.safe_load(out.read_text())
    assert (exported.get("speculative-num-steps"), exported.get("speculative-eagle-topk")) != \
        (1, 4), "the lucky configuration was exported"
    study = optuna.load_study(study_name="t", storage=storage)
    verdict = study.user_attrs["sweeper:confirmed"]
    numbers = verdict["trials"][config.config_id()]  # this phase's trials of SLOW
    runs = [r for t in study.get_trials() if t.number in numbers
            for r in t.user_attrs["tok_s_runs"]]
    assert max(runs) < lucky  # its fresh runs show the truth
    assert len(runs) == 4 and config.config_id() not in verdict["lossless_mismatches"]
    # the confirm measurements are kept as trials too: nothing measured is lost
    assert sum(1 for t in study.get_trials() if t.user_attrs.get("confirm")) == 3 * 2
