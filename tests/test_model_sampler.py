"""The model sampler inside a real Optuna study on a real SQLite file: proposals, failures
avoided, racing replicates marked, and a second process resuming the same study."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.results import attrs as A
from sweeper.search.sampler import make_sampler
from sweeper.search.space import SearchSpace
from sweeper.study import load_study

from .timeouts import scaled

ROOT = Path(__file__).resolve().parent.parent


def landscape(eff: dict[str, Any]) -> float | None:
    """A known answer: a chain/tree trade-off, NCCL factors, and one NCCL value that never
    starts (None). Not the simulator's formulas."""
    if eff.get("env.NCCL_ALGO") == "CollNetDirect":
        return None
    s, d = eff["speculative-num-steps"], eff["speculative-num-draft-tokens"]
    accept = accept_length(eff)
    # attention DP 4 on the demo's 4 GPUs: the draft on one GPU per group
    cycle = 10.0 + 0.3 * d + s * (1.2 if eff["attn-dp-size"] == 4 else 0.9)
    cycle *= {"Tree": 0.97, "Ring": 1.01}.get(eff.get("env.NCCL_ALGO", ""), 1.0)
    cycle *= {"LL": 0.98, "Simple": 1.05}.get(eff.get("env.NCCL_PROTO", ""), 1.0)
    return 1000.0 * accept / cycle


def accept_length(eff: dict[str, Any]) -> float:
    s, k, d = (eff["speculative-num-steps"], eff["speculative-eagle-topk"],
               eff["speculative-num-draft-tokens"])
    return min(1.0 + sum(0.75 ** i * (1 + 0.15 * (k - 1)) ** 0.5 for i in range(1, s + 1)),
               d + 0.0)


def drive(url: str, n: int, seed: int, group: str | None = None) -> list[str]:
    """``n`` trials of the demo study's space on ``url`` with the model sampler, told the
    way run/record.py tells them (measured on hosts of ``group``); returns who proposed
    each one."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = load_study(str(ROOT / "studies" / "demo.yaml"))
    space = SearchSpace(spec)
    sampler = make_sampler("model", seed, 4, space=space)
    sampler.group = group  # type: ignore[attr-defined]
    study = optuna.create_study(storage=url, study_name="m", direction="maximize",
                                sampler=sampler, load_if_exists=True)
    who = []
    for _ in range(n):
        trial = study.ask()
        eff = space.suggest(trial)
        cid = space.launch_config(eff).config_id()
        trial.set_user_attr(A.CONFIG_ID, cid)
        trial.set_user_attr(A.EFFECTIVE, eff)
        if group is not None:
            trial.set_user_attr(A.GROUP, group)
        note = sampler.deliberate(trial.number)  # type: ignore[attr-defined]
        if note:
            trial.set_user_attr(A.REPLICATE, note)
        who.append(str(sampler.proposed_by(trial.number)))  # type: ignore[attr-defined]
        value = landscape(eff)
        if value is None:
            trial.set_user_attr(A.FAILURE, "nccl")
            trial.set_constraint("failed", 1.0)
            study.tell(trial, state=TrialState.PRUNED)
            continue
        runs = [value * f for f in (0.98, 1.0, 1.02)]
        trial.set_user_attr(A.RUNS, runs)
        trial.set_user_attr(A.ACCEPT, accept_length(eff))
        trial.set_constraint("failed", 0.0)
        study.tell(trial, sum(runs) / 3)
    return who


def test_model_sampler_in_a_sqlite_study_with_resume(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    first = drive(url, 10, seed=5)
    assert first[:4] == ["tpe"] * 4 and "model" in first[4:]
    # a second process continues the same study with a fresh sampler
    proc = subprocess.run(
        [sys.executable, "-c", f"from tests.test_model_sampler import drive; "
                               f"print(','.join(drive({url!r}, 6, seed=6)))"],
        cwd=ROOT, capture_output=True, text=True, timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    second = proc.stdout.strip().splitlines()[-1].split(",")
    assert len(second) == 6 and set(second) <= {"model", "racing"}
    study = optuna.load_study(study_name="m", storage=url)
    trials = study.get_trials()
    assert len(trials) == 16
    seen: dict[str, int] = {}
    failed: set[str] = set()
    for t in trials:
        cid = t.user_attrs[A.CONFIG_ID]
        assert cid not in failed, f"trial {t.number} repeats a failed configuration"
        if cid in seen:  # a repeat is only ever a deliberate racing replicate
            assert t.user_attrs.get(A.REPLICATE), f"trial {t.number} repeats trial {seen[cid]}"
        seen.setdefault(cid, t.number)
        if t.state == TrialState.PRUNED:
            failed.add(cid)
    # after start-up, proposals avoid the value that failed
    late = [t for t in trials[8:] if t.user_attrs[A.EFFECTIVE].get("env.NCCL_ALGO")
            == "CollNetDirect"]
    assert len(late) <= 1


def test_the_model_of_one_group_of_hardware_is_fitted_on_its_own_trials(
        tmp_path: Path) -> None:
    """Hosts of other hardware share the study, not the model: a group with no trials of
    its own goes through its own start-up, where the other group's sampler models."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    h200 = drive(url, 8, seed=5, group="h200")
    assert h200[:4] == ["tpe"] * 4 and "model" in h200[4:]
    assert drive(url, 3, seed=6, group="a100") == ["tpe"] * 3
    assert set(drive(url, 2, seed=7, group="h200")) <= {"model", "racing"}


def test_model_sampler_climbs_a_known_landscape(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    drive(url, 24, seed=1)
    study = optuna.load_study(study_name="m", storage=url)
    startup = max(t.value or 0.0 for t in study.get_trials()[:4])
    spec = load_study(str(ROOT / "studies" / "demo.yaml"))
    best = max(v for v in (landscape(e) for _, e in SearchSpace(spec).configurations()) if v)
    # 24 of 3744 configurations, a third of them failing: near the top, well above start-up
    assert study.best_value >= 0.95 * best
    assert study.best_value > 1.05 * startup
