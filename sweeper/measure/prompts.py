"""The prompts a benchmark sends: the built-in chat set shipped with sweeper, or a JSONL
file of {"messages": [...]} objects. The set's hash is stored with every measurement, so
two figures measured on different prompts are never compared unknowingly."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from sweeper.errors import InputError

Message = dict[str, str]
_ROLES = ("system", "user", "assistant")



@dataclass(frozen=True)
class PromptSet:
    """Chat prompts (each a list of messages) and the sha256 of their canonical form."""

    prompts: list[list[Message]]
    hash: str
    source: str
    ids: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompts)


def _canonical_hash(prompts: list[list[Message]]) -> str:
    # Only roles and contents count: ids and key order do not change what the server sees.
    canon = json.dumps(prompts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def _parse_prompt_line(line: str, where: str) -> tuple[list[Message], str | None]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
        raise InputError(f'{where}: expected an object with a "messages" list')
    msgs = obj["messages"]
    if not msgs:
        raise InputError(f"{where}: messages is empty")
    out: list[Message] = []
    for i, m in enumerate(msgs):
        if (
            not isinstance(m, dict)
            or m.get("role") not in _ROLES
            or not isinstance(m.get("content"), str)
        ):
            raise InputError(
                f"{where}: messages[{i}] needs a role ({'/'.join(_ROLES)}) and a string content"
            )
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] != "user":
        raise InputError(f"{where}: the last message must be the user's")
    pid = obj.get("id")
    return out, (None if pid is None else str(pid))


def load_prompts(source: str = "builtin") -> PromptSet:
    """Load a prompt set: ``"builtin"`` (shipped with sweeper) or a JSONL file path.

    Each line is ``{"messages": [{"role": "user", "content": "..."}], "id": "optional"}``.
    Raises ``InputError`` naming the file and line on anything malformed.
    """
    if source == "builtin":
        name = "sweeper/measure/builtin_prompts.jsonl"
        data = resources.files("sweeper.measure").joinpath("builtin_prompts.jsonl")
        text = data.read_text("utf-8")
    else:
        name = source
        try:
            text = Path(source).read_text("utf-8")
        except OSError as exc:
            raise InputError(f"{source}: cannot read prompts ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise InputError(f"{source}: prompts file is not UTF-8") from None
    prompts: list[list[Message]] = []
    ids: list[str | None] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        msgs, pid = _parse_prompt_line(line, f"{name}:{lineno}")
        prompts.append(msgs)
        ids.append(pid)
    if not prompts:
        raise InputError(f"{name}: no prompts")
    return PromptSet(prompts=prompts, hash=_canonical_hash(prompts), source=source, ids=ids)


def render_plain(messages: Sequence[Message]) -> str:
    """Messages as plain text for /generate, which takes raw text and applies no chat
    template. A simple transcript keeps the same content in front of the model."""
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"
