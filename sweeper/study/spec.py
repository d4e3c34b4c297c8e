"""A validated study (``StudySpec``), what every other part of sweeper reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper.study.base import ENV_PREFIX
from sweeper.study.objective import Objective
from sweeper.study.rules import ParamSpec, SpeculativeRules, check_config
from sweeper.study.sections import BenchSpec, HostSpec, ServerSpec, SweepSpec


@dataclass(frozen=True)
class StudySpec:
    """A validated study. Build it with ``load_study`` (or ``parse_study``)."""

    name: str
    path: Path
    storage: str
    hosts: list[HostSpec]
    server: ServerSpec
    baseline: bool
    space: dict[str, ParamSpec]
    start_from: list[dict[str, Any]]
    benchmark: BenchSpec
    sweep: SweepSpec
    rules: SpeculativeRules = field(repr=False, default=SpeculativeRules(None, None, None))
    objective: Objective = field(default=Objective("at", (1,), at=1))
    artifacts: str | None = None  # an absolute folder or s3://bucket/prefix (load.py)

    def fixed(self, name: str) -> Any:
        """A parameter's fixed value: server.args for flags, server.env for env.X."""
        if name.startswith(ENV_PREFIX):
            return self.server.env.get(name[len(ENV_PREFIX):])
        return self.server.args.get(name)

    def placeholder_error(self) -> str | None:
        """The message ``optimize`` gives when a host is still a placeholder, else None."""
        for i, host in enumerate(self.hosts):
            if host.is_placeholder:
                return placeholder_message(self, i)
        return None

    def check_config(self, params: Mapping[str, Any], key: str = "start_from") -> dict[str, Any]:
        """Check a user-facing configuration (a start_from entry) against the space and
        SGLang's rules. Returns it completed with the derived draft tokens (topk == 1).
        Parameters of the space it omits are left to the sampler. StudyError otherwise."""
        return check_config(self, dict(params), key)



def placeholder_message(target: HostSpec | StudySpec, index: int = 0,
                        study_path: Path | str = "studies/eagle3-kimi.yaml") -> str:
    """What ``optimize`` says when a study still names the placeholder host.
    ``target`` is the study (its path and hosts[index]) or the host itself."""
    if isinstance(target, StudySpec):
        study_path = target.path
    return (f"{study_path}: hosts[{index}].ssh is a placeholder: set it to "
            "your GPU node's ~/.ssh/config alias or user@host")

