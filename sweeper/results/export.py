"""Export the best configuration as SGLang's launch YAML (+ an env file beside it).

Secrets are written as references, never as values (sweeper/launch.py): the env file reads
each one from the environment (``export HF_TOKEN="${HF_TOKEN:?...}"``), a secret flag is
left out of the YAML and the printed launch command passes it from its variable
(``--api-key "$SGLANG_API_KEY"``). One line of the output says which variables to set.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sweeper.errors import InputError
from sweeper.launch import secret_variable
from sweeper.results import attrs as A
from sweeper.results.headline import Headline
from sweeper.results.storage import load_existing

if TYPE_CHECKING:
    from sweeper.study import StudySpec


@dataclass
class Exported:
    yaml_path: Path
    env_path: Path | None
    lines: list[str] = field(default_factory=list)


def export_best(spec: StudySpec, storage_url: str, output: Path) -> Exported:
    """Write ``output`` (flags, SGLang's --config format) and ``output.env`` (the
    environment, which SGLang's YAML cannot hold). Secrets are references, not values."""
    from sweeper.search.space import SearchSpace

    study = load_existing(storage_url, spec.name, str(spec.path))
    trials = study.get_trials(deepcopy=False)
    headline = Headline.of(study, spec.benchmark.objective, trials)
    best = headline.best
    if best is None:
        raise InputError(f"{spec.path}: study {spec.name!r} has no measured configuration "
                         "yet; run `sweeper optimize` first")
    space = SearchSpace(spec)
    first = next(t for t in trials if t.number == best.trials[0])
    config = space.baseline_config() if best.is_baseline else \
        space.launch_config(space.effective(first.params))
    output.parent.mkdir(parents=True, exist_ok=True)
    header = "".join(f"# {line}\n" for line in
                     [f"sweeper export of study {spec.name!r}", *headline.lines()])
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
    lines = [f"wrote {output}" + (f" and {env_path}" if env_path else ""),
             *headline.lines(),
             f"launch: {cmd}"]
    if secrets:
        lines.append(f"secrets are not written: set {', '.join(secrets)} before launching "
                     f"(or write them into {env_path})")
    return Exported(output, env_path, lines)
