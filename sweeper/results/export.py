"""Export the best configuration as SGLang's launch YAML (+ the environment beside it).

The YAML holds only flags the host's build takes in a --config file (results/exportable.py:
its --help as the preflight stored it, never a deprecated action, no sweep-only port/host)
under a header naming the SGLang version, GPU and benchmark the winner was measured under.
The environment goes to ``best.env`` as plain ``NAME=value`` lines (``docker --env-file``,
systemd ``EnvironmentFile=``) and to ``best.sh``, a shell-sourceable copy the printed launch
command uses. Secrets are written as references, never as values (sweeper/launch.py): a
bare ``NAME`` line in best.env, ``export HF_TOKEN="${HF_TOKEN:?...}"`` in best.sh; a secret
flag is left out of the YAML and the launch command passes it from its variable
(``--api-key "$SGLANG_API_KEY"``). One line of the output says which variables to set.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sweeper.errors import InputError
from sweeper.launch import LaunchConfig, secret_variable
from sweeper.results import attrs as A
from sweeper.results.adaptive import FLAGS as ADAPTIVE_FLAGS
from sweeper.results.adaptive import SKIP_ZERO_STEP_ENV
from sweeper.results.adaptive import plan as adaptive_plan
from sweeper.results.exportable import Build, for_build
from sweeper.results.headline import Headline
from sweeper.results.hosts import of_group
from sweeper.results.simplest import describe as describe_simplest
from sweeper.results.storage import load_existing

if TYPE_CHECKING:
    from sweeper.results.verdict import ConfigResult
    from sweeper.study import StudySpec


@dataclass
class Exported:
    yaml_path: Path
    env_path: Path | None
    lines: list[str] = field(default_factory=list)
    shell_path: Path | None = None


def measured_under(spec: StudySpec, build: Build, gpu: str | None) -> str:
    """The header line of what the winner was measured under."""
    b = spec.benchmark
    levels = b.concurrency if isinstance(b.concurrency, list) else [b.concurrency]
    return (f"measured under: SGLang {build.version or 'version unknown'}, "
            f"GPU {gpu or 'unknown'}, benchmark {b.api} API, {b.max_tokens} new tokens, "
            f"concurrency {', '.join(map(str, levels))}, prompts {b.prompts}, "
            f"{b.runs} run{'s' if b.runs != 1 else ''} a trial")


def _chosen(spec: StudySpec, headline: Headline, at: int | None,
            simplest: bool = False) -> tuple[ConfigResult, list[str]]:
    """The configuration to export and the lines that say why it was chosen."""
    goal = headline.goal
    if simplest:
        if at is not None or len(goal.levels) > 1:
            raise InputError(f"--simplest: study {spec.name!r} has a winner per concurrency "
                             "level; the simplest tie is given for a study of one level only")
        if headline.simplest is None:
            raise InputError(f"--simplest: no configuration of study {spec.name!r} ties with "
                             "the winner within the noise with fewer settings away from "
                             "SGLang's defaults; export the winner (without --simplest)")
        lines = [line for line in headline.lines() if not line.startswith("Simplest within")]
        return headline.simplest.result, [
            "Exported with --simplest: the simplest configuration tied with the winner",
            describe_simplest(headline.simplest), "The winner, for reference:", *lines]
    if at is not None:
        if at not in goal.levels:
            raise InputError(f"--at {at}: study {spec.name!r} measured concurrency "
                             f"{list(goal.levels)}; pick one of them")
        best = headline.per_level.get(at) if len(goal.levels) > 1 else headline.best
        if best is None:
            raise InputError(f"{spec.path}: study {spec.name!r} has no configuration measured "
                             f"at concurrency {at} yet; run `sweeper optimize` first")
        line = next((x for x in headline.level_lines() if x.startswith(f"At concurrency {at}:")),
                    None)
        return best, [f"Winner at concurrency {at} (exported with --at {at}):",
                      line or headline.lines()[0]]
    if goal.multi:
        raise InputError(f"{spec.path}: objective: pareto has a front, not one winner; export "
                         f"one level's winner with --at LEVEL (one of {list(goal.levels)}) "
                         "or, when they differ only in steps, --adaptive")
    if headline.best is None:
        raise InputError(f"{spec.path}: study {spec.name!r} has no measured configuration "
                         "yet; run `sweeper optimize` first")
    return headline.best, headline.lines()


def _check_output(output: Path) -> None:
    """Refused before anything is read or written: ``-`` (export writes files: the YAML
    and, beside it, the environment and the launch script), a directory, a path under a
    file."""
    if str(output) == "-":
        raise InputError("--output -: export writes files (the launch YAML, and best.env "
                         "and best.sh beside it when the winner sets environment variables); "
                         "give a file path such as best.yaml")
    if output.is_dir():
        raise InputError(f"--output {output}: a directory; give a file path such as "
                         f"{output / 'best.yaml'}")
    above = next((p for p in output.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise InputError(f"--output {output}: {above} is a file, not a directory")


def export_best(spec: StudySpec, storage_url: str, output: Path, *, at: int | None = None,
                adaptive: bool = False, group: str | None = None, simplest: bool = False,
                check_flags: Callable[[list[str]], None] | None = None) -> Exported:
    """Write ``output`` (flags, SGLang's --config format) and ``output.env`` (the
    environment, which SGLang's YAML cannot hold). Secrets are references, not values.
    ``at``: the winner at one concurrency level. ``adaptive``: the per-level winners as
    SGLang's adaptive mode (results/adaptive.py), the JSON written beside the YAML, once
    ``check_flags(flags)`` (the host's SGLang has them: remote/preflight.py) has passed.
    ``group``: the winner of that group's hardware; a study measured on several groups
    needs it (results are compared only within a group). ``simplest``: the simplest
    configuration tied with the winner within the noise (results/simplest.py) instead."""
    from sweeper.search.space import SearchSpace

    _check_output(output)
    study = load_existing(storage_url, spec.name, str(spec.path), spec.storage)
    trials = of_group(spec, study.get_trials(deepcopy=False), group)
    headline = Headline.of(study, spec.benchmark.aggregate, trials)
    space = SearchSpace(spec)
    json_path = None
    if adaptive:
        if at is not None or simplest:
            raise InputError(f"--adaptive and {'--at' if at is not None else '--simplest'}: "
                             "choose one")
        if not headline.per_level:
            raise InputError(f"{spec.path}: study {spec.name!r} has no configuration "
                             "measured at several concurrency levels yet; --adaptive needs "
                             "benchmark.concurrency: [1, 16] (say) and a sweep")
        missing = [c for c in headline.goal.levels if c not in headline.per_level]
        if missing:
            raise InputError(f"{spec.path}: nothing measured at concurrency {missing} yet; "
                             "run `sweeper optimize` first")
        p = adaptive_plan({c: r.effective for c, r in headline.per_level.items()},
                          str(spec.path))
        json_path = output.with_suffix(".adaptive.json")
        config = space.launch_config(p.effective)
        env = dict(config.env)
        if p.has_zero_step_slot:
            # a 0-step slot still runs the draft extend unless this is set: slower than
            # the no-speculation baseline it was measured as (eagle_worker_v2)
            env[SKIP_ZERO_STEP_ENV] = "1"
        config = LaunchConfig(config.launcher, {**config.args, "speculative-adaptive": True,
                                                "speculative-adaptive-config":
                                                    str(json_path.resolve())}, env)
        if check_flags is not None:
            check_flags(list(ADAPTIVE_FLAGS))  # before anything is written
        chosen = [f"Adaptive: steps by batch size {p.steps_by_level} (the winner per level; "
                  f"{json_path.name} beside this file)", *headline.level_lines()]
        if len(set(p.steps_by_level.values())) == 1:
            chosen.append("(the same steps won at every level: adaptive mode changes nothing "
                          "here; a plain export serves the same)")
    else:
        best, chosen = _chosen(spec, headline, at, simplest)
        first = next(t for t in trials if t.number == best.trials[0])
        config = space.baseline_config() if best.is_baseline else \
            space.launch_config(space.effective(first.params))
    build = Build.of(study.user_attrs.get(A.BUILD))
    exportable = for_build(config, build)
    config = exportable.config
    winner = headline.best if not adaptive and headline.best is not None else None
    if simplest and headline.simplest is not None:
        winner = headline.simplest.result
    if adaptive:
        winner = next(iter(headline.per_level.values()), None)
    # the GPU type the winner's host reported (its group); a confirm-phase trial may not
    # carry it, another measurement of the same configuration does
    numbers = set(winner.trials) if winner is not None else set()
    gpu = next((t.user_attrs[A.GROUP] for t in trials
                if t.number in numbers and t.user_attrs.get(A.GROUP)), None)
    if gpu is None and winner is not None:
        gpu = next((t.user_attrs[A.GROUP] for t in trials
                    if t.user_attrs.get(A.CONFIG_ID) == winner.config_id
                    and t.user_attrs.get(A.GROUP)), None)
    output.parent.mkdir(parents=True, exist_ok=True)
    if json_path is not None:
        # one slot per line: {"1": {"candidate_steps": [3]}, ...}
        json_path.write_text("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}"
                                                 for k, v in p.config.items()) + "\n}\n")
    header = "".join(f"# {line}\n" for line in
                     [f"sweeper export of study {spec.name!r}", *chosen,
                      measured_under(spec, build, gpu), *exportable.notes])
    if study.user_attrs.get(A.SIMULATED):
        header += "# measured on the SIMULATED SGLang server (a test double), not real hardware\n"
    secrets = config.secret_names()
    for flag in config.secret_flags():
        header += (f"# --{flag} is a secret, left out: the launch command passes it from "
                   f"${secret_variable(flag)}\n")
    try:
        plain_env = config.plain_env_file() if config.env else None
    except ValueError as exc:
        raise InputError(f"{spec.path}: {exc}") from None
    output.write_text(header + config.sglang_yaml(redact=True))
    env_path = shell_path = None
    if config.env or secrets:
        shell_path = output.with_suffix(".sh")
        shell_path.write_text(config.env_file(redact=True))
    if plain_env is not None:
        env_path = output.with_suffix(".env")
        env_path.write_text(plain_env)
    launcher = shlex.join(config.launcher_argv(spec.hosts[0].python or "python3"))
    cmd = " ".join(filter(None, [launcher, "--config", shlex.quote(str(output)),
                                 config.secret_argv()]))
    if shell_path is not None:
        cmd = f"(set -a; . {shlex.quote(str(shell_path))}; set +a; {cmd})"
    also = [str(p) for p in (env_path, shell_path, json_path) if p is not None]
    lines = [f"wrote {output}" + (f" and {' and '.join(also)}" if also else ""),
             *chosen,
             f"launch: {cmd}"]
    if json_path is not None:
        lines.append(f"copy {json_path.name} with the YAML: its speculative-adaptive-config "
                     f"points at {json_path.resolve()}")
    if env_path is not None:
        lines.append(f"{env_path.name}: for docker run --env-file or systemd "
                     f"EnvironmentFile=; {shell_path.name if shell_path else ''}: for a shell")
    if secrets:
        lines.append(f"secrets are not written: set {', '.join(secrets)} before launching "
                     f"(or write them into {shell_path})")
    return Exported(output, env_path, lines, shell_path)
