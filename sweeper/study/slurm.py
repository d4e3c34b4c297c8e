"""A host's ``slurm:`` section: the server runs as a Slurm job step on a compute node.

    hosts:
      - ssh: login-node                 # where srun, squeue and scancel run
        python: /shared/envs/sglang/bin/python
        slurm:
          partition: h200               # a job per server start...
          # job: 123456                 # ...or a step in an allocation you hold (salloc)
          srun_args: [--gres=gpu:8, --time=02:00:00]
          queue_timeout: 2h             # waiting for nodes; not part of startup_timeout

The sweeper owns the options that make a step findable and its environment complete
(``--job-name``, ``--jobid``, ``--partition``, ``--export``, the task count); ``srun_args``
may not set them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sweeper.study.base import Duration

OWNED_SRUN_ARGS = ("-J", "--job-name", "--jobid", "-p", "--partition", "--export", "-n",
                   "--ntasks", "-N", "--nodes", "--overlap", "-o", "--output", "-e", "--error")


class SlurmSpec(BaseModel):
    """Where the server's job step runs (``hosts[].slurm``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    partition: str | None = None  # a new job per server start (None: the default partition)
    job: int | None = Field(None, ge=1)  # or: steps inside this running allocation
    srun_args: list[str] = []
    queue_timeout: Duration = 3600.0

    @field_validator("srun_args")
    @classmethod
    def _srun_args(cls, value: list[str]) -> list[str]:
        for word in value:
            if word.split("=", 1)[0] in OWNED_SRUN_ARGS:
                raise ValueError(f"{word!r} is not allowed in srun_args: the sweeper sets it "
                                 "(job name, partition or job, environment, one task)")
        return value

    @model_validator(mode="after")
    def _one_place(self) -> SlurmSpec:
        if self.partition is not None and self.job is not None:
            raise ValueError("give partition or job, not both")
        if self.partition is not None and (not self.partition.strip()
                                           or self.partition.startswith("-")):
            raise ValueError(f"{self.partition!r} is not a partition name")
        if self.queue_timeout <= 0:
            raise ValueError("queue_timeout must be > 0")
        return self
