"""LaunchConfig: one SGLang server configuration, built once and read by everything.

A LaunchConfig holds the launcher template, SGLang's flags (dashed names, as SGLang
spells them) and the server's environment. It renders to an argv list (never a shell
string: values are data), to a display command line, and to the YAML that
``python -m sglang.launch_server --config FILE`` loads, with an env file beside it.

Secrets (``is_secret`` env names, ``is_secret_flag`` flags, and the names a study marks in
``server.secrets``) reach the server through argv and the environment only. Everything
shown or written holds a *reference* instead of the value, so that what is copied from it
still starts a working server: the environment variable itself (``HF_TOKEN``), and for a
flag a variable named after it (``--api-key "$SGLANG_API_KEY"``, ``secret_variable``).
SGLang's ``--config`` YAML cannot expand variables, so a secret flag is left out of it and
passed on the command line.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Collection, Mapping
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


# Names a study file marks secret (``server.secrets``) beside the name rule: a token in
# HUGGING_FACE_HUB_AUTH matches no pattern. Kept here, read by every check of the rule, so
# a marked name is scrubbed, redacted and referenced everywhere a matching one is.
_MARKED: set[str] = set()


def mark_secret(names: list[str] | tuple[str, ...] | set[str]) -> None:
    """Treat ``names`` (environment variables or flags) as secrets in this process."""
    _MARKED.update(names)


def is_secret(name: str) -> bool:
    """Environment variable names that must never be shown or stored in clear."""
    return name in _MARKED or bool(_SECRET_ENV.search(name))


def is_secret_flag(name: str) -> bool:
    """SGLang flags whose values must never be shown or stored in clear."""
    return name in _MARKED or bool(_SECRET_FLAG.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret(k) else v) for k, v in env.items()}


def secret_variable(flag: str) -> str:
    """The environment variable an exported launch reads a secret flag from:
    ``api-key`` -> ``SGLANG_API_KEY``."""
    return "SGLANG_" + re.sub(r"[^A-Za-z0-9]", "_", flag).upper()


def _is_set(value: object) -> bool:
    """A flag value that is a value (not a presence flag, not absent)."""
    return value not in (None, True, False, "")


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
        port = self.args.get("port", 30000)  # SGLang's default port
        if isinstance(port, list):  # a flag given twice: SGLang's parser keeps the last
            port = port[-1]
        return int(str(port))

    @property
    def bind_host(self) -> str:
        return str(self.args.get("host", "127.0.0.1"))

    @property
    def api_key(self) -> str | None:
        """The key SGLang's ``--api-key`` makes clients send (``Authorization: Bearer``)."""
        key = self.args.get("api-key")
        return str(key) if _is_set(key) else None

    def secret_flags(self) -> list[str]:
        """Secret flags that carry a value (``api-key``), in argument order."""
        return [k for k, v in self.args.items() if is_secret_flag(k) and _is_set(v)]

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
        vals += [render_value(x) for k in self.secret_flags() for v in [self.args[k]]
                 for x in (v if isinstance(v, list) else [v])]
        return sorted(set(vals), key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` (a server log, an error message) with every secret value replaced."""
        for value in self.secret_values():
            text = text.replace(value, REDACTED)
        return text

    def redacted(self) -> LaunchConfig:
        """The same configuration with secret values (env and flags such as --api-key)
        replaced, for everything that is shown or stored."""
        args = {k: (REDACTED if k in self.secret_flags() else v) for k, v in self.args.items()}
        return LaunchConfig(self.launcher, args, redact_env(self.env))

    def command_line(self, python: str = "python3", redact: bool = True) -> str:
        """A copy-pasteable shell line (env prefix + command), every value quoted once.
        Redacted, a secret is a reference to the environment (``HF_TOKEN="$HF_TOKEN"``,
        ``--api-key "$SGLANG_API_KEY"``): the line still starts the same server."""
        prefix = [f'{k}="${k}"' if redact and is_secret(k) else f"{k}={shlex.quote(v)}"
                  for k, v in sorted(self.env.items())]
        words = [shlex.quote(w) for w in self.launcher_argv(python)]
        for name, value in self.args.items():
            tokens = _flag_tokens(name, value)
            if redact and name in self.secret_flags():
                words += [tokens[0], f'"${secret_variable(name)}"']
            else:
                words += [shlex.quote(t) for t in tokens]
        return " ".join([*prefix, *words])

    def identity(self) -> str:
        """Canonical key: two trials with equal identity ran the same configuration
        (replicates). Port and host are where it runs, not what it is."""
        args = {k: v for k, v in self.args.items() if k not in ("port", "host")}
        return json.dumps({"args": args, "env": self.env}, sort_keys=True, default=str)

    def config_id(self) -> str:
        """A short hash of identity(): names the configuration without exposing its
        values (the environment may hold secrets)."""
        return hashlib.sha256(self.identity().encode()).hexdigest()[:12]

    def sglang_yaml(self, redact: bool = True, exclude: Collection[str] = ()) -> str:
        """YAML for ``sglang.launch_server --config``: dashed keys, presence flags as
        ``true``, false flags omitted, lists for multi-value flags, no nested maps.
        Redacted, secret flags are left out: the YAML cannot refer to a variable, so
        ``secret_argv`` passes them on the command line. ``exclude``: flags left out."""
        data: dict[str, Any] = {}
        secret = set(self.secret_flags()) if redact else set()
        for name, value in self.args.items():
            if value is None or value is False or name in secret or name in exclude:
                continue
            data[name] = value
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)

    def secret_argv(self) -> str:
        """The secret flags as shell words that read their variables
        (``--api-key "$SGLANG_API_KEY"``), for the command beside ``sglang_yaml()``."""
        return " ".join(f'--{k} "${secret_variable(k)}"' for k in self.secret_flags())

    def secret_names(self) -> list[str]:
        """Every variable an exported launch needs the user to set: the secret env vars
        and the variables of the secret flags."""
        return sorted({*(k for k in self.env if is_secret(k)),
                       *(secret_variable(k) for k in self.secret_flags())})

    def env_file(self, redact: bool = True) -> str:
        """The environment SGLang's YAML cannot hold, as a sourceable file. Redacted, a
        secret is never written: its line reads it from the environment and stops the
        launch with a message when it is unset (write the value there, or export it)."""
        lines = []
        if redact and self.secret_names():
            lines.append("# Secrets are not written by sweeper: export them before launching, "
                         "or write each value in place of its ${...}.")
            for name in self.secret_names():
                flag = next((f"the server's --{k}" for k in self.secret_flags()
                             if secret_variable(k) == name), "a secret")
                lines.append(f'export {name}="${{{name}:?set {name} ({flag})}}"')
        lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(self.env.items())
                  if not (redact and is_secret(k))]
        return "\n".join(lines) + ("\n" if lines else "")

    def plain_env_file(self) -> str:
        """The environment as plain ``NAME=value`` lines, which ``docker --env-file`` and
        systemd's ``EnvironmentFile=`` both read (no ``export``, no quoting: docker takes
        the rest of the line literally). A secret is a bare ``NAME`` line: docker then
        passes the caller's value; systemd skips the line (set it with PassEnvironment= or
        a drop-in). Its value is never written."""
        lines = ["# Environment of the exported server: docker run --env-file FILE, or "
                 "systemd EnvironmentFile=FILE."]
        for k, v in sorted(self.env.items()):
            if is_secret(k):
                lines.append(f"# {k}: a secret, not written: docker passes it from your "
                             "environment; systemd: PassEnvironment= or a drop-in")
                lines.append(k)
            elif "\n" in v or v != v.strip() or any(c in v for c in "\"'\\$"):
                raise ValueError(f"environment variable {k}: its value {v!r} reads differently "
                                 "in docker's and systemd's env files; set it by hand")
            else:
                lines.append(f"{k}={v}")
        return "\n".join(lines) + "\n"

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
