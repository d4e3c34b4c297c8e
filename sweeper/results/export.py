"""Export the best configuration as SGLang's launch YAML (+ an env file beside it).

Secrets are written as references, never as values (sweeper/launch.py): the env file reads
each one from the environment (``export HF_TOKEN="${HF_TOKEN:?...}"``), a secret flag is
left out of the YAML and the printed launch command passes it from its variable
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
from sweeper.results.adaptive import plan as adaptive_plan
from sweeper.results.headline import Headline
from sweeper.results.storage import load_existing

if TYPE_CHECKING:
    from sweeper.results.verdict import ConfigResult
    from sweeper.study import StudySpec


@dataclass
class Exported:
    yaml_path: Path
    env_path: Path | None
    lines: list[str] = field(default_factory=list)


def _chosen(spec: StudySpec, headline: Headline, at: int | None) -> tuple[ConfigResult,
                                                                         list[str]]:
    """The configuration to export and the lines that say why it was chosen."""
    goal = headline.goal
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


def export_best(spec: StudySpec, storage_url: str, output: Path, *, at: int | None = None,
                adaptive: bool = False,
                check_flags: Callable[[list[str]], None] | None = None) -> Exported:
    """Write ``output`` (flags, SGLang's --config format) and ``output.env`` (the
    environment, which SGLang's YAML cannot hold). Secrets are references, not values.
    ``at``: the winner at one concurrency level. ``adaptive``: the per-level winners as
    SGLang's adaptive mode (results/adaptive.py), the JSON written beside the YAML, once
    ``check_flags(flags)`` (the host's SGLang has them: remote/preflight.py) has passed."""
    from sweeper.search.space import SearchSpace

    study = load_existing(storage_url, spec.name, str(spec.path))
    trials = study.get_trials(deepcopy=False)
    headline = Headline.of(study, spec.benchmark.aggregate, trials)
    space = SearchSpace(spec)
    json_path = None
    if adaptive:
        if at is not None:
            raise InputError("--adaptive and --at: choose one")
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
        config = LaunchConfig(config.launcher, {**config.args, "speculative-adaptive": True,
                                                "speculative-adaptive-config":
                                                    str(json_path.resolve())}, config.env)
        if check_flags is not None:
            check_flags(list(ADAPTIVE_FLAGS))  # before anything is written
        chosen = [f"Adaptive: steps by batch size {p.steps_by_level} (the winner per level; "
                  f"{json_path.name} beside this file)", *headline.level_lines()]
        if len(set(p.steps_by_level.values())) == 1:
            chosen.append("(the same steps won at every level: adaptive mode changes nothing "
                          "here; a plain export serves the same)")
    else:
        best, chosen = _chosen(spec, headline, at)
        first = next(t for t in trials if t.number == best.trials[0])
        config = space.baseline_config() if best.is_baseline else \
            space.launch_config(space.effective(first.params))
    output.parent.mkdir(parents=True, exist_ok=True)
    if json_path is not None:
        # one slot per line: {"1": {"candidate_steps": [3]}, ...}
        json_path.write_text("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}"
                                                 for k, v in p.config.items()) + "\n}\n")
    header = "".join(f"# {line}\n" for line in
                     [f"sweeper export of study {spec.name!r}", *chosen])
    if study.user_attrs.get(A.SIMULATED):
        header += "# measured on the SIMULATED SGLang server (a test double), not real hardware\n"
    secrets = config.secret_names()
    for flag in config.secret_flags():
        header += (f"# --{flag} is a secret, left out: the launch command passes it from "
                   f"${secret_variable(flag)}\n")
    output.write_text(header + config.sglang_yaml(redact=True))
    env_path = None
    if config.env or secrets:
        env_path = output.with_suffix(".env")
        env_path.write_text(config.env_file(redact=True))
    launcher = shlex.join(config.launcher_argv(spec.hosts[0].python or "python3"))
    cmd = " ".join(filter(None, [launcher, "--config", shlex.quote(str(output)),
                                 config.secret_argv()]))
    if env_path is not None:
        cmd = f"(set -a; . {shlex.quote(str(env_path))}; set +a; {cmd})"
    also = [str(p) for p in (env_path, json_path) if p is not None]
    lines = [f"wrote {output}" + (f" and {' and '.join(also)}" if also else ""),
             *chosen,
             f"launch: {cmd}"]
    if json_path is not None:
        lines.append(f"copy {json_path.name} with the YAML: its speculative-adaptive-config "
                     f"points at {json_path.resolve()}")
    if secrets:
        lines.append(f"secrets are not written: set {', '.join(secrets)} before launching "
                     f"(or write them into {env_path})")
    return Exported(output, env_path, lines)
