"""The sections of a study file as pydantic models: structure and types.

Strict types (a string where a number belongs is an error, not a silent coercion), unknown
keys refused, except the numbers PyYAML leaves as strings: YAML 1.1 reads ``1e-3`` as the
string '1e-3', so float fields accept numeric strings on purpose (``Duration``).
``BenchSpec`` is also what the benchmark client takes: one definition of what to measure.
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sweeper.errors import InputError
from sweeper.remote.logcap import DEFAULT_KEEP_MB
from sweeper.remote.target import SSHTarget, parse_target
from sweeper.study.base import PLACEHOLDER_PATTERN, Duration
from sweeper.study.container import ContainerSpec
from sweeper.study.slurm import SlurmSpec

OBJECTIVES = ("mean", "median", "min")
_IN_STUDY: ContextVar[bool] = ContextVar("sweeper_validating_study", default=False)


@contextlib.contextmanager
def validating_study() -> Iterator[None]:
    """Sections validated inside this block leave their errors to the study loader."""
    token = _IN_STUDY.set(True)
    try:
        yield
    finally:
        _IN_STUDY.reset(token)


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
    # Results are compared only within a group (the same hardware). Default: the GPU type
    # the host reports (sweeper/remote/groups.py).
    group: str | None = None
    # The server's port on this host (default: server.port): two workers on one machine
    # (two `local` entries, or one node reached under two aliases) need two ports.
    port: int | None = Field(None, ge=1, le=65535)
    # Run the server in a container image on this host (study/container.py).
    container: ContainerSpec | None = None
    # Run the server as a Slurm job step; ``ssh`` is then the login node (study/slurm.py).
    slurm: SlurmSpec | None = None

    @property
    def label(self) -> str:
        """What messages, trial attributes and `status` call this host: its target, with
        the port when one is set (two entries may share a machine)."""
        return f"{self.ssh}:{self.port}" if self.port is not None else self.ssh

    @property
    def is_local(self) -> bool:
        return self.ssh == "local"

    @property
    def is_placeholder(self) -> bool:
        """The shipped kimi study names no real host: ``validate`` accepts it,
        ``optimize`` refuses it with ``placeholder_message``."""
        return fnmatch.fnmatchcase(self.ssh, PLACEHOLDER_PATTERN)

    @property
    def target(self) -> SSHTarget | None:
        """User, host and port as written (the one SSH grammar); None for ``local``."""
        return None if self.is_local else parse_target(self.ssh)


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
    # env variables or flags holding secrets whose names the rule (TOKEN, KEY, ...) misses
    secrets: list[str] = Field(default_factory=list)
    # Each start's log on the host (and its stored artifact) keeps this many MB of its
    # beginning and of its end, with one line saying how much was cut; 0 keeps it all.
    log_keep_mb: float = Field(DEFAULT_KEEP_MB, ge=0)



class BenchSpec(_Model):
    """What to measure, the study's ``benchmark:`` section. The fields below ``aggregate``
    are the client's patience; a study may set them, and rarely needs to.

    Built directly (``sweeper bench``, tests), a bad value is an InputError naming it."""

    api: Literal["chat", "generate"] = "chat"
    max_tokens: int = Field(500, ge=1)
    runs: int = Field(5, ge=1)
    # A configuration close to the best measured is measured longer on the same server
    # start, up to this many runs (a batch of ``runs`` more while the pick between them is
    # uncertain: search/model/racing.worth_more_runs). None: always ``runs``. One level
    # and aggregate mean only (a min or median over more runs is another statistic).
    max_runs: int | None = Field(None, ge=1)
    warmup: int = Field(1, ge=0)
    # one level, or several measured on the same server start (study/objective.py)
    concurrency: int | list[int] = 1
    # builtin, synthetic (prompts of ``input_tokens`` tokens) or a file: sweeper's JSONL,
    # ShareGPT or MT-Bench (measure/prompts.py); a relative path is from the working directory
    prompts: str = "builtin"
    input_tokens: int | None = Field(None, ge=1, le=1_000_000)  # prompts: synthetic only
    # sampling temperature of the measured requests (acceptance depends on it: measure at
    # the one you serve); the confirm phase's lossless check always runs at 0
    temperature: float = Field(0.0, ge=0, le=2)
    request_timeout: Duration = 600.0  # total deadline per request, enforced by the client
    # The statistic of the per-run tok/s a trial is told as (what the study's top-level
    # ``objective:`` maximises). Called ``objective`` before; a study file that still says
    # ``benchmark.aggregate: median`` means the same (``_old_name``).
    aggregate: Literal["mean", "median", "min"] = "mean"
    # POST /flush_cache before every run: each starts from an empty prefix cache, so every
    # run (and every configuration) measures the same work
    flush_cache: bool = True
    model: str | None = None  # None -> ask /v1/models, else send this name
    # A stream silent this long is stalled (httpx's read timeout is per chunk).
    stall_timeout: Duration = 120.0
    connect_timeout: Duration = 10.0
    # Transport retries per request: at most this many attempts, within this many seconds.
    max_attempts: int = Field(3, ge=1)
    retry_budget_s: Duration = 60.0
    retry_wait_s: float = Field(0.5, ge=0)  # first back-off; doubles per attempt, max 5 s

    def __init__(self, **data: Any) -> None:
        # Inside a study file the parent model reports errors with their key paths (pydantic
        # prefixes a ValidationError raised here); built directly, one InputError line.
        try:
            super().__init__(**data)
        except ValidationError as exc:
            if _IN_STUDY.get():
                raise
            problems = []
            for err in exc.errors(include_url=False):
                name = ".".join(str(p) for p in err["loc"])
                ctx = err.get("ctx") or {}
                if "ge" in ctx:
                    problems.append(f"{name} must be >= {ctx['ge']}")
                elif err["type"] == "literal_error":
                    problems.append(f"{name} must be one of {ctx.get('expected')}")
                elif err["type"] == "value_error":  # a rule across fields
                    problems.append(str(ctx.get("error", err["msg"])))
                else:
                    problems.append(f"{name}: {err['msg'].lower()}")
            raise InputError("benchmark: " + "; ".join(problems)) from None

    @model_validator(mode="before")
    @classmethod
    def _old_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "objective" in data and "aggregate" not in data:
            data = {k if k != "objective" else "aggregate": v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _max_runs_covers_runs(self) -> BenchSpec:
        if self.max_runs is not None and self.max_runs < self.runs:
            raise ValueError(f"max_runs ({self.max_runs}) must be >= runs ({self.runs})")
        if self.temperature > 0 and self.warmup < 1:
            raise ValueError("temperature above 0 needs warmup >= 1: the warm-up runs at "
                             "temperature 0 give the confirm phase's lossless check its "
                             "reference outputs")
        if self.input_tokens is not None and self.prompts != "synthetic":
            raise ValueError(f"input_tokens sets the length of synthetic prompts: set "
                             f"prompts: synthetic, or remove input_tokens (prompts is "
                             f"{self.prompts!r})")
        return self

    @property
    def extends(self) -> bool:
        """Whether a trial's benchmark may run past ``runs`` (see ``max_runs``)."""
        return self.max_runs is not None and self.max_runs > self.runs and \
            len(self.levels) == 1 and self.aggregate == "mean"

    @property
    def levels(self) -> tuple[int, ...]:
        c = self.concurrency
        return tuple(c) if isinstance(c, list) else (c,)

    def at_level(self, level: int) -> BenchSpec:
        """This benchmark at one concurrency level (what the client runs)."""
        return self.model_copy(update={"concurrency": level})

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


