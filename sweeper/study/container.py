"""A host's ``container:`` section: the server runs in a container image on that host.

    hosts:
      - ssh: gpu-node-1
        python: python3                 # the interpreter inside the image
        container:
          image: lmsysorg/sglang:v0.5.6
          run_args: [--ipc=host, --shm-size=32g, -v, /models:/models:ro]
          gpus: all                     # docker's --gpus; or devices: [nvidia.com/gpu=all]

The sweeper owns the flags that make a container findable, stoppable and reachable
(its name, labels, detached mode, the environment file, the network); ``run_args`` may
not set them, and say so in one line. Everything here is data: argv words, never shell.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

# `docker run` options the sweeper sets itself (remote/container.py), with what to use
# instead. Matched as the whole word or as "--opt=value".
OWNED_RUN_ARGS: dict[str, str] = {
    "--name": "the sweeper names each container after its study and trial",
    "--label": "the sweeper labels each container (study, storage, trial)",
    "-l": "the sweeper labels each container (study, storage, trial)",
    "-d": "the sweeper runs the container detached itself",
    "--detach": "the sweeper runs the container detached itself",
    "--rm": "the sweeper removes the container after reading its exit state",
    "-e": "put environment variables in server.env (kept off command lines)",
    "--env": "put environment variables in server.env (kept off command lines)",
    "--env-file": "put environment variables in server.env (kept off command lines)",
    "--network": "the server is reached over the host's network (--network host)",
    "--net": "the server is reached over the host's network (--network host)",
    "-p": "the server is reached over the host's network (--network host)",
    "--publish": "the server is reached over the host's network (--network host)",
    "-P": "the server is reached over the host's network (--network host)",
    "--gpus": "use container.gpus",
    "--pull": "the sweeper never pulls: pull the image on the node first",
    "-i": "the container runs without a terminal",
    "-t": "the container runs without a terminal",
    "-it": "the container runs without a terminal",
}
# An image reference: [registry[:port]/]path[:tag][@digest]; no blanks, no leading '-'.
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")


class ContainerSpec(BaseModel):
    """How the server's container is run (``hosts[].container``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    image: str
    runtime: Literal["docker", "podman"] = "docker"  # podman: the same CLI
    # Options of the runtime itself, before `run` (e.g. [-H, unix:///run/user/1000/docker.sock]
    # for a rootless daemon, or [--context, gpu]).
    runtime_args: list[str] = []
    # Extra `docker run` options (--ipc=host, --shm-size, -v, --ulimit, --entrypoint...).
    run_args: list[str] = []
    # docker's --gpus value; default "all" unless CDI ``devices`` are given; "none": no GPU flag.
    gpus: str | None = None
    devices: list[str] = []  # --device for each (CDI names such as nvidia.com/gpu=all)
    network: Literal["host"] = "host"

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not _IMAGE.match(value):
            raise ValueError(f"{value!r} is not an image reference; write e.g. "
                             "lmsysorg/sglang:v0.5.6 (the image must already be on the node)")
        return value

    @field_validator("run_args")
    @classmethod
    def _run_args(cls, value: list[str]) -> list[str]:
        for word in value:
            option = word.split("=", 1)[0]
            if option in OWNED_RUN_ARGS:
                raise ValueError(f"{word!r} is not allowed in run_args: "
                                 f"{OWNED_RUN_ARGS[option]}")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or value.startswith("-")
                                  or any(c.isspace() for c in value)):
            raise ValueError(f"{value!r} is not a --gpus value; write all, none, a count, or "
                             "device=0,1")
        return value

    @model_validator(mode="after")
    def _words(self) -> ContainerSpec:
        for key, words in (("runtime_args", self.runtime_args), ("devices", self.devices)):
            if any(not w.strip() for w in words):
                raise ValueError(f"{key} has an empty entry; remove it")
        return self

    def gpu_args(self) -> list[str]:
        """The GPU options of `docker run`: ``--gpus`` and/or ``--device`` per CDI device."""
        gpus = self.gpus if self.gpus is not None else (None if self.devices else "all")
        out = [] if gpus in (None, "none") else ["--gpus", str(gpus)]
        for device in self.devices:
            out += ["--device", device]
        return out
