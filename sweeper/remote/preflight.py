"""Preflight: before the first (minutes-long) restart, check the host can run the study.

Flags move between SGLang versions (docs/SGLANG.md), so the truth is the installed
launcher's own ``--help`` on the host, not a list kept here.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sweeper.errors import CommandTimeout, PortBusy, PreflightError
from sweeper.launch import render_value
from sweeper.remote.host import Host
from sweeper.study import StudySpec
from sweeper.study.base import ENV_PREFIX

# Space dimensions only some SGLang builds have a flag for: where the host's --help lacks
# the flag, the dimension leaves the space (with this reason) instead of refusing the study.
OPTIONAL_DIMENSIONS: dict[str, str] = {
    "speculative-draft-tp-size": (
        "upstream SGLang (0.5.23) has no draft-TP flag: the draft runs in the attention-TP "
        "group; `attn-dp-size` is how to move it"),
}

# Every long option argparse prints, e.g. "--tp-size TP_SIZE, --tp TP".
_FLAG = re.compile(r"(?<![\w-])--([A-Za-z0-9][A-Za-z0-9_-]*)")


@dataclass(frozen=True)
class PreflightReport:
    """What preflight found; stored with the study run for the record."""

    host: str
    launcher: str
    help_flags: frozenset[str]  # every --name in the help text, without dashes
    gpu_count: int | None  # None: no nvidia-smi on the host (fine for the simulator)
    port: int
    port_held_by_own_server: bool
    deprecated: frozenset[str] = frozenset()  # flags whose help says "Deprecated"

    def build_attrs(self, version: str | None) -> dict[str, object]:
        """What an export needs to know of the build (stored with the study)."""
        return {"sglang_version": version, "help_flags": sorted(self.help_flags),
                "deprecated_flags": sorted(self.deprecated)}


def help_flags(help_text: str) -> frozenset[str]:
    """Long option names (without ``--``) that an argparse help text lists."""
    return frozenset(_FLAG.findall(help_text))


# An option with choices, as argparse prints it: "--attention-backend {triton,fa3,...}",
# "--lora-target-modules [{q_proj,...} ...]" (nargs '*')
_CHOICES = re.compile(r"(?<![\w-])--([A-Za-z0-9][A-Za-z0-9_-]*) \[?\{([^{}\s]*)\}")


def help_choices(help_text: str) -> dict[str, frozenset[str]]:
    """The values each option with choices takes, as this build's ``--help`` lists them
    (backends come and go between SGLang versions: the build says, not a list kept here)."""
    return {name: frozenset(body.split(",")) for name, body in _CHOICES.findall(help_text)}


def flag_values(spec: StudySpec) -> dict[str, list[Any]]:
    """Every value the study may pass to each SGLang flag: server.args' fixed ones and the
    space's choices and integers (a float range is left to SGLang)."""
    out: dict[str, list[Any]] = {}
    for name, value in spec.server.args.items():
        out[name] = [value]  # a list is the values of one flag (nargs "+")
    for name, param in spec.space.items():
        if not name.startswith(ENV_PREFIX) and param.kind != "float":
            out[name] = list(param.domain())
    return out


def _in_choices(text: str, allowed: frozenset[str]) -> bool:
    """Whether argparse would take ``text``: an int flag's choices are compared after
    int() ("02" is 2), so a number that is one of them counts."""
    if text in allowed:
        return True
    try:
        return str(int(text)) in allowed
    except ValueError:
        return False


def _check_choices(host: Host, command: str, values: Mapping[str, Sequence[Any]],
                   help_text: str) -> None:
    """A value outside the choices the build's ``--help`` lists for its flag is refused
    now (SGLang's argparse exits on it: "invalid choice"), with a did-you-mean."""
    choices = help_choices(help_text)
    for flag, vals in values.items():
        allowed = choices.get(flag)
        if not allowed:
            continue
        for value in (v for vs in vals for v in (vs if isinstance(vs, list) else [vs])):
            if value is None or isinstance(value, bool):  # absent, or a presence flag
                continue
            text = render_value(value)
            if not _in_choices(text, allowed):
                close = did_you_mean(text, allowed)
                hint = f" (did you mean {close!r}?)" if close else ""
                raise PreflightError(
                    f"host {host.name}: --{flag} {text!r} is not a value this SGLang build "
                    f"takes{hint}; it takes one of {', '.join(sorted(allowed))} (checked with "
                    f"`{command}`); fix it in the study's space or server.args")


