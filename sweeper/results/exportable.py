"""What a host's SGLang build accepts in a ``--config`` file, applied to an exported launch.

SGLang's --config merger (0.5.23, utils/server_args_config_parser.py) refuses a key of a
deprecated action ("Unsupported config option 'disable_cuda_graph' with action
'DeprecatedStoreTrueAction'") and argparse refuses a flag the build lacks. The sweep's
preflight stored the host's --help flags and the deprecated ones with the study
(``sweeper:build``); an export writes only flags of that build, translates the two retired
0.5.23 spellings into their replacements (as SGLang itself would read them), and leaves
out what only the sweep needed (``port``, ``host``: where the sweep ran it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sweeper.launch import LaunchConfig

SWEEP_ONLY = ("port", "host")
# 0.5.23's deprecated flags, assumed when a study has no stored build (made before it)
DEPRECATED_0_5_23 = frozenset({"disable-cuda-graph", "enable-dp-attention"})


@dataclass(frozen=True)
class Build:
    """The host's SGLang as the preflight saw it; empty flags = unknown (no filtering)."""

    version: str | None = None
    flags: frozenset[str] = frozenset()
    deprecated: frozenset[str] = DEPRECATED_0_5_23

    @classmethod
    def of(cls, attrs: Mapping[str, Any] | None) -> Build:
        if not attrs:
            return cls()
        return cls(version=attrs.get("sglang_version"),
                   flags=frozenset(attrs.get("help_flags") or ()),
                   deprecated=frozenset(attrs.get("deprecated_flags") or ()))

    def has(self, flag: str) -> bool:
        return not self.flags or flag in self.flags


@dataclass
class Exportable:
    config: LaunchConfig
    notes: list[str] = field(default_factory=list)  # what changed, for the header


def for_build(config: LaunchConfig, build: Build) -> Exportable:
    """``config`` as this build's --config file takes it (see the module docstring)."""
    args = {k: v for k, v in config.args.items() if k not in SWEEP_ONLY}
    notes: list[str] = []
    if args.get("disable-cuda-graph") and "disable-cuda-graph" in build.deprecated \
            and build.has("cuda-graph-backend-decode"):
        del args["disable-cuda-graph"]
        args["cuda-graph-backend-decode"] = "disabled"
        if build.has("cuda-graph-backend-prefill"):
            args["cuda-graph-backend-prefill"] = "disabled"
        notes.append("disable-cuda-graph (deprecated) written as cuda-graph-backend-*: disabled")
    if args.get("enable-dp-attention") and "enable-dp-attention" in build.deprecated \
            and build.has("attn-dp-size"):
        # parallel_hook.handle_deprecated_dp_attention: the same layout
        del args["enable-dp-attention"]
        dp = args.pop("dp-size", 1)
        if not args.get("attn-dp-size") or args.get("attn-dp-size") == 1:
            args["attn-dp-size"] = dp
        notes.append("enable-dp-attention + dp-size (deprecated) written as attn-dp-size")
    for name in list(args):
        if f"no-{name}" in build.flags and args[name] is not None:
            # a BooleanOptional flag (--x / --no-x): the merger refuses its key
            value = args.pop(name)
            flag = name if value else f"no-{name}"
            notes.append(f"{name} left out: this build's --config refuses it; pass --{flag} "
                         "on the command line")
        elif name in build.deprecated and args[name] not in (None, False):
            del args[name]
            notes.append(f"{name} left out: deprecated in this build, its --config refuses it")
        elif not build.has(name):
            del args[name]
            notes.append(f"{name} left out: this build's --help has no --{name}")
    return Exportable(LaunchConfig(config.launcher, args, dict(config.env)), notes)
