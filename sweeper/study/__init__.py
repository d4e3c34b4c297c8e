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

This module also owns *which configurations are valid* (``SpeculativeRules``,
``StudySpec.check_config``); sweeper/space.py owns *how Optuna samples them*.
Values are data: nothing from the file is evaluated, and strings stay strings.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import math
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from sweeper.errors import StudyError

STEPS = "speculative-num-steps"
TOPK = "speculative-eagle-topk"
DRAFT = "speculative-num-draft-tokens"
ALGORITHM = "speculative-algorithm"
SPECULATIVE_PREFIX = "speculative-"
TRIPLE = (STEPS, TOPK, DRAFT)

ENV_PREFIX = "env."
UNSET = "unset"  # an env choice that leaves the variable out of the server's environment

# Flags the sweeper sets itself from server.port / server.host.
RESERVED_FLAGS = {"port": "server.port", "host": "server.host"}

PLACEHOLDER_PATTERN = "CHANGE-ME*"

_FLAG_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# [user@]host[:port]; host is an ~/.ssh/config alias, a DNS name, an IPv4 or [IPv6].
# A leading '-' is refused: ssh would read it as an option.
_SSH_RE = re.compile(
    r"^(?:(?P<user>[A-Za-z0-9._][A-Za-z0-9._-]*)@)?"
    r"(?P<host>[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\])"
    r"(?::(?P<port>[0-9]+))?$"
)
_NUMBER_RE = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")
_DURATION_RE = re.compile(
    r"^(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?$"
)
_STORAGE_SCHEMES = ("sqlite:///", "postgresql://", "postgresql+", "mysql://", "mysql+",
                    "journal://")

Scalar = str | int | float | bool


# --------------------------------------------------------------------------- values
def parse_duration(value: Any) -> float:
    """Seconds from ``90``, ``2.5``, ``"90"``, ``"90s"``, ``"20m"``, ``"1h"``, ``"1m30s"``."""
    if isinstance(value, bool):
        raise ValueError("expected a duration, got a boolean")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        if _NUMBER_RE.match(text):
            seconds = float(text)
        else:
            m = _DURATION_RE.match(text)
            if not text or not m or not any(m.groupdict().values()):
                raise ValueError(f"{value!r} is not a duration (write 90, \"90s\", \"20m\", "
                                 "\"1h\" or \"1m30s\")")
            seconds = (float(m["h"] or 0) * 3600 + float(m["m"] or 0) * 60
                       + float(m["s"] or 0))
    else:
        raise ValueError(f"expected a duration like \"90s\" or \"20m\", got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a duration must be positive, got {value!r}")
    return seconds


def _coerce_float(value: Any) -> Any:
    """Numbers, and numeric strings such as PyYAML's '1e-3', become floats."""
    if isinstance(value, str) and _NUMBER_RE.match(value.strip()):
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


Duration = Annotated[float, BeforeValidator(parse_duration)]


def render_value(value: Any) -> str:
    """How a value reaches the server: same rules as LaunchConfig (floats keep a dot)."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


# --------------------------------------------------------------------------- models
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class HostSpec(_Model):
    """A GPU host: ``local``, an ~/.ssh/config alias, or ``user@host[:port]``."""

    ssh: str
    # "{python}" in the launcher. Default: this sweeper's own interpreter (sys.executable)
    # for ``local`` (it has sweeper.sim), "python3" elsewhere; filled in by load_study.
    python: str | None = None
    workdir: str | None = None  # resolved to ~/.sweeper/<study name> by load_study
    url: str | None = None  # reach the server here directly instead of an SSH tunnel

    @property
    def is_local(self) -> bool:
        return self.ssh == "local"

    @property
    def is_placeholder(self) -> bool:
        """The shipped kimi study names no real host: ``validate`` accepts it,
        ``optimize`` refuses it with ``placeholder_message``."""
        return fnmatch.fnmatchcase(self.ssh, PLACEHOLDER_PATTERN)

    def _parts(self) -> re.Match[str] | None:
        return None if self.is_local else _SSH_RE.match(self.ssh)

    @property
    def user(self) -> str | None:
        m = self._parts()
        return m["user"] if m else None

    @property
    def hostname(self) -> str | None:
        """Alias or address (brackets of an IPv6 literal removed); None for local."""
        m = self._parts()
        return m["host"].strip("[]") if m else None

    @property
    def port(self) -> int | None:
        m = self._parts()
        return int(m["port"]) if m and m["port"] else None


class ServerSpec(_Model):
    """How to start SGLang. Durations are seconds; args are SGLang's dashed flags."""

    launcher: str = "{python} -m sglang.launch_server"
    port: int = Field(30000, ge=1, le=65535)
    host: str = "127.0.0.1"
    startup_timeout: Duration = 1200.0
    hang_timeout: Duration = 300.0
    stop_grace: Duration = 30.0
    args: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, Any] = Field(default_factory=dict)  # str -> str after load_study


