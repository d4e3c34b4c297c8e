"""Several hosts, one study: the claim rules (pure logic over trials), groups from
nvidia-smi output, one host's view of a study, and a real sweep on three local workers
whose search space is too small for all of them at once."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from sweeper.remote import LocalHost, free_port
from sweeper.remote.groups import UNKNOWN, detect_group, group_from_names, sim_query_argv
from sweeper.results import attrs as A
from sweeper.run.claims import admitted, duplicate_of, needs_baseline, room
from sweeper.run.common import SweepOptions
from sweeper.run.hostview import host_view
from sweeper.run.workers import HostPool
from sweeper.study import parse_study

from .conftest import demo_study_data, run_cli, two_group_study

T0 = datetime.now()  # live trials: started (and so beating, run/heartbeat.py) just now


@pytest.fixture(autouse=True)
def _started_now() -> None:
    """Each test's live trials start when it runs, not when the module was imported: a
    suite that reaches this file minutes later would see them stale."""
    global T0
    T0 = datetime.now()


def trial(number: int, state: TrialState, start_s: float | None = 0.0,
          **attrs: object) -> FrozenTrial:
    return FrozenTrial(number=number, state=state, value=1.0 if state == TrialState.COMPLETE
                       else None, datetime_start=None if start_s is None else
                       T0 + timedelta(seconds=start_s),
                       datetime_complete=None, params={}, distributions={},
                       user_attrs=dict(attrs), system_attrs={}, intermediate_values={},
                       trial_id=number)


def test_room_counts_finished_and_in_flight_but_not_handed_back_or_confirm() -> None:
    trials = [trial(0, TrialState.COMPLETE), trial(1, TrialState.PRUNED),
              trial(2, TrialState.RUNNING), trial(3, TrialState.FAIL),
              trial(4, TrialState.RUNNING, **{A.BACKED_OFF: "dup"}),
              trial(5, TrialState.RUNNING, **{A.CONFIRM: True}),
              trial(6, TrialState.PRUNED, **{A.SKIPPED: True})]
    assert room(trials, 4) == 1  # 2 finished + 1 in flight


def test_of_two_racing_for_the_last_place_only_the_later_one_backs_off() -> None:
    # both asked when one place was left; trial 7 started first although numbered later
    # (a queued trial keeps the number it got when it was queued)
    trials = [trial(0, TrialState.COMPLETE), trial(7, TrialState.RUNNING, start_s=1.0),
              trial(3, TrialState.RUNNING, start_s=2.0)]
    assert admitted(trials, 7, target=2)
    assert not admitted(trials, 3, target=2)
    # with room for both, both go on
    assert admitted(trials, 3, target=3)


def test_a_configuration_in_flight_is_a_duplicate_in_its_group_only() -> None:
    trials = [trial(1, TrialState.RUNNING, **{A.CONFIG_ID: "c", A.GROUP: "H200"}),
              trial(2, TrialState.COMPLETE, **{A.CONFIG_ID: "d", A.GROUP: "H200"})]
    assert duplicate_of(trials, 9, "c", "H200") == 1
    assert duplicate_of(trials, 9, "c", "A100") is None  # other hardware: measure it there
    assert duplicate_of(trials, 9, "d", "H200") is None  # finished: a replicate is fine
    assert duplicate_of(trials, 1, "c", "H200") is None  # itself


def test_each_group_gets_its_own_baseline() -> None:
    queued = trial(0, TrialState.WAITING, start_s=None, **{A.ROLE: A.BASELINE})
    assert not needs_baseline([queued], "A100")  # the study's queued one goes first
    measured = trial(0, TrialState.COMPLETE, **{A.ROLE: A.BASELINE, A.GROUP: "H200"})
    assert not needs_baseline([measured], "H200")
    assert needs_baseline([measured], "A100")


def test_groups_from_nvidia_smi_lines() -> None:
    assert group_from_names("NVIDIA H200\nNVIDIA H200\n") == "NVIDIA H200"
    assert group_from_names("NVIDIA A100-SXM4-80GB\nNVIDIA H100\n") == \
        "NVIDIA A100-SXM4-80GB+NVIDIA H100"
    assert group_from_names("\n") is None
    assert sim_query_argv(["/py", "-m", "sweeper.sim", "--sim-profile", "x", "--sim-seed",
                           "1"]) == ["/py", "-m", "sweeper.sim.nvidia_smi", "--sim-profile",
                                     "x", "--query-gpu=name", "--format=csv,noheader"]
    assert sim_query_argv(["/py", "-m", "sglang.launch_server"]) is None


def test_a_simulated_host_reports_its_profile_gpu() -> None:
    import sys

    host = LocalHost()
    argv = [sys.executable, "-m", "sweeper.sim", "--sim-profile", "demo"]
    assert "(simulated)" in detect_group(host, argv)
    assert detect_group(host, [sys.executable, "-m", "nothing_here"]) == UNKNOWN


def test_a_host_view_is_that_host_on_its_port(tmp_path: Path) -> None:
    data = demo_study_data(tmp_path)
    data["hosts"] = [{"ssh": "local", "port": 40001}, {"ssh": "local", "port": 40002,
                                                       "group": "g"}]
    spec = parse_study(data, tmp_path / "t.yaml")
    view = host_view(spec, 1)
    assert [h.label for h in view.hosts] == ["local:40002"] and view.server.port == 40002
    assert view.sweep.seed == spec.sweep.seed + 1  # workers do not propose in lockstep


def test_three_hosts_never_measure_one_configuration_at_once(tmp_path: Path) -> None:
    """Two configurations, three hosts, three trials: without the in-flight rule two hosts
    would serve the same configuration at once (the sampler has nothing else to give)."""
    data = demo_study_data(tmp_path, baseline=False, start_from=[],
                           sweep={"seed": 5, "n_startup_trials": 2})
    data["space"] = {"speculative-num-steps": {"choices": [2, 3]},
                     "speculative-eagle-topk": {"choices": [1]}}
    data["server"]["launcher"] += " --sim-noise 0"
    data["hosts"] = [{"ssh": "local", "port": free_port(), "workdir": str(tmp_path / f"h{i}")}
                     for i in range(3)]
    spec = parse_study(data, tmp_path / "t.yaml")
    pool = HostPool(spec, SweepOptions(trials=3))
    pool.open()
    summary = pool.run()
    assert summary.finished == 3
    trials = optuna.load_study(study_name="t", storage=spec.storage).trials
    measured = [t for t in trials if t.user_attrs.get(A.SERVER)]
    assert len([t for t in measured if t.state.is_finished()
                and t.state != TrialState.FAIL and not t.user_attrs.get(A.REPEAT_OF)]) == 3
    assert_no_overlap(measured)
    # which hosts take the three trials depends on which is ready first (a busy machine
    # may leave any of them behind); that they ran side by side is the point
    ran_on = {t.user_attrs[A.HOST] for t in measured}
    assert len(ran_on) >= 2 and ran_on <= {f"{h['ssh']}:{h['port']}" for h in data["hosts"]}
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]


def assert_no_overlap(trials: list[FrozenTrial]) -> None:
    """No two trials served the same configuration in the same group at the same time."""
    for a in trials:
        for b in trials:
            if a.number >= b.number or a.user_attrs[A.CONFIG_ID] != b.user_attrs[A.CONFIG_ID]:
                continue
            if a.user_attrs.get(A.GROUP) != b.user_attrs.get(A.GROUP):
                continue
            a0, a1 = a.datetime_start, a.datetime_complete or datetime.max
            b0, b1 = b.datetime_start, b.datetime_complete or datetime.max
            assert a1 <= b0 or b1 <= a0, f"trials {a.number} and {b.number} overlap"




def test_each_group_measures_its_own_baseline_and_has_its_own_winner(tmp_path: Path) -> None:
    """Two hosts of different hardware (named groups): each gets a baseline on its own
    hardware, and status names a winner per group."""
    data = demo_study_data(tmp_path, start_from=[], sweep={"seed": 4, "n_startup_trials": 2})
    path = two_group_study(tmp_path, data)
    pool = HostPool(parse_study(data, path), SweepOptions(trials=4))
    pool.open()
    pool.run()
    pool.done()
    trials = optuna.load_study(study_name="t", storage=data["storage"]).trials
    baselines = {t.user_attrs[A.GROUP]: t for t in trials
                 if t.user_attrs.get(A.ROLE) == A.BASELINE and t.state == TrialState.COMPLETE}
    assert set(baselines) == {"h200", "a100"}
    assert all(t.user_attrs[A.HOST].startswith("local:") for t in baselines.values())
    status = run_cli("status", "--study", str(path))
    assert status.returncode == 0, status.stderr
    assert "group h200: Best" in status.stdout and "group a100: Best" in status.stdout


def test_the_confirm_phase_stays_within_its_hosts_group(tmp_path: Path) -> None:
    """Two groups: each group's confirm phase confirms a leader of its own group and its
    visits count in that group only: neither group's winner pools runs measured on other
    hardware."""
    import yaml

    import sweeper.results.verdict as R
    from sweeper.results.hosts import in_group

    data = demo_study_data(tmp_path, start_from=[],
                           sweep={"seed": 4, "n_startup_trials": 2, "confirm_top": 1,
                                  "confirm_runs": 2})
    path = two_group_study(tmp_path, data)
    done = run_cli("optimize", "--study", str(path), "--trials", "6")
    assert done.returncode == 0, done.stdout + done.stderr
    trials = optuna.load_study(study_name="t", storage=data["storage"]).trials
    visits = [t for t in trials if t.user_attrs.get(A.CONFIRM)]
    assert visits, done.stdout
    assert {t.user_attrs.get(A.GROUP) for t in visits} == {"h200", "a100"}
    study = optuna.load_study(study_name="t", storage=data["storage"])
    for g, host in ((h["group"], f"local:{h['port']}") for h in data["hosts"]):
        assert f"Group {g} ({host}):" in done.stdout, done.stdout
        mine = [t for t in visits if t.user_attrs[A.GROUP] == g]
        assert len(mine) == 4, (g, [t.number for t in mine])  # the leader + baseline, twice
        # each group's verdict kept apart: the second group's did not overwrite the first's
        assert R.verdict(study, trials=in_group(trials, g)).confirmed, (g, done.stdout)
        kept = study.user_attrs[f"{A.CONFIRMED}:{g}"]["trials"].values()
        assert {n for ns in kept for n in ns} == {t.number for t in mine}, g
    swept = {g: {t.user_attrs[A.CONFIG_ID] for t in trials if t.state == TrialState.COMPLETE
                 and t.user_attrs.get(A.GROUP) == g and not t.user_attrs.get(A.CONFIRM)}
             for g in ("h200", "a100")}
    for g, own in swept.items():
        assert {t.user_attrs[A.CONFIG_ID] for t in visits
                if t.user_attrs[A.GROUP] == g} <= own, "a leader of its own group"
    # each host's live line names the best of its own group, never another group's trial
    group_of = {t.number: t.user_attrs.get(A.GROUP) for t in trials}
    host_group = {t.user_attrs[A.HOST]: t.user_attrs[A.GROUP] for t in trials
                  if A.HOST in t.user_attrs and A.GROUP in t.user_attrs}
    lines = [m for m in (re.search(r"^\[(?P<host>[^\]]+)\] trial \d+ .*\| best .*?"
                                   r"\(trials? (?P<best>[\d, ]+?)(?: pooled)?,", ln)
                         for ln in done.stdout.splitlines()) if m]
    assert lines, done.stdout
    for m in lines:
        best = {group_of[int(n)] for n in m["best"].split(",")}
        assert best == {host_group[m["host"]]}, (m.group(0), best)
    numbers = {t.number for t in visits if t.user_attrs[A.GROUP] == "h200"}
    a100 = next(ln for ln in done.stdout.splitlines() if ln.startswith("group a100: Best"))
    pooled = re.search(r"; trials? ([\d, ]+?)(?: pooled)?\)", a100)
    assert pooled is not None, a100
    assert not {int(n) for n in pooled.group(1).split(",")} & numbers, (a100, numbers)
    # no one winner across the two: the summary says so, and export asks which group
    assert re.search(r"Measured on 2 groups of hardware \((h200, a100|a100, h200)\)",
                     done.stdout), done.stdout
    assert "\nBest:" not in done.stdout, done.stdout
    out = tmp_path / "best.yaml"
    which = run_cli("export", "--study", str(path), "-o", str(out))
    assert which.returncode == 2 and "pass --group" in which.stderr, which.stderr
    assert not out.exists()
    one = run_cli("export", "--study", str(path), "-o", str(out), "--group", "a100")
    assert one.returncode == 0, one.stderr
    assert "GPU a100" in out.read_text() and a100.removeprefix("group a100: ") in one.stdout
    status = run_cli("status", "--study", str(path))  # the hint: the sweep's own command
    assert f"Export one: sweeper export --study {path} --group NAME -o best.yaml" in \
        " ".join(status.stdout.split()), status.stdout
    # the report and the dashboard's note: a winner per group, none across them
    mixed = run_cli("report", "--study", str(path))
    assert mixed.returncode == 2 and "pass --group" in mixed.stderr, mixed.stderr
    report = run_cli("report", "--study", str(path), "--group", "a100")
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "t-report-a100" / "report.html").read_text()
    assert "sweeper report: t (group a100)" in page
    winner = re.search(r"Best: (.+?) —", a100)
    assert winner is not None and winner.group(1) in page, (a100, page[:2000])
    note = optuna.load_study(study_name="t", storage=data["storage"]).user_attrs[A.WINNER]
    assert note.startswith("group ") and "group a100: " in note and "group h200: " in note
    # `sweeper confirm` alone: the first host's group's leaders, its visits tagged with it
    before = {t.number for t in trials}
    again = run_cli("confirm", "--study", str(path), "--top", "1", "--runs", "2")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Confirming group h200's leaders" in again.stdout, again.stdout
    assert "the other's with --group a100" in again.stdout, again.stdout  # not left unsaid
    new = [t for t in optuna.load_study(study_name="t", storage=data["storage"]).trials
           if t.number not in before]
    assert new and {t.user_attrs.get(A.GROUP) for t in new} == {"h200"}, new
    assert {t.user_attrs[A.CONFIG_ID] for t in new if t.user_attrs.get(A.ROLE) != A.BASELINE} \
        <= swept["h200"]
    # `--group`: that group's leaders, on its host (not the first listed)
    before = {t.number for t in optuna.load_study(study_name="t", storage=data["storage"]).trials}
    other_group = run_cli("confirm", "--study", str(path), "--top", "1", "--runs", "2",
                          "--group", "a100")
    assert other_group.returncode == 0, other_group.stdout + other_group.stderr
    assert "Confirming group a100's leaders" in other_group.stdout, other_group.stdout
    assert "the other's with --group h200" in other_group.stdout, other_group.stdout
    # it ends with the command that exports this group's winner (export needs --group)
    assert other_group.stdout.rstrip().splitlines()[-1] == \
        f"Export it: sweeper export --study {path} --group a100 -o best.yaml", other_group.stdout
    new = [t for t in optuna.load_study(study_name="t", storage=data["storage"]).trials
           if t.number not in before]
    assert new and {t.user_attrs.get(A.GROUP) for t in new} == {"a100"}, new
    assert {t.user_attrs.get(A.HOST) for t in new} == {f"local:{data['hosts'][1]['port']}"}
    # `--group all`: every group's leaders at once, each group on its own host
    before = {t.number for t in optuna.load_study(study_name="t", storage=data["storage"]).trials}
    both = run_cli("confirm", "--study", str(path), "--top", "1", "--runs", "2",
                   "--group", "all")
    assert both.returncode == 0, both.stdout + both.stderr
    assert "Confirming the leaders of 2 groups" in both.stdout, both.stdout
    new = [t for t in optuna.load_study(study_name="t", storage=data["storage"]).trials
           if t.number not in before]
    hosts = {f"local:{h['port']}": h["group"] for h in data["hosts"]}
    assert {(t.user_attrs.get(A.GROUP), hosts[t.user_attrs[A.HOST]]) for t in new} == \
        {("h200", "h200"), ("a100", "a100")}, new
    for g in ("h200", "a100"):  # a verdict, with its table, per group
        assert f"Group {g} (local:" in both.stdout and both.stdout.count("◀ winner") == 2
    for h in hosts:  # two groups' lines interleave: each names its host
        assert f"[{h}] confirm 1/2: baseline" in both.stdout, both.stdout
    assert "node-hours this confirm phase" in both.stdout, both.stdout
    assert both.stdout.rstrip().splitlines()[-1] == \
        f"Export one: sweeper export --study {path} --group NAME -o best.yaml", both.stdout
    none = run_cli("confirm", "--study", str(path), "--group", "l40s")
    assert none.returncode == 2 and re.search(r"--group l40s: study 't' has no measurement "
                                              r"on it; its groups: (h200, a100|a100, h200)",
                                              none.stderr), none.stderr
    data["hosts"][0]["group"] = "l40s"  # a first host of a group that measured nothing
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(data))
    refused = run_cli("confirm", "--study", str(other), "--top", "1", "--runs", "2")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "of group 'l40s', which measured nothing" in refused.stderr, refused.stderr