class SweepSpec(_Model):
    sampler: Literal["tpe", "random", "model"] = "tpe"
    seed: int | None = None
    max_retries: int = Field(2, ge=0)
    max_consecutive_failures: int = Field(5, ge=1)
    n_startup_trials: int = Field(8, ge=0)
    confirm_top: int = Field(0, ge=0)
    confirm_runs: int = Field(5, ge=1)
    # stop when the pick is this sure to be within 1% of the best (search/nodetime.py);
    # 1 never stops early (--trials is the bound)
    stop_when_sure: float = Field(0.95, gt=0, le=1)
    # node-seconds of a restart (to healthy) and of one benchmark run on this node, for
    # `validate`'s estimate of the node time; unset, the sweep measures them (the
    # baseline's start-up, the runs' durations)
    restart_cost: Duration | None = None
    run_cost: Duration | None = None


class StudyFile(_Model):
    """The file as written; space and start_from are checked by hand (exact key paths)."""

    name: str | None = None
    storage: str | None = None
    # where the trials' artifacts go: a folder every machine sharing the storage reaches
    # (relative: to the study file), or s3://bucket/prefix (boto3); unset, beside a
    # storage file, or ./studies/ for a database server (results/storage.artifact_dir)
    artifacts: str | None = None
    hosts: list[HostSpec] = Field(min_length=1)
    server: ServerSpec = Field(default_factory=ServerSpec)
    baseline: bool = True
    space: dict[str, Any] = Field(default_factory=dict)
    start_from: list[dict[str, Any]] = Field(default_factory=list)
    benchmark: BenchSpec = Field(default_factory=BenchSpec)
    objective: Any = None  # checked by hand (study/objective.py): exact key paths
    sweep: SweepSpec = Field(default_factory=SweepSpec)