class BenchmarkSpec(_Model):
    api: Literal["chat", "generate"] = "chat"
    max_tokens: int = Field(500, ge=1)
    runs: int = Field(5, ge=1)
    warmup: int = Field(1, ge=0)
    concurrency: int = Field(1, ge=1)
    prompts: str = "builtin"
    request_timeout: Duration = 600.0
    objective: Literal["mean", "median", "min"] = "mean"


class SweepSpec(_Model):
    sampler: Literal["tpe", "random"] = "tpe"
    seed: int | None = None
    max_retries: int = Field(2, ge=0)
    max_consecutive_failures: int = Field(5, ge=1)
    n_startup_trials: int = Field(8, ge=0)
    confirm_top: int = Field(0, ge=0)
    confirm_runs: int = Field(5, ge=1)


class _StudyFile(_Model):
    """The file as written; space and start_from are checked by hand (exact key paths)."""

    name: str | None = None
    storage: str | None = None
    hosts: list[HostSpec] = Field(min_length=1)
    server: ServerSpec = Field(default_factory=ServerSpec)
    baseline: bool = True
    space: dict[str, Any] = Field(default_factory=dict)
    start_from: list[dict[str, Any]] = Field(default_factory=list)
    benchmark: BenchmarkSpec = Field(default_factory=BenchmarkSpec)
    sweep: SweepSpec = Field(default_factory=SweepSpec)


# The keys each section accepts, for "did you mean" suggestions.
_PARAM_KEYS = ("int", "float", "choices", "step", "log")


