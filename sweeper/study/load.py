"""Study file -> validated StudySpec.

A study file is YAML (see studies/demo.yaml). Loading it is two passes:

1. structure and types, by pydantic models with ``extra="forbid"`` and strict types
   (a string where a number belongs is an error, not a silent coercion), except the
   numbers PyYAML leaves as strings: YAML 1.1 reads ``1e-3`` as the string '1e-3', so
   float fields accept numeric strings on purpose;
2. meaning: flag and env names, parameter ranges, SGLang's speculative rules, the
   start_from entries. These checks run by hand so each error names its exact key.

Every problem is a StudyError with one line:
``<file>: <key path>: <what is wrong>; <what to do>``.

Which configurations are valid lives in rules.py; the sections' types in sections.py.
Values are data: nothing from the file is evaluated, and strings stay strings.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml
from pydantic import BaseModel, ValidationError

from sweeper.errors import InputError
from sweeper.launch import is_secret, is_secret_flag, mark_secret
from sweeper.remote.host import WILDCARDS
from sweeper.remote.target import parse_target
from sweeper.study.base import ENV_PREFIX, fail, shorten, show, suggest
from sweeper.study.container import ContainerSpec
from sweeper.study.flagtypes import check_flag_values
from sweeper.study.limits import MAX_COMMAND, parse_yaml, read_study_text
from sweeper.study.objective import parse_levels, parse_objective
from sweeper.study.params import env_value, parse_param
from sweeper.study.rules import ParamSpec, check_config, check_rules
from sweeper.study.sections import (
    BenchSpec,
    HostSpec,
    ServerSpec,
    StudyFile,
    SweepSpec,
    validating_study,
)
from sweeper.study.slurm import SlurmSpec
from sweeper.study.spec import StudySpec
from sweeper.study.values import (
    check_arg_value,
    check_artifacts,
    check_env_name,
    check_flag_name,
    check_path,
    check_program,
    check_storage,
    http_url,
    is_address,
)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _section_keys(loc: Sequence[int | str]) -> list[str]:
    """Valid keys at the mapping that holds ``loc[-1]`` (for did-you-mean)."""
    parent = [p for p in loc[:-1] if not isinstance(p, int)]
    models: dict[tuple[str, ...], type[BaseModel]] = {
        (): StudyFile, ("hosts",): HostSpec, ("server",): ServerSpec,
        ("benchmark",): BenchSpec, ("sweep",): SweepSpec,
        ("hosts", "container"): ContainerSpec, ("hosts", "slurm"): SlurmSpec,
    }
    model = models.get(tuple(parent))
    return list(model.model_fields) if model else []




def _pydantic_error(path: Path, exc: ValidationError) -> NoReturn:
    err = exc.errors(include_url=False)[0]
    loc = list(err["loc"])
    kind, msg, given = err["type"], err["msg"], err.get("input")
    key = _loc(loc)
    if kind == "extra_forbidden":
        fail(path, key, f"unknown key {show(loc[-1])}",
             suggest(str(loc[-1]), _section_keys(loc)))
    if kind == "missing":
        fail(path, key, "missing", "add it")
    if kind == "value_error":  # parse_duration's own message
        fail(path, key, msg.removeprefix("Value error, "), "fix the value")
    if kind == "literal_error":
        fail(path, key, f"{show(given, key)} is not allowed", msg.lower())
    if kind == "too_short" and loc == ["hosts"]:
        fail(path, key, "no hosts", "add at least one, e.g. `- ssh: local`")
    what = f"{msg[0].lower()}{msg[1:]}, got {show(given, key)}"
    if isinstance(given, str) and kind.startswith(("int_", "float_", "bool_")):
        what += " (a string)"
    fail(path, key, what, _TYPE_HINTS.get(kind.split("_")[0], "fix the value"))


_TYPE_HINTS = {
    "int": "write a whole number, without quotes",
    "float": "write a number, without quotes",
    "bool": "write true or false",
    "string": "write a string (quote it)",
    "list": "write a YAML list (- item)",
    "dict": "write a mapping (key: value)",
}


# --------------------------------------------------------------------------- loading
def available_studies(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted({p.stem for p in root.iterdir() if p.suffix in (".yaml", ".yml")})


def resolve_study_path(name_or_path: str, root: Path = Path("studies")) -> Path:
    """A NAME finds root/NAME.yaml (or .yml); anything with a suffix or a '/' is a path."""
    candidate = Path(name_or_path).expanduser()
    looks_like_path = "/" in name_or_path or candidate.suffix in (".yaml", ".yml")
    if looks_like_path or candidate.is_file():
        if not candidate.is_file():
            found = available_studies(candidate.parent)
            fail(candidate, "", "no such study file",
                  f"studies in {candidate.parent}: {', '.join(found)}" if found
                  else "check the path")
        return candidate
    for ext in (".yaml", ".yml"):
        p = root / f"{name_or_path}{ext}"
        if p.is_file():
            return p
    found = available_studies(root)
    hint = f"available in {root}/: {', '.join(found)}" if found else f"no study files in {root}/"
    close = difflib.get_close_matches(name_or_path, found, n=1)
    if close:
        hint = f"did you mean {close[0]!r}? " + hint
    fail(root / f"{name_or_path}.yaml", "", f"unknown study {show(name_or_path)}", hint)


def load_study(name_or_path: str, root: Path = Path("studies")) -> StudySpec:
    """Load and validate a study: ``eagle3-kimi`` finds studies/eagle3-kimi.yaml."""
    path = resolve_study_path(name_or_path, root)
    text = read_study_text(path)  # refused before reading when too large
    try:
        data = parse_yaml(text, path)  # within limits: no bomb is ever expanded
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        if context and "duplicate anchor" in context:  # the problem is "second occurrence"
            problem = f"{context.split(';')[0]} (its second occurrence)"
        fail(path, "", f"malformed YAML at {where}{shorten(problem)}",
              "fix the YAML syntax (indentation, colons, quotes)")
    return parse_study(data, path)


def parse_study(data: Any, path: Path) -> StudySpec:
    """Validate already-parsed YAML data as the study file at ``path``."""
    if data is None:
        fail(path, "", "the file is empty", "write a study (see studies/demo.yaml)")
    if not isinstance(data, dict):
        fail(path, "", f"expected a mapping of keys at the top level, got a "
                        f"{type(data).__name__}", "see studies/demo.yaml for the shape")
    for k in data:
        if not isinstance(k, str):
            fail(path, str(k), "keys must be strings", "quote the key")
    try:
        with validating_study():
            raw = StudyFile.model_validate(data)
    except ValidationError as exc:
        _pydantic_error(path, exc)
    return _build(raw, path)


def _default_storage(path: Path, name: str) -> str:
    """``sqlite:///`` + <dir of study file>/<name>.db: relative to the working directory
    when the file lives under it (SQLAlchemy reads relative paths from there), else
    absolute."""
    db = (path.parent / f"{name}.db").absolute()
    with contextlib.suppress(ValueError):  # not under the CWD: stay absolute
        db = db.relative_to(Path.cwd())
    return f"sqlite:///{db}"


def _command_chars(path: Path, hosts: list[HostSpec], server: ServerSpec,
                   space: dict[str, ParamSpec]) -> None:
    """Refuse a study whose longest server command line would exceed MAX_COMMAND,
    naming the value that contributes most."""
    python = max((len(h.python or "") for h in hosts), default=0)
    parts = [("server.launcher", len(server.launcher) + python * server.launcher.count("{python}"))]
    for flag, value in server.args.items():
        values = value if isinstance(value, list) else [value]
        parts.append((f"server.args.{flag}", len(flag) + 3 + sum(len(str(v)) + 1
                                                                 for v in values)))
    parts += [(f"server.env.{k}", len(k) + len(v) + 2) for k, v in server.env.items()]
    for name, p in space.items():
        widest = max((len(str(c)) for c in p.choices), default=0) if p.choices else 32
        parts.append((f"space.{name}", len(name) + 3 + widest))
    total = sum(n for _, n in parts)
    if total > MAX_COMMAND:
        key, n = max(parts, key=lambda kv: kv[1])
        fail(path, key, f"the server's command line would be {total:,} characters, more than "
             f"the {MAX_COMMAND:,} a command may have (Linux passes at most 128 KiB in one "
             f"argument; over SSH the whole command is one); this value adds {n:,}",
             "shorten it")


def _build(raw: StudyFile, path: Path) -> StudySpec:
    name = raw.name if raw.name is not None else path.stem
    if not _NAME_RE.match(name):
        origin = "" if raw.name is not None else " (taken from the file name)"
        fail(path, "name", f"{show(name)} is not a usable study name{origin}",
              "use letters, digits, '.', '_' and '-'")
    storage = check_storage(path, raw.storage) if raw.storage is not None \
        else _default_storage(path, name)
    artifacts = check_artifacts(path, raw.artifacts) if raw.artifacts is not None else None

    hosts: list[HostSpec] = []
    seen_hosts: set[str] = set()
    for i, h in enumerate(raw.hosts):
        key = f"hosts[{i}].ssh"
        if not h.is_local:
            try:
                parse_target(h.ssh)
            except InputError as exc:
                fail(path, key, str(exc).removeprefix("ssh target "),
                     "write local, an ~/.ssh/config alias, or user@host[:port]")
        where = f"{h.ssh}:{h.port or raw.server.port}"  # two servers on one port collide
        if where in seen_hosts:
            fail(path, key, f"host {show(h.ssh)} is listed twice on port "
                 f"{h.port or raw.server.port}", "list each host once, or give each entry "
                 "its own port (hosts[i].port)")
        seen_hosts.add(where)
        # in a container, the image's python; on this machine, the sweeper's own
        python = h.python if h.python is not None else (
            sys.executable if h.is_local and h.container is None else "python3")
        if not python.strip():
            fail(path, f"hosts[{i}].python", "empty", "give the python that runs SGLang")
        check_program(path, f"hosts[{i}].python", python)
        if h.slurm is not None and h.container is not None:
            fail(path, f"hosts[{i}].slurm", "a host runs its server in a container or as a "
                 "Slurm job step, not both", f"remove hosts[{i}].container or hosts[{i}].slurm")
        if h.slurm is not None and raw.server.host not in WILDCARDS:
            fail(path, "server.host", f"{show(raw.server.host)}: the server runs on a Slurm "
                 "compute node, which the login node reaches by its address",
                 "set server.host: 0.0.0.0")
        if h.url is not None and not http_url(h.url):
            fail(path, f"hosts[{i}].url", f"{show(h.url)} is not an http(s) URL of a host "
                 "name or address and a port from 1 to 65535",
                 "write e.g. http://gpu-node-1:8000 or remove it")
        if h.workdir is not None:
            check_path(path, f"hosts[{i}].workdir", h.workdir)
        hosts.append(h.model_copy(update={"workdir": h.workdir or f"~/.sweeper/{name}",
                                          "python": python}))

    server = raw.server
    if not server.launcher.strip():
        fail(path, "server.launcher", "empty launcher",
              "write e.g. \"{python} -m sglang.launch_server\"")
    check_program(path, "server.launcher", server.launcher)
    if not server.host.strip():
        fail(path, "server.host", "empty bind address", "use 127.0.0.1 or 0.0.0.0")
    if not is_address(server.host):
        fail(path, "server.host", f"{show(server.host)} is neither an IP address nor a host "
             "name", "use 127.0.0.1, 0.0.0.0 or the name of one of the node's interfaces")
    for i, marked in enumerate(server.secrets):
        if marked not in server.env and marked not in server.args:
            fail(path, f"server.secrets[{i}]", f"{show(marked)} is neither in server.env nor "
                 "in server.args", "list the name of a variable or flag the study sets")
    mark_secret(server.secrets)  # before anything is shown: hidden in errors from here on
    secret_flags = [k for k, v in server.args.items()
                    if is_secret_flag(k) and v not in (None, True, False, "")]
    if "config" in server.args and secret_flags:
        # SGLang takes one --config; sweeper's own carries the secret flags off the command
        # line (remote/secretflags.py)
        fail(path, "server.args.config", f"cannot be combined with the secret flag "
             f"{secret_flags[0]}: sweeper passes secret flags through its own --config",
             "write the file's flags in server.args instead")
    for flag, value in server.args.items():
        check_flag_name(path, f"server.args.{flag}", flag)
        check_arg_value(path, f"server.args.{flag}", value)
    env: dict[str, str] = {}
    for var, value in server.env.items():
        check_env_name(path, f"server.env.{var}", var)
        env[var] = env_value(path, f"server.env.{var}", value)
    server = server.model_copy(update={"env": env})

    space: dict[str, ParamSpec] = {}
    for pname, praw in raw.space.items():
        key = f"space.{pname}"
        secret = is_secret(pname[len(ENV_PREFIX):]) if pname.startswith(ENV_PREFIX) \
            else is_secret_flag(pname)
        if secret:
            fail(path, key, "a secret cannot be searched: the study's storage keeps every "
                 "searched value in clear", "set it once in server.env or server.args")
        if pname.startswith(ENV_PREFIX):
            var = pname[len(ENV_PREFIX):]
            check_env_name(path, key, var)
            if var in env:
                fail(path, key, f"{var} is both fixed in server.env and searched",
                      "remove it from server.env or from space")
        else:
            check_flag_name(path, key, pname)
            if pname in server.args:
                fail(path, key, f"{pname} is both fixed in server.args and searched",
                      "remove it from server.args or from space")
        space[pname] = parse_param(path, pname, praw)
    if not space:
        fail(path, "space", "the search space is empty",
              "add at least one parameter, e.g. speculative-num-steps: {int: [1, 6]}")

    _command_chars(path, hosts, server, space)
    rules = check_rules(path, space, server.args)  # its messages first: they say more
    check_flag_values(path, space, server.args)
    levels = parse_levels(path, raw.benchmark.concurrency)
    objective = parse_objective(path, raw.objective, levels)
    if objective.multi and raw.sweep.sampler == "model":
        fail(path, "sweep.sampler", "the model sampler predicts one objective; pareto has two",
             "use tpe or random with pareto")
    if objective.multi and raw.sweep.confirm_top:
        fail(path, "sweep.confirm_top", "pareto has a front, not one winner to confirm",
             "set it to 0, or use objective {at: LEVEL} or {mix: ...}")
    spec = StudySpec(name=name, path=path, storage=storage, hosts=hosts, server=server,
                     baseline=raw.baseline, space=space, start_from=[],
                     benchmark=raw.benchmark, sweep=raw.sweep, rules=rules,
                     objective=objective, artifacts=artifacts)
    start_from = [check_config(spec, entry, f"start_from[{i}]")
                  for i, entry in enumerate(raw.start_from)]
    return StudySpec(**{**spec.__dict__, "start_from": start_from})

