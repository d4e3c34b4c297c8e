"""The lossless check sees a real difference (issue 16): the simulator's profile makes the
fastest configuration lossy (one greedy token in five replaced, as a broken draft kernel
would), the confirm phase reports it, and it does not win: not in the confirm verdict,
not in `status`, not in `export`.

Which configuration is fastest is the simulator's ground truth (sweeper.sim.model's
expected_throughput on the same profile: demo, steps 3 at 514 tok/s, steps 1 at 441, no
speculation at 333), asserted from the model, not from the measured tok/s: the simulator
paces tokens on the wall clock, so a loaded machine measures every configuration slower by
an amount that does not follow the model. Noise is off (``--sim-noise 0``) all the same.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from sweeper.search.space import SearchSpace
from sweeper.sim.profiles import PROFILE_DIR
from sweeper.sim.truth import expected_throughput
from sweeper.study import load_study

from .conftest import demo_study_data, run_cli

LOSSY_FAST = """
faults:
  - kind: lossy
    when: {args: {speculative-num-steps: [3]}}
    every: 5
    reason: the draft kernel of this configuration accepts wrong tokens
"""


def test_a_lossy_configuration_is_reported_and_cannot_win(tmp_path: Path) -> None:
    profile = tmp_path / "lossy.yaml"
    profile.write_text((PROFILE_DIR / "demo.yaml").read_text() + LOSSY_FAST)
    steps = {"speculative-num-steps": {"choices": [1, 3]}}  # topk 1, fixed below
    data = demo_study_data(
        tmp_path,
        server={"launcher": f"{{python}} -m sweeper.sim --sim-profile {profile} --sim-seed 7 "
                            "--sim-startup-seconds 0.3 --sim-noise 0"},
        start_from=[{"speculative-num-steps": 3}, {"speculative-num-steps": 1}],
        sweep={"seed": 3, "confirm_top": 2, "confirm_runs": 2})
    data["space"] = steps  # replaced, not merged into the demo space
    data["server"]["args"]["speculative-eagle-topk"] = 1
    study_file = tmp_path / "t.yaml"
    study_file.write_text(yaml.safe_dump(data))
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "3")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    spec = load_study(str(study_file))
    space = SearchSpace(spec)
    fast_cfg, slow_cfg = (space.launch_config(space.effective(space.internal_params(
        {"speculative-num-steps": s}))) for s in (3, 1))
    fast, slow = fast_cfg.config_id(), slow_cfg.config_id()
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path / 't.db'}")
    verdict = study.user_attrs["sweeper:confirmed"]
    # the confirm phase saw the difference, on every prompt it compared
    assert verdict["lossless_mismatches"].get(fast), verdict
    assert slow not in verdict["lossless_mismatches"]
    assert "differs on prompts" in proc.stdout and "cannot win" in proc.stdout
    # the lossy configuration is the fastest by the simulator's model (its ground truth,
    # not the wall clock): only the lossless rule kept it from winning
    truth = {cfg.config_id(): expected_throughput(str(profile), cfg.args, cfg.env).tok_s
             for cfg in (fast_cfg, slow_cfg, space.baseline_config())}
    assert truth[fast] > truth[slow] > truth[space.baseline_config().config_id()], truth
    measured = {r["config_id"] for r in study_artifact(study, tmp_path)["results"]}
    assert measured == set(truth), "the confirm phase measured the three configurations"
    assert verdict["leaders"] and fast in verdict["leaders"], verdict
    assert verdict["winner"] == slow
    status = run_cli("status", "--study", str(study_file))
    best = status.stdout.split("Best:")[1].splitlines()[0]
    assert "steps=1" in best and "steps=3" not in best, best
    out = tmp_path / "best.yaml"
    assert run_cli("export", "--study", str(study_file), "-o", str(out)).returncode == 0
    assert yaml.safe_load(out.read_text())["speculative-num-steps"] == 1


def study_artifact(study: optuna.Study, tmp_path: Path) -> dict:
    """The confirm phase's confirm.json, as the study's artifact store holds it."""
    import json

    for path in (tmp_path / "t.artifacts").rglob("*"):
        if path.is_file() and path.read_bytes().startswith(b"{") and \
                b'"runs_per_config"' in path.read_bytes():
            return json.loads(path.read_text())
    raise AssertionError("no confirm.json artifact")


def test_the_verdict_skips_what_the_last_confirm_found_lossy() -> None:
    """Without fresh runs of the confirmed winner (results/verdict.py's fallback), the
    ranking still leaves out a configuration whose outputs differed."""
    from optuna.distributions import IntDistribution
    from optuna.trial import TrialState, create_trial

    from sweeper.results import attrs as A
    from sweeper.results.verdict import verdict

    study = optuna.create_study(direction="maximize")
    for cid, steps, value in (("lossy", 3, 500.0), ("exact", 1, 440.0)):
        study.add_trial(create_trial(
            params={"s": steps}, distributions={"s": IntDistribution(1, 3)}, value=value,
            state=TrialState.COMPLETE,
            user_attrs={A.CONFIG_ID: cid, A.RUNS: [value], A.ROLE: "sampler"}))
    assert verdict(study).best.config_id == "lossy"
    study.set_user_attr(A.CONFIRMED, {"winner": "gone", "trials": {},
                                      "lossless_mismatches": {"lossy": [0, 1]}})
    assert verdict(study).best.config_id == "exact"
