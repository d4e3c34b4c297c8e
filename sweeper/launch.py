"""LaunchConfig: one SGLang server configuration, built once and read by everything.

A LaunchConfig holds the launcher template, SGLang's flags (dashed names, as SGLang
spells them) and the server's environment. It renders to an argv list (never a shell
string: values are data), to a display command line with secrets redacted, and to the
YAML that ``python -m sglang.launch_server --config FILE`` loads.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

Scalar = str | int | float | bool
ArgValue = Scalar | list[Scalar]

# SGLang's speculative flags: the baseline trial drops every one of them.
SPECULATIVE_PREFIX = "speculative-"

_SECRET_ENV = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.IGNORECASE)
# Flags are matched by whole dashed words: --api-key and --hf-token are secrets,
# --speculative-num-draft-tokens and --max-total-tokens are not.
_SECRET_FLAG = re.compile(r"(^|-)(key|token|secret|password|passwd)(-|$)", re.IGNORECASE)
REDACTED = "***"


def is_secret(name: str) -> bool:
    """Environment variable names that must never be shown or stored in clear."""
    return bool(_SECRET_ENV.search(name))


def is_secret_flag(name: str) -> bool:
    """SGLang flags whose values must never be shown or stored in clear."""
    return bool(_SECRET_FLAG.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret(k) else v) for k, v in env.items()}


def _flag_tokens(name: str, value: ArgValue) -> list[str]:
    """One flag as argv tokens, following SGLang's --config rules: True -> presence,
    False/None -> absent, list -> several values."""
    if value is None or value is False:
        return []
    if value is True:
        return [f"--{name}"]
    if isinstance(value, list):
        return [f"--{name}", *(render_value(v) for v in value)]
    return [f"--{name}", render_value(value)]


def render_value(value: object) -> str:
    """How a value reaches the server: floats keep a dot (2.0 -> "2.0", never "2"), so
    the same number always renders the same; everything else is str()."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


@dataclass(frozen=True)
class LaunchConfig:
    """A server configuration. ``args`` keys are SGLang flag names without ``--``."""

    launcher: str = "{python} -m sglang.launch_server"
    args: dict[str, ArgValue] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    # --- accessors ---------------------------------------------------------
    @property
    def port(self) -> int:
        return int(self.args.get("port", 30000))  # SGLang's default port

    @property
    def bind_host(self) -> str:
        return str(self.args.get("host", "127.0.0.1"))

    @property
    def speculative(self) -> bool:
        return any(k.startswith(SPECULATIVE_PREFIX) for k in self.args)

    def without_speculation(self) -> LaunchConfig:
        """The same server with every speculative flag removed (the baseline)."""
        args = {k: v for k, v in self.args.items() if not k.startswith(SPECULATIVE_PREFIX)}
        return LaunchConfig(self.launcher, args, dict(self.env))

    # --- renderings ------------------------------------------------------------
    def launcher_argv(self, python: str = "python3") -> list[str]:
        # Split the template first, then substitute: a python path with spaces stays one token.
        return [tok.replace("{python}", python) for tok in shlex.split(self.launcher)]

    def flag_argv(self) -> list[str]:
        out: list[str] = []
        for name, value in self.args.items():
            out.extend(_flag_tokens(name, value))
        return out

    def argv(self, python: str = "python3") -> list[str]:
        return self.launcher_argv(python) + self.flag_argv()

    def secret_values(self) -> list[str]:
        """The values that must never be shown: of secret-named env vars and flags."""
        vals = [v for k, v in self.env.items() if is_secret(k) and v]
        vals += [str(v) for k, v in self.args.items()
                 if is_secret_flag(k) and v not in (None, True, False, "")]
        return sorted(set(vals), key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` (a server log, an error message) with every secret value replaced."""
        for value in self.secret_values():
            text = text.replace(value, REDACTED)
        return text

    def redacted(self) -> LaunchConfig:
        """The same configuration with secret values (env and flags such as --api-key)
        replaced, for everything that is shown or stored."""
        args = {k: (REDACTED if is_secret_flag(k) and v not in (None, True, False) else v)
                for k, v in self.args.items()}
        return LaunchConfig(self.launcher, args, redact_env(self.env))

    def command_line(self, python: str = "python3", redact: bool = True) -> str:
        """A copy-pasteable shell line (env prefix + command), every value quoted once."""
        cfg = self.redacted() if redact else self
        prefix = [f"{k}={shlex.quote(v)}" for k, v in sorted(cfg.env.items())]
        return " ".join([*prefix, shlex.join(cfg.argv(python))])

    def identity(self) -> str:
        """Canonical key: two trials with equal identity ran the same configuration
        (replicates). Port and host are where it runs, not what it is."""
        args = {k: v for k, v in self.args.items() if k not in ("port", "host")}
        return json.dumps({"args": args, "env": self.env}, sort_keys=True, default=str)

    def config_id(self) -> str:
        """A short hash of identity(): names the configuration without exposing its
        values (the environment may hold secrets)."""
        return hashlib.sha256(self.identity().encode()).hexdigest()[:12]

    def sglang_yaml(self, redact: bool = True) -> str:
        """YAML for ``sglang.launch_server --config``: dashed keys, presence flags as
        ``true``, false flags omitted, lists for multi-value flags, no nested maps."""
        data: dict[str, Any] = {}
        for name, value in (self.redacted() if redact else self).args.items():
            if value is None or value is False:
                continue
            data[name] = value
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)

    def env_file(self, redact: bool = True) -> str:
        """The environment SGLang's YAML cannot hold, as a sourceable file."""
        env = redact_env(self.env) if redact else self.env
        lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
        return "\n".join(lines) + ("\n" if lines else "")

    def to_dict(self, redact: bool = True) -> dict[str, Any]:
        cfg = self.redacted() if redact else self
        return {"launcher": cfg.launcher, "args": dict(cfg.args), "env": dict(cfg.env)}

    @classmethod
    def from_sglang_yaml(cls, text: str, launcher: str = "{python} -m sglang.launch_server",
                         env: Mapping[str, str] | None = None) -> LaunchConfig:
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise ValueError("an SGLang --config YAML must be a mapping of flag: value")
        return cls(launcher=launcher, args=dict(data), env=dict(env or {}))
