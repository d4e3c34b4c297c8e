"""Study file -> validated StudySpec.

A study file is YAML (see studies/demo.yaml). Loading it is two passes: structure and
types (sections.py, pydantic), then meaning (load.py, values.py, params.py, rules.py:
flag and env names, parameter ranges, SGLang's speculative rules, the start_from
entries), each error one line naming the file and the key. Values are data: nothing from
the file is evaluated, and strings stay strings.
"""

from sweeper.study.base import (
    ALGORITHM,
    DRAFT,
    ENV_PREFIX,
    RESERVED_FLAGS,
    SPECULATIVE_PREFIX,
    STEPS,
    TOPK,
    TRIPLE,
    UNSET,
    Scalar,
    parse_duration,
    render_value,
)
from sweeper.study.load import available_studies, load_study, parse_study, resolve_study_path
from sweeper.study.objective import Objective
from sweeper.study.rules import ParamSpec, SpeculativeRules
from sweeper.study.sections import OBJECTIVES, BenchSpec, HostSpec, ServerSpec, SweepSpec
from sweeper.study.spec import StudySpec, placeholder_message

__all__ = ["ALGORITHM", "DRAFT", "ENV_PREFIX", "OBJECTIVES", "Objective", "RESERVED_FLAGS",
           "SPECULATIVE_PREFIX", "STEPS", "TOPK", "TRIPLE", "UNSET", "BenchSpec", "HostSpec",
           "ParamSpec", "Scalar", "ServerSpec", "SpeculativeRules", "StudySpec", "SweepSpec",
           "available_studies", "load_study", "parse_duration", "parse_study",
           "placeholder_message", "render_value", "resolve_study_path"]