# An option's entry in argparse's help: "  --name VALUE, --alias VALUE   help text...".
_ENTRY = re.compile(r"^ {2}(-\S.*)$")


def deprecated_flags(help_text: str) -> frozenset[str]:
    """Options whose help text starts with "Deprecated" (SGLang's retired flags: their
    --config key is refused, so an export must not write them)."""
    out: set[str] = set()
    entries: list[list[str]] = []
    for line in help_text.splitlines():
        if _ENTRY.match(line):
            entries.append([line.strip()])
        elif entries and line.startswith("   "):
            entries[-1].append(line.strip())
        else:
            entries.append([]) if line.strip() else None
    for entry in entries:
        if not entry:
            continue
        head, _, rest = entry[0].partition("  ")  # options, then two spaces, then help
        words = " ".join([rest.strip(), *entry[1:]]).lstrip("( ")
        if words.lower().startswith("deprecated"):
            out.update(_FLAG.findall(head))
    return frozenset(out)


_VERSION = re.compile(r"SGLang (\d+\.\d+\.\d+\S*)")


def sglang_version(host: Host, python: str | None, help_text: str) -> str | None:
    """The host's SGLang version: the one the launcher's help names (the simulator says
    which SGLang it speaks), else the installed package's; None when neither tells."""
    found = _VERSION.search(help_text)
    if found:
        return found.group(1)
    if python:
        try:
            result = host.run([python, "-c", "import importlib.metadata as m; "
                               "print(m.version('sglang'))"], timeout=60)
            if result.exit_code == 0 and result.stdout.strip():
                return result.stdout.strip().splitlines()[-1]
        except CommandTimeout:
            pass
    return None


def preflight(
    host: Host,
    launcher_argv: list[str],
    flags: Collection[str] | Mapping[str, str],
    port: int,
    bind_host: str,
    *,
    owned_pgids: Collection[int] = frozenset(),
    help_timeout: float = 180.0,
    help_text: str | None = None,
    values: Mapping[str, Sequence[Any]] | None = None,
) -> PreflightReport:
    """Check, in order: the host answers; ``launcher --help`` runs; every flag the study can
    emit (dashed names without ``--``; a mapping flag -> study parameter names the
    parameter in the message) is in that help; GPUs are visible if nvidia-smi exists; the
    port is free or held by a server this sweeper started (a group in ``owned_pgids``).
    ``values``: each flag's values the study may pass (``flag_values``), checked against
    the choices the help lists.

    Raises PreflightError (the user's to fix), PortBusy, or an InfrastructureError from the
    host itself (unreachable, connection lost).
    """
    host.check_alive()
    if help_text is None:  # ``help_text``: the same host's --help, already read
        help_text = launcher_help(host, launcher_argv, help_timeout)
    available = _check_study(host, launcher_argv, flags, values or {}, help_text)
    gpu_count = _gpu_count(host)

    owned = False
    if not host.port_free(port, bind_host):
        # We cannot tie a socket to a process group without root tools on every host, so
        # "ours" means: one of the sweeper's recorded server groups is still alive. The
        # sweep stops that group (and waits for the port) before the next start anyway.
        owned = any(host.group_alive(pgid) for pgid in owned_pgids)
        if not owned:
            raise PortBusy(
                f"host {host.name}: port {port} on {bind_host} is in use by a process this "
                f"sweeper did not start; stop it or set server.port to a free port"
            )
    return PreflightReport(
        host=host.name,
        launcher=shlex.join(launcher_argv),
        help_flags=available,
        gpu_count=gpu_count,
        port=port,
        port_held_by_own_server=owned,
        deprecated=deprecated_flags(help_text),
    )


def require_flags(host: Host, launcher_argv: list[str],
                  flags: Collection[str] | Mapping[str, str],
                  help_timeout: float = 180.0,
                  values: Mapping[str, Sequence[Any]] | None = None) -> frozenset[str]:
    """Only the flag check of ``preflight``, and its check of ``values`` (``export
    --adaptive`` writes flags the sweep never passed: the host's SGLang must have them).
    PreflightError otherwise."""
    host.check_alive()
    return _check_study(host, launcher_argv, flags, values or {},
                        launcher_help(host, launcher_argv, help_timeout))


def _check_study(host: Host, launcher_argv: list[str],
                 flags: Collection[str] | Mapping[str, str],
                 values: Mapping[str, Sequence[Any]], help_text: str) -> frozenset[str]:
    """The study against the build's ``--help``: every flag in it, every value within the
    choices it lists. The flags it lists."""
    available = help_flags(help_text)
    command = shlex.join([*launcher_argv, "--help"])
    _require(host, command, flags, available)
    _check_choices(host, command, values, help_text)
    return available