@dataclass(frozen=True)
class ParamSpec:
    """One searched parameter: ``int``/``float`` range or ``choices`` (YAML types kept)."""

    kind: Literal["int", "float", "choices"]
    low: float | int | None = None
    high: float | int | None = None
    step: int | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    def domain(self) -> list[Any]:
        """Every value of an int range or a choice list (not defined for floats)."""
        if self.kind == "choices":
            return list(self.choices)
        if self.kind == "int":
            assert isinstance(self.low, int) and isinstance(self.high, int)
            return list(range(self.low, self.high + 1, self.step or 1))
        raise ValueError("a float range has no finite domain")

    def contains(self, value: Any) -> bool:
        if self.kind == "choices":
            return any(type(value) is type(c) and value == c for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        assert self.low is not None and self.high is not None
        if self.kind == "int":
            return (isinstance(value, int) and self.low <= value <= self.high
                    and (value - self.low) % (self.step or 1) == 0)
        return self.low <= float(value) <= self.high

    def describe(self) -> str:
        if self.kind == "choices":
            return f"one of {list(self.choices)}"
        return f"{self.kind} in [{self.low}, {self.high}]" + (
            f" step {self.step}" if self.step and self.step != 1 else "")


# A speculative number is searched (ParamSpec), fixed in server.args (int) or absent.
SpecNumber = ParamSpec | int | None


@dataclass(frozen=True)
class SpeculativeRules:
    """SGLang's rules for (steps, topk, draft tokens), on this study's space.

    - all three or none (draft tokens may be left out when topk is always 1: SGLang
      sets it to steps + 1, and the sweeper says so explicitly on the command line);
    - topk == 1: draft tokens = steps + 1;
    - topk > 1: 2 <= draft tokens <= steps * topk + 1 (SGLang's own sweep script skips
      the rest). Only the (topk, steps) pairs that admit a draft-token value are valid.
    """

    steps: SpecNumber
    topk: SpecNumber
    draft: SpecNumber

    @property
    def active(self) -> bool:
        return self.steps is not None

    @staticmethod
    def _domain(x: SpecNumber) -> list[int]:
        if x is None:
            return []
        return [x] if isinstance(x, int) else x.domain()

    def topk_values(self) -> list[int]:
        return self._domain(self.topk)

    def steps_values(self, topk: int | None = None) -> list[int]:
        """Steps valid with ``topk`` (all steps when topk is None or 1)."""
        steps = self._domain(self.steps)
        if topk is None or topk == 1:
            return steps
        return [s for s in steps if self.draft_values(topk, s)]

    def draft_values(self, topk: int, steps: int) -> list[int]:
        if topk == 1:
            return [steps + 1]
        cap = steps * topk + 1
        if self.draft is None:
            return []
        return [d for d in self._domain(self.draft) if 2 <= d <= cap]


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
    benchmark: BenchmarkSpec
    sweep: SweepSpec
    rules: SpeculativeRules = field(repr=False, default=SpeculativeRules(None, None, None))

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
        return _check_config(self, dict(params), key)


# --------------------------------------------------------------------------- errors
def _fail(path: Path | str, key: str, what: str, todo: str) -> NoReturn:
    raise StudyError(f"{path}: {key}: {what}; {todo}" if key else f"{path}: {what}; {todo}")


def _loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _section_keys(loc: Sequence[int | str]) -> list[str]:
    """Valid keys at the mapping that holds ``loc[-1]`` (for did-you-mean)."""
    parent = [p for p in loc[:-1] if not isinstance(p, int)]
    models: dict[tuple[str, ...], type[BaseModel]] = {
        (): _StudyFile, ("hosts",): HostSpec, ("server",): ServerSpec,
        ("benchmark",): BenchmarkSpec, ("sweep",): SweepSpec,
    }
    model = models.get(tuple(parent))
    return list(model.model_fields) if model else []


def _suggest(word: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"valid keys: {', '.join(options)}" if options else "remove it"


def _pydantic_error(path: Path, exc: ValidationError) -> NoReturn:
    err = exc.errors(include_url=False)[0]
    loc = list(err["loc"])
    kind, msg, given = err["type"], err["msg"], err.get("input")
    key = _loc(loc)
    if kind == "extra_forbidden":
        _fail(path, key, f"unknown key {loc[-1]!r}", _suggest(str(loc[-1]), _section_keys(loc)))
    if kind == "missing":
        _fail(path, key, "missing", "add it")
    if kind == "value_error":  # parse_duration's own message
        _fail(path, key, msg.removeprefix("Value error, "), "fix the value")
    if kind == "literal_error":
        _fail(path, key, f"{given!r} is not allowed", msg.lower())
    if kind == "too_short" and loc == ["hosts"]:
        _fail(path, key, "no hosts", "add at least one, e.g. `- ssh: local`")
    what = f"{msg[0].lower()}{msg[1:]}, got {given!r}"
    if isinstance(given, str) and kind.startswith(("int_", "float_", "bool_")):
        what += " (a string)"
    _fail(path, key, what, _TYPE_HINTS.get(kind.split("_")[0], "fix the value"))


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
            _fail(candidate, "", "no such study file",
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
    _fail(root / f"{name_or_path}.yaml", "", f"unknown study {name_or_path!r}", hint)


def load_study(name_or_path: str, root: Path = Path("studies")) -> StudySpec:
    """Load and validate a study: ``eagle3-kimi`` finds studies/eagle3-kimi.yaml."""
    path = resolve_study_path(name_or_path, root)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(path, "", f"cannot read it ({exc.__class__.__name__}: {exc})",
              "check the file's permissions and encoding")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        _fail(path, "", f"malformed YAML at {where}{problem}",
              "fix the YAML syntax (indentation, colons, quotes)")
    return parse_study(data, path)


def parse_study(data: Any, path: Path) -> StudySpec:
    """Validate already-parsed YAML data as the study file at ``path``."""
    if data is None:
        _fail(path, "", "the file is empty", "write a study (see studies/demo.yaml)")
    if not isinstance(data, dict):
        _fail(path, "", f"expected a mapping of keys at the top level, got a "
                        f"{type(data).__name__}", "see studies/demo.yaml for the shape")
    for k in data:
        if not isinstance(k, str):
            _fail(path, str(k), "keys must be strings", "quote the key")
    try:
        raw = _StudyFile.model_validate(data)
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


def _check_storage(path: Path, url: str) -> str:
    if not url.startswith(_STORAGE_SCHEMES):
        _fail(path, "storage", f"unsupported storage URL {url!r}",
              "use sqlite:///path.db, postgresql://user@host/db, mysql://... or "
              "journal:///path/file.log")
    if url.startswith(("postgresql+", "mysql+")) and "://" not in url:
        _fail(path, "storage", f"malformed storage URL {url!r}",
              "write it like postgresql+psycopg2://user@host/db")
    rest = url.split("://", 1)[1]
    if url.startswith("sqlite:///") and not url[len("sqlite:///"):]:
        _fail(path, "storage", "the sqlite URL names no file", "write sqlite:///studies/NAME.db")
    if not rest.strip("/"):
        _fail(path, "storage", f"the storage URL {url!r} names no database or file",
              "complete it")
    return url


def _check_flag_name(path: Path, key: str, name: str) -> None:
    if name.startswith("-"):
        _fail(path, key, f"flag {name!r} starts with a dash",
              f"write SGLang's flag name without dashes: {name.lstrip('-')}")
    if "_" in name:
        _fail(path, key, f"flag {name!r} uses underscores",
              f"use SGLang's dashed name {name.replace('_', '-')}")
    if not _FLAG_RE.match(name):
        _fail(path, key, f"{name!r} is not an SGLang flag name",
              "use SGLang's lowercase dashed flag names, e.g. tp-size")
    if name in RESERVED_FLAGS:
        _fail(path, key, f"the {name} flag is set by the sweeper",
              f"set {RESERVED_FLAGS[name]} instead")


def _check_env_name(path: Path, key: str, name: str) -> None:
    if not _ENV_RE.match(name):
        _fail(path, key, f"{name!r} is not a valid environment variable name",
              "use letters, digits and underscores, not starting with a digit")


def _env_value(path: Path, key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        _fail(path, key, f"expected a string or a number, got {value!r}",
              "write the value NCCL or the server expects, e.g. 1 or \"Ring\" (quote it)")
    return render_value(value)


def _check_arg_value(path: Path, key: str, value: Any) -> None:
    if value is None:
        _fail(path, key, "null is not a flag value", "remove the key to leave the flag out")
    if isinstance(value, dict):
        _fail(path, key, "nested maps are not flag values (SGLang's --config has none)",
              "give a scalar or a list")
    if isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, dict | list) or v is None:
                _fail(path, f"{key}[{i}]", f"expected a scalar, got {v!r}",
                      "a list flag holds strings or numbers")
        return
    if not isinstance(value, str | int | float | bool):
        _fail(path, key, f"unsupported value {value!r}", "give a string, number or boolean")


def _number(path: Path, key: str, v: Any, integer: bool) -> int | float:
    if integer:
        if isinstance(v, bool) or not isinstance(v, int):
            hint = f"write {int(v)}" if isinstance(v, float) and v.is_integer() else \
                "int bounds must be whole numbers"
            _fail(path, key, f"int bound {v!r} is not an integer", hint)
        return v
    c = _coerce_float(v)
    if isinstance(c, bool) or not isinstance(c, float) or not math.isfinite(c):
        _fail(path, key, f"float bound {v!r} is not a number", "write e.g. 0.85 or 1.0e-3")
    return c


def _parse_param(path: Path, name: str, raw: Any) -> ParamSpec:
    key = f"space.{name}"
    is_env = name.startswith(ENV_PREFIX)
    if not isinstance(raw, dict):
        _fail(path, key, f"expected a mapping like {{int: [1, 6]}}, got {raw!r}",
              "give one of {int: [lo, hi]}, {float: [lo, hi]} or {choices: [...]}")
    for k in raw:
        if k not in _PARAM_KEYS:
            _fail(path, f"{key}.{k}", f"unknown key {k!r}", _suggest(str(k), _PARAM_KEYS))
    kinds = [k for k in ("int", "float", "choices") if k in raw]
    if len(kinds) != 1:
        _fail(path, key, "give exactly one of int, float, choices" +
              (f" (got {', '.join(kinds)})" if kinds else ""),
              "e.g. {int: [1, 6]} or {choices: [1, 2, 4]}")
    kind = kinds[0]
    body = raw[kind]
    log = raw.get("log", False)
    if not isinstance(log, bool):
        _fail(path, f"{key}.log", f"expected true or false, got {log!r}", "fix the value")
    step = raw.get("step")

    if kind == "choices":
        if "step" in raw or "log" in raw:
            _fail(path, f"{key}.{'step' if 'step' in raw else 'log'}",
                  "applies to int/float ranges only", "remove it")
        if not isinstance(body, list):
            _fail(path, f"{key}.choices", f"expected a list, got {body!r}",
                  "write choices: [a, b, c]")
        if not body:
            _fail(path, f"{key}.choices", "empty choices", "list at least one value")
        seen: dict[str, Any] = {}
        for i, c in enumerate(body):
            ck = f"{key}.choices[{i}]"
            if isinstance(c, dict | list):
                _fail(path, ck, f"a choice must be a scalar, got {c!r}",
                      "give strings, numbers, booleans or null")
            if is_env:
                if c is None:
                    _fail(path, ck, "null is not an env value",
                          f"use {UNSET!r} to leave the variable out")
                if c != UNSET:
                    _env_value(path, ck, c)
            elif c == UNSET:
                _fail(path, ck, f"{UNSET!r} is only for env.* parameters",
                      "use null to leave a flag out")
            # Two choices that reach the server the same way would be silent duplicates.
            canon = _choice_canon(c, is_env)
            if canon in seen:
                same = "" if repr(seen[canon]) == repr(c) else f" (same as {seen[canon]!r})"
                _fail(path, ck, f"duplicate choice {c!r}{same}", "list each value once")
            seen[canon] = c
        return ParamSpec("choices", choices=tuple(body))

    if not isinstance(body, list) or len(body) != 2:
        _fail(path, f"{key}.{kind}", f"expected [low, high], got {body!r}",
              f"write {kind}: [low, high]")
    integer = kind == "int"
    lo = _number(path, f"{key}.{kind}[0]", body[0], integer)
    hi = _number(path, f"{key}.{kind}[1]", body[1], integer)
    if lo > hi:
        _fail(path, f"{key}.{kind}", f"low {body[0]} > high {body[1]}", "swap them")
    if log and lo <= 0:
        _fail(path, f"{key}.log", f"a log scale needs low > 0, got {body[0]}",
              "raise low or drop log")
    if kind == "float" and step is not None:
        _fail(path, f"{key}.step", "float ranges take no step", "remove it or use choices")
    if integer and step is not None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            _fail(path, f"{key}.step", f"step must be a positive integer, got {step!r}",
                  "fix the value")
        if log and step != 1:
            _fail(path, f"{key}.step", "a log scale takes no step (Optuna refuses it)",
                  "remove step or log")
        if (hi - lo) % step:
            _fail(path, f"{key}.step", f"high - low = {hi - lo} is not a multiple of {step}",
                  f"set high to {lo + (hi - lo) // step * step}")
    return ParamSpec(kind, low=lo, high=hi, step=step if integer else None, log=log)


def _choice_canon(value: Any, is_env: bool) -> str:
    if is_env:
        return "<unset>" if value == UNSET else render_value(value)
    if value is None or value is False:
        return "<absent>"
    if value is True:
        return "<present>"
    return render_value(value)


def _spec_number(path: Path, name: str, space: dict[str, ParamSpec],
                 args: dict[str, Any]) -> SpecNumber:
    if name in space:
        p = space[name]
        for v in ([p.low, p.high] if p.kind != "choices" else list(p.choices)):
            if p.kind == "float" or isinstance(v, bool) or not isinstance(v, int) or v < 1:
                _fail(path, f"space.{name}", f"{name} takes positive integers, got {v!r}",
                      "use {int: [lo, hi]} or integer choices >= 1")
        if p.kind == "int" and len(range(int(p.low), int(p.high) + 1, p.step or 1)) > 256:
            # every (topk, steps) pair becomes a branch: keep that enumerable
            _fail(path, f"space.{name}.int", f"{p.describe()} is too wide for {name}",
                  "keep it within 256 values")
        return p
    if name in args:
        v = args[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            _fail(path, f"server.args.{name}", f"expected a positive integer, got {v!r}",
                  "fix the value")
        return v
    return None


def _where(name: str, space: Mapping[str, Any]) -> str:
    return f"space.{name}" if name in space else f"server.args.{name}"


def _check_rules(path: Path, space: dict[str, ParamSpec], args: dict[str, Any]
                 ) -> SpeculativeRules:
    rules = SpeculativeRules(*(_spec_number(path, n, space, args) for n in TRIPLE))
    searched_spec = [n for n in space if n.startswith(SPECULATIVE_PREFIX)]
    if ALGORITHM in space and any(c is None or c is False
                                  for c in space[ALGORITHM].choices):
        _fail(path, f"space.{ALGORITHM}", "a choice turns speculation off",
              "the baseline trial measures the server without speculation: drop that choice")
    if searched_spec and ALGORITHM not in args and ALGORITHM not in space:
        _fail(path, f"space.{searched_spec[0]}", "a speculative parameter is searched but "
              f"server.args has no {ALGORITHM}", f"add server.args.{ALGORITHM} (e.g. EAGLE3)")
    given = [n for n in TRIPLE if getattr(rules, _attr(n)) is not None]
    if not given:
        return rules
    if rules.steps is None:
        _fail(path, _where(given[0], space), f"{given[0]} is set without {STEPS}",
              f"SGLang needs steps too: add {STEPS} to space or server.args")
    if rules.topk is None:
        _fail(path, _where(STEPS, space), f"{STEPS} is set without {TOPK}",
              f"SGLang needs all three or none: add {TOPK} to space or server.args")
    topks = rules.topk_values()
    if rules.draft is None and any(k > 1 for k in topks):
        _fail(path, _where(TOPK, space), f"topk can exceed 1 but {DRAFT} is not set",
              f"add {DRAFT} to space or server.args (SGLang needs all three)")
    if isinstance(rules.draft, ParamSpec) and all(k == 1 for k in topks):
        _fail(path, f"space.{DRAFT}", "searched, but topk is always 1, where SGLang sets "
              "draft tokens = steps + 1", f"remove {DRAFT} from space")
    for k in topks:
        if k > 1 and not rules.steps_values(k):
            s_max = max(rules.steps_values())
            _fail(path, _where(TOPK, space),
                  f"topk={k} admits no {DRAFT} value with any {STEPS} (needs 2 <= draft "
                  f"tokens <= steps*topk+1, at most {s_max * k + 1} here)",
                  f"drop {k} from topk or lower {DRAFT}'s low")
    return rules


def _attr(flag: str) -> str:
    return {STEPS: "steps", TOPK: "topk", DRAFT: "draft"}[flag]


def _build(raw: _StudyFile, path: Path) -> StudySpec:
    name = raw.name if raw.name is not None else path.stem
    if not _NAME_RE.match(name):
        origin = "" if raw.name is not None else " (taken from the file name)"
        _fail(path, "name", f"{name!r} is not a usable study name{origin}",
              "use letters, digits, '.', '_' and '-'")
    storage = _check_storage(path, raw.storage) if raw.storage is not None \
        else _default_storage(path, name)

    hosts: list[HostSpec] = []
    seen_hosts: set[str] = set()
    for i, h in enumerate(raw.hosts):
        key = f"hosts[{i}].ssh"
        if not h.is_local:
            m = _SSH_RE.match(h.ssh)
            if not m:
                _fail(path, key, f"{h.ssh!r} is not a host",
                      "write local, an ~/.ssh/config alias, or user@host[:port]")
            if m["port"] is not None and not 1 <= int(m["port"]) <= 65535:
                _fail(path, key, f"port {m['port']} is out of range", "use 1-65535")
        if h.ssh in seen_hosts:
            _fail(path, key, f"host {h.ssh!r} is listed twice", "list each host once")
        seen_hosts.add(h.ssh)
        python = h.python if h.python is not None else (
            sys.executable if h.is_local else "python3")
        if not python.strip():
            _fail(path, f"hosts[{i}].python", "empty", "give the python that runs SGLang")
        if h.url is not None and not re.match(r"^https?://[^\s/]+", h.url):
            _fail(path, f"hosts[{i}].url", f"{h.url!r} is not an http(s) URL",
                  "write e.g. http://gpu-node-1:8000 or remove it")
        hosts.append(h.model_copy(update={"workdir": h.workdir or f"~/.sweeper/{name}",
                                          "python": python}))

    server = raw.server
    if not server.launcher.strip():
        _fail(path, "server.launcher", "empty launcher",
              "write e.g. \"{python} -m sglang.launch_server\"")
    try:
        shlex.split(server.launcher)
    except ValueError as exc:
        _fail(path, "server.launcher", f"cannot split it into words ({exc})", "fix the quotes")
    if not server.host.strip():
        _fail(path, "server.host", "empty bind address", "use 127.0.0.1 or 0.0.0.0")
    for flag, value in server.args.items():
        _check_flag_name(path, f"server.args.{flag}", flag)
        _check_arg_value(path, f"server.args.{flag}", value)
    env: dict[str, str] = {}
    for var, value in server.env.items():
        _check_env_name(path, f"server.env.{var}", var)
        env[var] = _env_value(path, f"server.env.{var}", value)
    server = server.model_copy(update={"env": env})

    space: dict[str, ParamSpec] = {}
    for pname, praw in raw.space.items():
        key = f"space.{pname}"
        if pname.startswith(ENV_PREFIX):
            var = pname[len(ENV_PREFIX):]
            _check_env_name(path, key, var)
            if var in env:
                _fail(path, key, f"{var} is both fixed in server.env and searched",
                      "remove it from server.env or from space")
        else:
            _check_flag_name(path, key, pname)
            if pname in server.args:
                _fail(path, key, f"{pname} is both fixed in server.args and searched",
                      "remove it from server.args or from space")
        space[pname] = _parse_param(path, pname, praw)
    if not space:
        _fail(path, "space", "the search space is empty",
              "add at least one parameter, e.g. speculative-num-steps: {int: [1, 6]}")

    rules = _check_rules(path, space, server.args)
    spec = StudySpec(name=name, path=path, storage=storage, hosts=hosts, server=server,
                     baseline=raw.baseline, space=space, start_from=[],
                     benchmark=raw.benchmark, sweep=raw.sweep, rules=rules)
    start_from = [_check_config(spec, entry, f"start_from[{i}]")
                  for i, entry in enumerate(raw.start_from)]
    return StudySpec(**{**spec.__dict__, "start_from": start_from})


def _check_config(spec: StudySpec, params: dict[str, Any], key: str) -> dict[str, Any]:
    path, rules, space = spec.path, spec.rules, spec.space
    known = [*space, *spec.server.args, *(f"{ENV_PREFIX}{v}" for v in spec.server.env)]
    if rules.active:
        known.append(DRAFT)
    params = {k: (_coerce_float(v) if k in space and space[k].kind == "float" else v)
              for k, v in params.items()}
    for pname, value in params.items():
        pkey = f"{key}.{pname}"
        if not isinstance(pname, str):
            _fail(path, pkey, "parameter names must be strings", "quote it")
        if pname == DRAFT and rules.active:
            pass  # steps + 1 for topk 1, else the space within SGLang's cap: checked below
        elif pname in space:
            if not space[pname].contains(value):
                _fail(path, pkey, f"{value!r} is outside the space "
                      f"({space[pname].describe()})", "pick a value inside the space")
        elif pname in known:
            fixed = spec.fixed(pname)
            if render_value(value) != render_value(fixed):
                _fail(path, pkey, f"{pname} is fixed to {fixed!r}, not {value!r}",
                      "drop it from the entry or search it in space")
        else:
            _fail(path, pkey, f"{pname!r} is neither searched nor fixed",
                  _suggest(str(pname), known) if known else "remove it")
    out = dict(params)
    searched_triple = [n for n in TRIPLE if n in space]
    if not rules.active or not any(n in params for n in searched_triple):
        return out  # no speculative numbers given: the sampler picks them

    def value_of(flag: str) -> int | None:
        v = params.get(flag)
        if v is None and flag not in space:
            fixed = spec.server.args.get(flag)
            return fixed if isinstance(fixed, int) else None
        return v

    topk, steps = value_of(TOPK), value_of(STEPS)
    for flag, v in ((TOPK, topk), (STEPS, steps)):
        if v is None:
            _fail(path, key, f"{flag} is missing", f"give {flag} too: an entry gives all "
                  "the speculative numbers the space searches, or none")
    assert topk is not None and steps is not None
    if topk == 1:
        derived = steps + 1
        if DRAFT in params and params[DRAFT] != derived:
            _fail(path, f"{key}.{DRAFT}", f"with topk 1 SGLang sets draft tokens to "
                  f"steps + 1 = {derived}, not {params[DRAFT]!r}",
                  f"write {derived} or leave it out")
        out[DRAFT] = derived
        return out
    allowed = rules.draft_values(topk, steps)
    draft = params.get(DRAFT, spec.server.args.get(DRAFT) if DRAFT not in space else None)
    if draft is None:
        _fail(path, key, f"{DRAFT} is missing", f"give {DRAFT} (topk > 1)")
    if draft not in allowed or isinstance(draft, bool):
        why = (f"topk={topk}, steps={steps} allow draft tokens in "
               f"{_span(allowed)} (2 <= d <= steps*topk+1 = {steps * topk + 1})"
               if allowed else f"topk={topk}, steps={steps} admit no draft-token value")
        _fail(path, f"{key}.{DRAFT}" if DRAFT in params else key,
              f"{draft!r} breaks SGLang's rule: {why}", "pick a valid combination")
    return out


def _span(values: list[int]) -> str:
    if values == list(range(values[0], values[-1] + 1)):
        return f"[{values[0]}, {values[-1]}]"
    return str(values)


def placeholder_message(target: HostSpec | StudySpec, index: int = 0,
                        study_path: Path | str = "studies/eagle3-kimi.yaml") -> str:
    """What ``optimize`` says when a study still names the placeholder host.
    ``target`` is the study (its path and hosts[index]) or the host itself."""
    if isinstance(target, StudySpec):
        study_path = target.path
    return (f"{study_path}: hosts[{index}].ssh is a placeholder: set it to "
            "your GPU node's ~/.ssh/config alias or user@host")
