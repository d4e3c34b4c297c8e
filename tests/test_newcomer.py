"""What a new user reads after a sweep: the export hint reproduces the sweep, the report's
sections all have content, its figures show what decides the pick."""

from __future__ import annotations

import html
import re
import shlex
import sys
from pathlib import Path

import optuna
import pandas as pd
import yaml

from sweeper.results import attrs as A
from sweeper.results import figures
from sweeper.results.headline import Headline
from tests.conftest import run_cli


def _export_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Export it: "))


def test_the_export_hint_run_as_printed_exports_this_sweeps_winner(make_study,
                                                                   tmp_path: Path) -> None:
    study = make_study(start_from=[])
    other = tmp_path / "other storage.db"  # not the study file's storage, a space in it
    proc = run_cli("optimize", "--study", str(study), "--storage", f"sqlite:///{other}",
                   "--trials", "2", "--no-confirm", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    command = _export_line(proc.stdout).removeprefix("Export it: ")
    words = shlex.split(command)
    assert words[:2] == ["sweeper", "export"] and str(study) in words
    assert f"sqlite:///{other}" in words
    # run it exactly as printed (from where the sweep ran)
    run = run_cli(*words[1:], cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    best = next(line for line in proc.stdout.splitlines() if line.startswith("Best: "))
    assert f"# {best}" in (tmp_path / "best.yaml").read_text()
    assert not (tmp_path / "t.db").exists()  # the study's own storage was never touched
    # the dashboard's note gives the same command
    stored = optuna.load_study(study_name="t", storage=f"sqlite:///{other}")
    assert stored.user_attrs[A.EXPORT] == command
    assert f"Export it: `{command}`" in Headline.of(stored).markdown(stored, True)
    # and a failed confirm phase's hint confirms this same study, in this same storage
    from sweeper.results.headline import confirm_hint

    assert shlex.split(confirm_hint(stored, "a100")) == \
        ["sweeper", "confirm", *words[2:-2], "--group", "a100"]
    assert shlex.split(confirm_hint(stored, None)) == ["sweeper", "confirm", *words[2:-2]]


def test_the_export_hint_is_short_for_a_study_given_by_name() -> None:
    from sweeper.cli.common import export_command
    from sweeper.study import load_study

    demo = load_study("demo")
    assert export_command("demo", None, demo) == "sweeper export --study demo -o best.yaml"
    assert export_command("demo", demo.storage, demo) == \
        "sweeper export --study demo -o best.yaml"
    assert export_command("demo", "postgresql://u:pw@db/x", demo) == \
        "sweeper export --study demo --storage 'postgresql://u:***@db/x' -o best.yaml"


def _section(page: str, title: str) -> str:
    start = page.index(f"<h2>{title}")
    end = page.find("<h2", start + 4)
    return page[start:end if end > 0 else len(page)]


def test_report_confirm_table_and_trials_table(finished: Path, tmp_path: Path) -> None:
    proc = run_cli("report", "--study", str(finished), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r" / "report.html").read_text()
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{finished.parent / 't.db'}")
    confirmed = study.user_attrs[A.CONFIRMED]
    confirm = _section(page, "Confirm phase")
    rows = re.findall(r"<tr>\s*<td>", confirm)
    assert len(rows) == len(confirmed["trials"]) >= 2  # each contender and the baseline
    assert "(winner)" in confirm and "baseline (no speculation)" in html.unescape(confirm) \
        or "no speculation (baseline)" in html.unescape(confirm)
    trials = _section(page, "Trials")
    assert "&lt;NA&gt;" not in trials and "<NA>" not in trials and "NaN" not in trials
    header = re.findall(r"<th>([^<]*)</th>", trials)
    assert header.index("tok/s") < header.index("num-steps")  # figures before knobs
    assert "baseline (no speculation)" in trials
    # one level: no traffic section at all; every other section has content
    assert "concurrency level" not in page and "missing-traffic" not in page


def test_failure_map_orders_numbers_as_numbers() -> None:
    draft = pd.array([3, 11, 4, 13, 2, None], dtype="Int64")  # as trials_frame types it
    df = pd.DataFrame({"state": ["complete", "pruned", "complete", "pruned", "complete",
                                 "complete"],
                       "confirm": [False] * 6, "skipped": [False] * 6,
                       "failure": [None, "oom", None, "oom", None, None],
                       "speculative-num-draft-tokens": draft})
    fig = figures.failure_map(df, ["speculative-num-draft-tokens"])
    assert fig is not None
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["2", "3", "4", "11", "13"]


def test_leaders_axis_shows_the_small_differences() -> None:
    rows = [("a", 1.40, 1.38, 1.42), ("b", 1.39, 1.37, 1.41), ("c", 1.37, 1.35, 1.39)]
    fig = figures.leaders(rows)
    assert fig is not None
    low, high = fig.axes[0].get_xlim()
    assert 30 < low < 35 and 42 < high < 45  # not from 0%: 1-2% apart is visible



def test_status_at_80_columns_keeps_the_knobs_that_differ(make_study, tmp_path: Path) -> None:
    import io

    from optuna.distributions import IntDistribution
    from rich.console import Console

    from sweeper.results.status import print_status
    from sweeper.study import load_study

    spec = load_study(str(make_study()))
    study = optuna.create_study(study_name="t", storage=spec.storage, direction="maximize")
    common = {"speculative-num-steps": 3, "speculative-eagle-topk": 2,
              "speculative-num-draft-tokens": 7, "speculative-draft-tp-size": 4,
              "env.NCCL_MIN_NCHANNELS": 16}
    variants = [{}, {"env.NCCL_ALGO": "Tree", "env.NCCL_PROTO": "LL128"},
                {"env.NCCL_ALGO": "Ring", "env.NCCL_PROTO": "LL128"},
                {"env.NCCL_ALGO": "Tree", "env.NCCL_PROTO": "Simple"}]
    for i, extra in enumerate(variants):
        eff = {**common, **extra} if extra else {}
        study.add_trial(optuna.trial.create_trial(
            params={"x": i}, distributions={"x": IntDistribution(0, 9)}, value=500.0 + i,
            user_attrs={A.ROLE: A.SAMPLER if extra else A.BASELINE, A.CONFIG_ID: f"c{i}",
                        A.EFFECTIVE: eff, A.RUNS: [500.0 + i, 501.0 + i]}))
    buf = io.StringIO()
    print_status(Console(file=buf, width=80, highlight=False, soft_wrap=True), spec,
                 spec.storage)
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80, lines
    rows = {line.split()[0]: line for line in lines if line.strip()[:1].isdigit()}
    assert "ALGO=Tree PROTO=LL128" in rows["1"] and "ALGO=Ring PROTO=LL128" in rows["2"]
    assert "ALGO=Tree PROTO=Simple" in rows["3"]
    assert any("every configuration below has s3 k2 d7 tp4 MIN_NCHANNELS=16" in line
               for line in lines)


def test_piped_output_respects_columns(finished: Path) -> None:
    proc = run_cli("status", "--study", str(finished), env={"COLUMNS": "80"})
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run([sys.executable, "-m", "sweeper", "status", "--study", str(finished)],
                           capture_output=True, text=True, env=env, check=True)
    assert max(len(line) for line in piped.stdout.splitlines()) <= 80


def test_the_summary_counts_real_restarts_in_good_english() -> None:
    from collections import Counter

    from sweeper.results.status import summary_counts
    from sweeper.run.common import SweepSummary

    s = SweepSummary("demo", "sqlite:///x.db", finished=40, complete=38, reused=5,
                     pruned=Counter({"oom": 2}), failed=1, retried=1, skipped=1)
    text = summary_counts(s)
    assert "35 trials restarted the server, 5 more measured on the server already running" \
        in text
    assert "1 infrastructure failure (1 queued again)" in text
    assert "1 proposal skipped" in text
    one = summary_counts(SweepSummary("demo", "x", finished=1, complete=1))
    assert "1 trial restarted the server" in one and "0 infrastructure failures" in one


def test_the_start_spread_counts_configurations_in_good_english() -> None:
    from sweeper.results.verdict import Verdict

    assert "(s)" not in (Verdict.start_text.__doc__ or "")
    from sweeper.measure.stats import StartVariance

    texts = [Verdict(None, None, False, start=StartVariance(0.023**2, configs, configs + p,
                                                            prior_df=p)).start_text() or ""
             for configs, p in ((1, 2.0), (2, 1.0))]
    assert "from 1 configuration measured" in texts[0]
    assert "counted as 2 such configurations)" in texts[0]
    assert "from 2 configurations measured" in texts[1]
    assert "counted as 1 such configuration)" in texts[1]


def test_help_lists_every_command_whole_and_every_bench_option_has_help() -> None:
    from sweeper.cli import app

    top = run_cli("--help", env={"COLUMNS": "80"}).stdout
    commands = top.split("Commands:")[1]
    assert "..." not in commands
    for info in app.registered_commands:
        name = info.name or info.callback.__name__
        assert f"  {name.replace('_', '-')} " in commands, name
    bench = run_cli("bench", "--help", env={"COLUMNS": "200"}).stdout
    options = [line for line in bench.split("Options:")[1].splitlines()
               if line.strip().startswith("--")]
    for line in options:  # "--runs <int range>   Measured runs ...  [default: 5; x>=1]"
        parts = [p for p in re.split(r"\s{2,}", line.strip()) if p]
        assert len(parts) >= 2 and not parts[1].startswith("["), line
    optimize = " ".join(run_cli("optimize", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "the study file's folder" in optimize


def test_how_sure_says_what_it_means_and_on_which_runs(finished: Path) -> None:
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{finished.parent / 't.db'}")
    h = Headline.of(study)
    assert h.confirmed and h.sure is not None
    text = "\n".join(h.lines())
    assert "within 1% of every other" not in text
    said = re.search(r"none of the (\d+) other configurations measured is truly more than "
                     "1% faster", text)
    import sweeper.results.verdict as R
    from sweeper.results.confirmed import confirmed_for

    trials = study.get_trials()
    lossy = set(R.cannot_win(confirmed_for(study, trials)))
    others = [r for r in R.config_results(trials) if r.runs and r.config_id not in lossy]
    assert said is not None and int(said.group(1)) == len(others) - 1 >= 2, text
    assert "sweep and confirm phase" in text
    # the figure the live output showed (all runs pooled) is named beside the fresh one
    assert h.pooled is not None and h.best is not None
    if h.pooled.stats.n != h.best.stats.n:
        assert f"all {h.pooled.stats.n} runs of it" in text
    else:  # the figure is every start of it: it must not be called the fresh runs'
        assert "fresh" not in text and "pools every start of it" in text


def test_the_confirmed_winners_line_names_the_runs_its_figure_rests_on() -> None:
    from sweeper.results.verdict import ConfigResult

    eff = {"speculative-num-steps": 2, "speculative-eagle-topk": 1,
           "speculative-num-draft-tokens": 3}
    sweep, fresh = [100.0, 101.0, 99.0, 100.5], [98.0, 99.0, 98.5, 99.5]
    whole = ConfigResult("a", eff, "trial", [3, 9], sweep + fresh,
                         starts=[sweep, fresh])
    fresh_only = ConfigResult("a", eff, "trial", [9], fresh, starts=[fresh])
    kept = "\n".join(Headline(whole, None, True, pooled=whole).lines())
    assert "the winner of the confirm phase" in kept and "pools every start of it" in kept
    assert "fresh" not in kept  # every start is pooled: not the fresh runs' figure
    dropped = "\n".join(Headline(fresh_only, None, True, pooled=whole).lines())
    assert "fresh runs only" in dropped and "all 8 runs of it" in dropped
    assert "8 runs" not in dropped.splitlines()[0]  # the figure itself is the fresh 4


def test_a_tie_within_the_noise_recommends_the_simplest_with_the_rule() -> None:
    import random

    from sweeper.results.simplest import away_from_defaults, describe, simplest_tied
    from sweeper.results.verdict import ConfigResult

    rng = random.Random(5)

    def runs(mean: float) -> list[float]:
        return [rng.gauss(mean, mean * 0.02) for _ in range(30)]

    spec = {"speculative-num-steps": 2, "speculative-eagle-topk": 1,
            "speculative-num-draft-tokens": 3}
    defaults = {"speculative-num-steps": 5, "speculative-eagle-topk": 1,
                "speculative-num-draft-tokens": 6}
    best = ConfigResult("a", {**spec, "env.NCCL_ALGO": "Tree", "env.NCCL_PROTO": "LL"},
                        "config", runs=runs(1000))
    plain = ConfigResult("b", {**spec, "env.NCCL_ALGO": "unset", "env.NCCL_PROTO": "unset"},
                         "config", runs=runs(997))
    slow = ConfigResult("c", {**defaults, "env.NCCL_ALGO": "unset",
                              "env.NCCL_PROTO": "unset"}, "config", runs=runs(900))
    assert away_from_defaults(best.effective, defaults) == 4
    assert away_from_defaults(plain.effective, defaults) == 2
    assert away_from_defaults(slow.effective, defaults) == 0
    found = simplest_tied(best, [best, plain, slow], defaults)
    assert found is not None and found.result is plain  # slow is simpler but not tied
    line = describe(found)
    assert "2 settings away from SGLang's defaults against the winner's 4" in line
    assert "rule" in line and "95% interval includes 0" in line
    # the winner is already the simplest of its ties: nothing to say
    assert simplest_tied(plain, [best, plain, slow], defaults) is None


def test_validate_catches_a_typo_in_server_args_on_this_machine(make_study,
                                                                tmp_path: Path) -> None:
    data = yaml.safe_load(make_study().read_text())
    args = data["server"]["args"]
    args["tp-sise"] = args.pop("tp-size")
    study = tmp_path / "typo.yaml"
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli("validate", "--study", str(study))
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no --tp-sise (did you mean --tp-size?)" in lines[0]
    assert lines[0].count("tp-sise") == 1 and str(study) in lines[0]
    assert not (tmp_path / "t.db").exists()
    ok = run_cli("validate", "--study", str(make_study()))
    assert ok.returncode == 0 and "every flag is in this machine's launcher --help" in ok.stdout


def _confirm_outcome(lossy: bool = False):  # noqa: ANN202
    """Four contenders that differ only in their NCCL settings, and the baseline."""
    from sweeper.launch import LaunchConfig
    from sweeper.measure.stats import speedup
    from sweeper.results.verdict import ConfigResult
    from sweeper.run.confirm import Candidate, ConfirmOutcome

    common = {"speculative-num-steps": 3, "speculative-eagle-topk": 2,
              "speculative-num-draft-tokens": 7, "speculative-draft-tp-size": 4,
              "env.NCCL_MIN_NCHANNELS": 16}
    variants = [{"env.NCCL_ALGO": "Tree", "env.NCCL_PROTO": "LL128"},
                {"env.NCCL_ALGO": "Ring", "env.NCCL_PROTO": "LL128"},
                {"env.NCCL_ALGO": "Tree", "env.NCCL_PROTO": "Simple"},
                {"env.NCCL_ALGO": "Ring", "env.NCCL_PROTO": "Simple"}]
    base = Candidate(ConfigResult("base", {}, A.BASELINE), LaunchConfig(), {}, {},
                     runs=[330.0, 333.0, 336.0, 331.0])
    cands = [Candidate(ConfigResult(f"c{i}", {**common, **v}, A.SAMPLER), LaunchConfig(), {},
                       {}, runs=[520.0 - i + d for d in (-2.0, 1.0, 2.0, -1.0)])
             for i, v in enumerate(variants)]
    mism = {"c0": [1, 4, 7]} if lossy else {}
    winner = cands[1] if lossy else cands[0]
    return ConfirmOutcome([base, *cands], base, winner,
                          {c.result.config_id: (speedup(c.runs, base.runs) if c is not base
                                                else None) for c in [base, *cands]}, mism)


def test_confirm_table_at_80_columns_keeps_what_tells_contenders_apart() -> None:
    import io

    from rich.console import Console

    from sweeper.run.confirm_table import print_confirm

    for lossy in (False, True):
        buf = io.StringIO()
        print_confirm(Console(file=buf, width=80, highlight=False, soft_wrap=True),
                      _confirm_outcome(lossy))
        text = buf.getvalue()
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= 80, text
        assert "…" not in text and "..." not in text, text  # nothing cut
        rows = [line for line in lines if "ALGO=" in line]
        for algo, proto in (("Tree", "LL128"), ("Ring", "LL128"), ("Tree", "Simple"),
                            ("Ring", "Simple")):
            assert any(f"ALGO={algo} PROTO={proto}" in row for row in rows), text
        assert "every contender below has s3 k2 d7 tp4 MIN_NCHANNELS=16" in text, text
        winner = next(row for row in rows if "winner" in row)
        assert ("ALGO=Ring PROTO=LL128" if lossy else "ALGO=Tree PROTO=LL128") in winner
        # each row its tok/s and its speedup, whole
        assert re.search(r"ALGO=Tree PROTO=LL128.* 520±\d+ +\+56\.\d%", text), text
        if lossy:
            assert "differs on prompts" in text and "cannot win" in text


def test_a_winner_below_the_first_row_says_what_ranked_it() -> None:
    """The table is ordered by fresh runs; the winner is ranked on every start, the
    sweep's too. When the two disagree, the table says why the second row won."""
    import io

    from rich.console import Console

    from sweeper.run.confirm_table import print_confirm

    def printed(outcome) -> str:  # noqa: ANN001
        buf = io.StringIO()
        print_confirm(Console(file=buf, width=200, highlight=False, soft_wrap=True), outcome)
        return buf.getvalue()

    outcome = _confirm_outcome()
    base, *cands = outcome.candidates
    # c1's fresh runs are 1 tok/s behind c0's; its sweep starts put it ahead
    outcome.winner = cands[1]
    outcome.pooled = {"c0": (518.4, 3), "c1": (521.7, 4), "c2": (517.0, 2), "base": (332.5, 3)}
    text = printed(outcome)
    assert "NCCL_ALGO=Ring NCCL_MIN_NCHANNELS=16 NCCL_PROTO=LL128 ◀ winner" in text, text
    assert ("The winner is ranked on every server start, the sweep's and this phase's: "
            "521.7 tok/s over 4 starts against 518.4 over 3 for the first row; on this "
            "phase's fresh runs alone it is second.") in " ".join(text.split()), text
    # a winner on the first row, or a first row that cannot win (lossy), needs no such line
    outcome.winner = cands[0]
    assert "ranked on every server start" not in printed(outcome)
    lossy = _confirm_outcome(lossy=True)
    lossy.pooled = {"c0": (525.0, 3), "c1": (521.7, 4)}
    assert "ranked on every server start" not in printed(lossy)


def test_optimize_confirm_table_at_80_columns_piped(make_study, tmp_path: Path) -> None:
    study_file = make_study(
        start_from=[{"env.NCCL_ALGO": "Tree", "env.NCCL_PROTO": "LL128"},
                    {"env.NCCL_ALGO": "Ring", "env.NCCL_PROTO": "LL128"}],
        sweep={"seed": 3, "n_startup_trials": 2, "confirm_top": 2, "confirm_runs": 2})
    data = yaml.safe_load(study_file.read_text())
    data["space"] = {"env.NCCL_ALGO": {"choices": ["Ring", "Tree"]},  # replaced, not merged
                     "env.NCCL_PROTO": {"choices": ["LL128", "Simple"]}}
    data["server"]["args"].update({"speculative-num-steps": 3, "speculative-eagle-topk": 1})
    study_file.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli("optimize", "--study", str(study_file), "--trials", "3",
                   env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr + proc.stdout
    table = proc.stdout[proc.stdout.index("confirm phase (fresh"):]
    table = table[:table.index("\n\n")] if "\n\n" in table else table
    assert max(len(line) for line in table.splitlines()) <= 80, table
    assert "…" not in table, table
    rows = [line for line in table.splitlines() if "ALGO=" in line]
    assert len(rows) >= 2 and len({r.split("ALGO=")[1].split()[0] for r in rows}) == 2, table


def test_a_typo_of_tp_size_is_named_not_what_a_rule_concludes_from_the_default(
        make_study, tmp_path: Path) -> None:
    """The demo's space searches attn-dp-size 1 or 4: with ``tp-sise`` in server.args the
    divisibility rule sees SGLang's default tp-size 1; the user has to fix the typo."""
    data = yaml.safe_load(make_study().read_text())
    args = data["server"]["args"]
    args["tp-sise"] = args.pop("tp-size")
    data["space"]["attn-dp-size"] = {"choices": [1, 4]}
    study = tmp_path / "typo.yaml"
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli("validate", "--study", str(study))
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "server.args.tp-sise: no SGLang flag --tp-sise (did you mean --tp-size?)" in lines[0]
    assert "rename it tp-size" in lines[0] and "does not divide" not in lines[0]
    # a real flag next to it (dp-size) is not taken for a typo; the default is said
    del args["tp-sise"]
    args["dp-size"] = 1
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_cli("validate", "--study", str(study))
    assert proc.returncode == 2
    assert "attn-dp-size 4 does not divide tp-size 1 (not set: SGLang's default)" in proc.stderr
    assert "did you mean" not in proc.stderr


def test_a_study_not_swept_yet_names_the_optimize_that_would_fill_it(make_study,
                                                                    tmp_path: Path) -> None:
    """status/export/report on a storage with no such study: the printed `sweeper optimize`
    is this study file into this storage (not the built-in study of the same name into its
    default storage), and, run as printed, status then finds the study."""
    study_file = make_study()
    other = f"sqlite:///{tmp_path / 'other.db'}"
    for command in (["status"], ["export", "-o", str(tmp_path / "b.yaml")], ["report"]):
        proc = run_cli(*command, "--study", str(study_file), "--storage", other)
        assert proc.returncode == 2, proc.stderr
        line = proc.stderr.strip()
        assert len(line.splitlines()) == 1
        hint = line.split("run `")[1].split("`")[0]
        assert shlex.split(hint) == ["sweeper", "optimize", "--study", str(study_file),
                                     "--storage", other], line
    assert not (tmp_path / "other.db").exists(), "nothing written by a read-only command"
    # as printed (with a small --trials), it fills exactly the storage that was asked about
    words = shlex.split(hint)[1:] + ["--trials", "1", "--no-confirm"]
    swept = run_cli(*words)
    assert swept.returncode == 0, swept.stderr + swept.stdout
    assert run_cli("status", "--study", str(study_file), "--storage", other).returncode == 0
    # the study file's own storage (not swept into): no --storage in the hint
    own = run_cli("status", "--study", str(study_file))
    assert own.returncode == 2 and not (tmp_path / "t.db").exists()
    assert shlex.split(own.stderr.split("run `")[1].split("`")[0]) == [
        "sweeper", "optimize", "--study", str(study_file)]


def test_export_to_a_path_it_cannot_write_is_one_line(finished: Path, tmp_path: Path) -> None:
    """`-o -` (export writes files, not stdout), a folder, a path under a file: one line
    naming --output and what to give instead, exit 2, nothing written (once a file named
    "-" appeared, and a folder gave a traceback)."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for output, says in [("-", "export writes files"),
                         (str(tmp_path / "folder"), "a directory; give a file path such as"),
                         (str(tmp_path / "afile" / "best.yaml"), "is a file, not a directory")]:
        proc = run_cli("export", "--study", str(finished), "-o", output, cwd=tmp_path)
        assert proc.returncode == 2, (output, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: --output {output}: "), lines
        assert says in lines[0], lines
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_report_into_a_file_and_dashboard_on_a_busy_port_are_one_line(
        finished: Path, tmp_path: Path) -> None:
    """Both gave a traceback; the dashboard's came after it had printed its URL."""
    import socket

    afile = tmp_path / "afile"
    afile.write_text("x")
    proc = run_cli("report", "--study", str(finished), "-o", str(afile))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"error: --output {afile}: a file; the report is a folder "
                                   "(report.html, its figures, trials.csv): give a folder's "
                                   "path"), proc.stderr
    assert afile.read_text() == "x"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_cli("dashboard", "--study", str(finished), "--port", str(port), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: --port {port}: cannot listen on 127.0.0.1:{port} ("), lines
    assert "http://" not in proc.stdout, proc.stdout


def test_export_simplest_writes_the_tied_configuration_with_fewer_settings(
        make_study, tmp_path: Path) -> None:
    """The summary recommends the simplest tie; `export --simplest` is how to take it: its
    YAML and environment are that configuration's, its header names the winner it tied."""
    from optuna.trial import TrialState, create_trial

    from sweeper.search.space import SearchSpace
    from sweeper.study import load_study

    study_file = make_study(start_from=[])
    space = SearchSpace(load_study(str(study_file)))
    dists = space.distributions()
    storage = f"sqlite:///{tmp_path / 't.db'}"
    study = optuna.create_study(study_name="t", storage=storage, direction="maximize")
    shape = {"speculative-num-steps": 2, "speculative-eagle-topk": 1,
             "speculative-num-draft-tokens": 3}

    def add(algo: str, mean: float, role: str) -> None:
        params = space.internal_params({**shape, "env.NCCL_ALGO": algo})
        effective = space.effective(params)
        config = space.launch_config(effective)
        runs = [mean * (1 + 0.01 * (i % 5 - 2)) for i in range(30)]  # mean exactly
        study.add_trial(create_trial(
            params=params, distributions={k: dists[k] for k in params},
            value=sum(runs) / len(runs), state=TrialState.COMPLETE,
            user_attrs={A.ROLE: role, A.CONFIG_ID: config.config_id(), A.EFFECTIVE: effective,
                        A.RUNS: runs, "launch": config.to_dict()}))

    add("unset", 1000.0, A.START_FROM)
    out = tmp_path / "best.yaml"
    none = run_cli("export", "--study", str(study_file), "-o", str(out), "--simplest")
    assert none.returncode == 2 and not out.exists()
    assert "--simplest: no configuration" in none.stderr and "without --simplest" in none.stderr
    add("Tree", 1004.0, "sampler")
    status = run_cli("status", "--study", str(study_file))
    best = next(x for x in status.stdout.splitlines() if x.startswith("Best:"))
    said = " ".join(status.stdout.split())  # as wrapped at the terminal's width
    assert "NCCL_ALGO=Tree" in best and "the export command with --simplest writes it" in said
    proc = run_cli("export", "--study", str(study_file), "-o", str(out), "--simplest")
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "# Exported with --simplest" in text and "# Best: " in text
    # the two differ only in NCCL_ALGO: the simplest leaves it unset, so no environment
    # file is written (the winner's export writes NCCL_ALGO=Tree, below)
    assert not (tmp_path / "best.sh").exists() and not (tmp_path / "best.env").exists()
    assert yaml.safe_load(text)["speculative-num-steps"] == 2
    winner = run_cli("export", "--study", str(study_file), "-o", str(out))
    assert winner.returncode == 0 and "NCCL_ALGO=Tree" in (tmp_path / "best.env").read_text()