def optional_dimensions(spec: StudySpec) -> list[str]:
    """The study's space dimensions whose flag only some builds have."""
    return [name for name in spec.space if name in OPTIONAL_DIMENSIONS]


def drop_unavailable(spec: StudySpec, available: frozenset[str]
                     ) -> tuple[StudySpec, list[str]]:
    """The study without the optional dimensions this build's --help lacks (from the space
    and every start_from entry), and one line per dimension saying why."""
    gone = [name for name in optional_dimensions(spec) if name not in available]
    if not gone:
        return spec, []
    space = {k: v for k, v in spec.space.items() if k not in gone}
    start_from = [{k: v for k, v in entry.items() if k not in gone}
                  for entry in spec.start_from]
    notes = [f"space: {name} taken out: this host's SGLang has no --{name} "
             f"({OPTIONAL_DIMENSIONS[name]})" for name in gone]
    return dataclasses.replace(spec, space=space, start_from=start_from), notes


def launcher_help(host: Host, launcher_argv: list[str], help_timeout: float) -> str:
    """``launcher --help``'s text on the host; PreflightError when it does not run."""
    command = shlex.join([*launcher_argv, "--help"])
    # SGLang imports torch before printing help: tens of seconds on a cold node.
    try:
        result = host.run_launcher([*launcher_argv, "--help"], timeout=help_timeout)
    except CommandTimeout as exc:
        raise PreflightError(
            f"host {host.name}: `{command}` did not finish in {help_timeout:.0f}s"
        ) from exc
    if result.exit_code != 0:
        # its last line says why (argparse's "error: ..."), not the usage before it
        lines = (result.stderr.strip() or result.stdout.strip()).splitlines()
        detail = lines[-1][-400:] if lines else ""
        raise PreflightError(
            f"host {host.name}: `{command}` failed with exit code {result.exit_code}"
            + (f": {detail}" if detail else "")
            + "; check the study's server.launcher and python"
        )
    return result.stdout + "\n" + result.stderr


def _require(host: Host, command: str, flags: Collection[str] | Mapping[str, str],
             available: frozenset[str]) -> None:
    wanted = flags if isinstance(flags, Mapping) else {f: f for f in flags}
    missing = sorted(f.removeprefix("--") for f in wanted if f.removeprefix("--") not in available)
    if missing:
        parts = []
        for flag in missing:
            param = wanted.get(flag, wanted.get(f"--{flag}", flag))
            text = f"--{flag}"
            if param.removeprefix("--") != flag:  # a space parameter: say which one
                text += f" (for parameter {param!r})"
            hint = did_you_mean(flag, available)
            parts.append(f"{text} (did you mean --{hint}?)" if hint else text)
        raise PreflightError(
            f"host {host.name}: this SGLang build has no {', '.join(parts)}; fix or remove it "
            f"in the study's space or server.args, or use a build that has it (checked with "
            f"`{command}`)"
        )


def did_you_mean(flag: str, available: Collection[str]) -> str | None:
    """The flag the launcher's ``--help`` lists that ``flag`` is a typo of (``tp-sise`` ->
    ``tp-size``): one edit away (two for a flag of 8 characters or more; a swap of two
    neighbours is one). Similar-looking SGLang flags share long prefixes
    (``speculative-...``), so closeness by ratio would suggest a different flag; None
    when nothing is that close."""
    limit = 2 if len(flag) >= 8 else 1
    best = min(((_edits(flag, f), f) for f in available), default=None)
    return best[1] if best is not None and best[0] <= limit else None


def _edits(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps
    of neighbours, each 1 (difflib has no edit distance; this is 10 lines)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def _gpu_count(host: Host) -> int | None:
    try:
        result = host.run(["nvidia-smi", "-L"], timeout=60)
    except CommandTimeout as exc:
        raise PreflightError(
            f"host {host.name}: `nvidia-smi -L` hung for 60s (driver problem?)"
        ) from exc
    if result.exit_code == 127:  # command not found: a CPU host or the simulator
        return None
    gpus = [line for line in result.stdout.splitlines() if line.startswith("GPU ")]
    if result.exit_code != 0 or not gpus:
        detail = (result.stderr.strip() or result.stdout.strip())[-300:]
        raise PreflightError(
            f"host {host.name}: nvidia-smi sees no GPU (exit {result.exit_code}): {detail}"
        )
    return len(gpus)
