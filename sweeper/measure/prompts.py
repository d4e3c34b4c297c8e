"""The prompts a benchmark sends, and in which order.

A prompt set is the built-in chat set shipped with sweeper, a file, or synthetic prompts of
a given input length. Files (one object per line, or a JSON array of them):

- sweeper's own: ``{"messages": [{"role": "user", "content": "..."}], "category": "code",
  "id": "optional"}``;
- ShareGPT: ``{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}]}``
  (the prompt ends at the last human turn: the answers after it are the model's to make);
- MT-Bench questions: ``{"question_id": 81, "category": "writing", "turns": ["...", ...]}``
  (the first turn: the later ones need the model's own answers in front of them).

Why an order matters: acceptance, and so tok/s, depends on the prompt's domain far more than
the 1% a sweep chases. Every measurement therefore walks one fixed sequence of the set,
a function of the set alone (seeded by its hash), never of the trial: stratified by
category so that any stretch of it, the first ``runs`` prompts included, holds the
categories in their proportions. Two configurations measured on the same stretch saw the
same prompts and can be compared prompt by prompt. The set's hash is stored with every
measurement, so two figures measured on different prompts are never compared unknowingly.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from sweeper.errors import InputError

Message = dict[str, str]
_ROLES = ("system", "user", "assistant")
# ShareGPT's speaker names, as the public dumps spell them
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant",
                   "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant",
                   "model": "assistant", "system": "system"}
SYNTHETIC = "synthetic"
SYNTHETIC_PROMPTS = 32  # distinct synthetic prompts: enough for 32 concurrent streams
# Common English words that most LLM tokenizers (BPE, SentencePiece) keep as one token
# with their leading space: N of them make a prompt of about N input tokens.
_SYNTH_TEXT = (
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program "
    "question work government number night point home water room mother area money "
    "story fact month lot right study book eye job word business issue side kind "
    "head house service friend father power hour game line end member law car city "
    "community name president team minute idea kid body information back parent face "
    "others level office door health person art war history party result change "
    "morning reason research girl guy moment air teacher force education"
)
_SYNTH_WORDS = _SYNTH_TEXT.split()


@dataclass(frozen=True)
class PromptSet:
    """Chat prompts (each a list of messages), their ids and categories, and the sha256 of
    their canonical form (roles and contents only)."""

    prompts: list[list[Message]]
    hash: str
    source: str
    ids: list[str | None] = field(default_factory=list)
    categories: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompts)

    def category(self, index: int) -> str | None:
        return self.categories[index] if index < len(self.categories) else None

    @cached_property
    def sequence(self) -> tuple[int, ...]:
        """Every prompt index once, in the set's one benchmark order (``stratified_order``
        seeded by the prompts' contents). The same prompts give the same sequence of
        contents whatever their order in the file, so neither a trial nor a reordered
        file changes what a measurement sends."""
        keys = [_canonical_hash([p]) for p in self.prompts]
        # the file's order must not matter: sort by content first, seed from the contents
        by_content = sorted(range(len(self)), key=lambda i: (keys[i], i))
        seed = int(hashlib.sha256("".join(sorted(keys)).encode()).hexdigest()[:16], 16)
        cats = [self.category(i) for i in by_content]
        return tuple(by_content[k] for k in stratified_order(cats, seed=seed))

    def round_prompts(self, round_index: int, concurrency: int) -> list[int]:
        """The prompt indices of benchmark round ``round_index`` (counted over every round
        this configuration has been measured with, not restarted per benchmark):
        positions ``round_index * concurrency ...`` of ``sequence``, wrapping around."""
        seq, c = self.sequence, max(1, concurrency)
        return [seq[(round_index * c + j) % len(seq)] for j in range(c)]


def stratified_order(categories: Sequence[str | None], seed: int) -> list[int]:
    """Indices of ``categories`` in one seeded order whose every prefix holds each
    category close to its share of the whole (within one prompt).

    Within a category the order is a seeded shuffle; between categories, each next place
    goes to the category furthest behind its share so far (ties by a seeded ranking of the
    categories). Without categories this is a seeded shuffle.
    """
    rng = random.Random(seed)
    groups: dict[str | None, list[int]] = {}
    for i, cat in enumerate(categories):
        groups.setdefault(cat, []).append(i)
    names = sorted(groups, key=lambda c: "" if c is None else c)
    rng.shuffle(names)
    for name in names:
        rng.shuffle(groups[name])
    total = len(categories)
    taken = {name: 0 for name in names}
    out: list[int] = []
    for t in range(1, total + 1):
        # deficit: how far behind its proportional share after t places this category is
        best = max((n for n in names if taken[n] < len(groups[n])),
                   key=lambda n: t * len(groups[n]) / total - taken[n])
        out.append(groups[best][taken[best]])
        taken[best] += 1
    return out


def coverage_note(prompts: PromptSet, runs: int, concurrency: int) -> str | None:
    """A warning when ``runs`` rounds of ``concurrency`` prompts cannot cover the set
    evenly (None when they can): what each trial is measured on instead."""
    n, sent = len(prompts), runs * max(1, concurrency)
    if sent % n == 0:
        return None
    if sent < n:
        first = [prompts.category(i) for i in prompts.sequence[:sent]]
        mix = _mix(first)
        return (f"runs {runs} x concurrency {concurrency} send {sent} of the {n} prompts: "
                f"each trial is measured on the same first {sent} of the set's fixed order"
                f"{' (' + mix + ')' if mix else ''}, a configuration measured longer on the "
                f"next ones; runs: {_even(n, concurrency)} would cover the set evenly")
    return (f"runs {runs} x concurrency {concurrency} send {sent} prompts of a set of {n}: "
            f"some are sent once more than others; runs: {_even(n, concurrency)} (or a "
            f"multiple) would cover the set evenly")


def _even(n: int, concurrency: int) -> int:
    """The fewest runs whose rounds send every prompt equally often."""
    c = max(1, concurrency)
    r = 1
    while (r * c) % n:
        r += 1
    return r


def _mix(cats: Sequence[str | None]) -> str:
    counts: dict[str, int] = {}
    for c in cats:
        if c is not None:
            counts[c] = counts.get(c, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def _canonical_hash(prompts: list[list[Message]]) -> str:
    # Only roles and contents count: ids, categories and key order do not change what the
    # server sees.
    canon = json.dumps(prompts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def _messages(msgs: Any, where: str) -> list[Message]:
    if not isinstance(msgs, list) or not msgs:
        raise InputError(f'{where}: expected an object with a non-empty "messages" list')
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
    return out


def _sharegpt(turns: Any, where: str) -> list[Message]:
    if not isinstance(turns, list):
        raise InputError(f'{where}: "conversations" must be a list of {{"from", "value"}}')
    out: list[Message] = []
    for i, t in enumerate(turns):
        role = _SHAREGPT_ROLES.get(str(t.get("from", "")).lower()) if isinstance(t, dict) \
            else None
        if role is None or not isinstance(t.get("value"), str):
            raise InputError(f'{where}: conversations[{i}] needs "from" (human, gpt or '
                             f'system) and a string "value"')
        out.append({"role": role, "content": t["value"]})
    while out and out[-1]["role"] == "assistant":
        out.pop()  # the answer is what the benchmark asks the server to write
    return out


def _parse_item(obj: Any, where: str) -> tuple[list[Message], str | None, str | None]:
    """One prompt of any supported format: (messages, id, category)."""
    if not isinstance(obj, dict):
        raise InputError(f'{where}: expected a JSON object with "messages", "conversations" '
                         f'(ShareGPT) or "turns" (MT-Bench)')
    if "messages" in obj:
        msgs, pid = _messages(obj["messages"], where), obj.get("id")
    elif "conversations" in obj:
        msgs, pid = _sharegpt(obj["conversations"], where), obj.get("id")
    elif "turns" in obj:
        turns = obj["turns"]
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
            raise InputError(f'{where}: "turns" must be a non-empty list of strings')
        msgs, pid = [{"role": "user", "content": turns[0]}], obj.get("question_id")
    else:
        raise InputError(f'{where}: expected "messages", "conversations" (ShareGPT) or '
                         f'"turns" (MT-Bench)')
    if not msgs or msgs[-1]["role"] != "user":
        raise InputError(f"{where}: the last message must be the user's")
    cat = obj.get("category")
    if cat is not None and not isinstance(cat, str):
        raise InputError(f'{where}: "category" must be a string')
    return msgs, (None if pid is None else str(pid)), cat


def _items(text: str, name: str) -> list[tuple[Any, str]]:
    """(object, where) per prompt: a JSON array (ShareGPT's dumps) or one object a line."""
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{name}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        return [(obj, f"{name}: item {i}") for i, obj in enumerate(data, 1)]
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((json.loads(line), f"{name}:{lineno}"))
        except json.JSONDecodeError as exc:
            raise InputError(f"{name}:{lineno}: not valid JSON ({exc.msg})") from None
    return out


def synthetic_prompts(input_tokens: int, count: int = SYNTHETIC_PROMPTS) -> PromptSet:
    """``count`` distinct prompts of about ``input_tokens`` tokens each (common words, one
    token each in most tokenizers), fixed: the same arguments give the same set."""
    rng = random.Random(input_tokens)
    prompts = []
    for i in range(count):
        words = [rng.choice(_SYNTH_WORDS) for _ in range(max(1, input_tokens - 8))]
        text = f"Prompt {i}. Continue this text: " + " ".join(words)
        prompts.append([{"role": "user", "content": text}])
    return PromptSet(prompts=prompts, hash=_canonical_hash(prompts),
                     source=f"{SYNTHETIC}:{input_tokens}", ids=[f"synthetic-{i}"
                                                                for i in range(count)],
                     categories=[None] * count)


def load_prompts(source: str = "builtin", input_tokens: int | None = None) -> PromptSet:
    """Load a prompt set: ``"builtin"`` (shipped with sweeper), ``"synthetic"`` (prompts of
    ``input_tokens`` tokens) or a file path (formats in the module docstring).

    Raises ``InputError`` naming the file and line on anything malformed.
    """
    if source == SYNTHETIC:
        return synthetic_prompts(input_tokens or 512)
    if source == "builtin":
        name = "sweeper/measure/builtin_prompts.jsonl"
        data = resources.files("sweeper.measure").joinpath("builtin_prompts.jsonl")
        text = data.read_text("utf-8")
    else:
        name = source
        try:
            text = Path(source).read_text("utf-8")
        except OSError as exc:
            raise InputError(f"{source}: cannot read prompts ({exc.strerror}); "
                             f"benchmark.prompts is builtin, synthetic or a file") from None
        except UnicodeDecodeError:
            raise InputError(f"{source}: prompts file is not UTF-8") from None
    prompts: list[list[Message]] = []
    ids: list[str | None] = []
    cats: list[str | None] = []
    for obj, where in _items(text, name):
        msgs, pid, cat = _parse_item(obj, where)
        prompts.append(msgs)
        ids.append(pid)
        cats.append(cat)
    if not prompts:
        raise InputError(f"{name}: no prompts")
    return PromptSet(prompts=prompts, hash=_canonical_hash(prompts), source=source, ids=ids,
                     categories=cats)


def study_prompts(study_path: Path | str, source: str,
                  input_tokens: int | None = None) -> PromptSet:
    """A study's prompt set, checked before anything starts (``validate``, ``optimize``,
    ``confirm``): a bad file is one InputError naming the study's key, the file and line."""
    try:
        return load_prompts(source, input_tokens)
    except InputError as exc:
        raise InputError(f"{study_path}: benchmark.prompts: {exc}") from None


def render_plain(messages: Sequence[Message]) -> str:
    """Messages as plain text for /generate, which takes raw text and applies no chat
    template. A simple transcript keeps the same content in front of the model."""
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"
