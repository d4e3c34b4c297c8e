"""Pure parts of the benchmark client: SSE parsing, prompts, accept-length arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweeper.errors import InputError
from sweeper.measure import (
    BenchSpec,
    acceptance_per_position,
    compare_outputs,
    window_accept_length,
)
from sweeper.measure.prompts import load_prompts, render_plain
from sweeper.measure.sse import iter_sse_events


def _chunk(content: str) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": content}}]})


def test_sse_chunks_usage_comments_blank_lines_and_done() -> None:
    lines = [
        ": keep-alive",
        "",
        _chunk("Hello, wor"),  # one chunk, several tokens
        "",
        ":",
        _chunk("ld!"),
        "",
        'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}',
        "",
        "data: [DONE]",
        "",
    ]
    events = list(iter_sse_events(lines))
    assert [e.kind for e in events] == ["data", "data", "data", "done"]
    assert events[0].data is not None
    assert events[0].data["choices"][0]["delta"]["content"] == "Hello, wor"
    assert events[2].data == {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}


def test_sse_without_blank_separators_and_with_crlf() -> None:
    lines = [_chunk("a") + "\r", _chunk("b"), "data:[DONE]"]
    assert [e.kind for e in iter_sse_events(lines)] == ["data", "data", "done"]


def test_sse_multiline_data_joins() -> None:
    events = list(iter_sse_events(['data: {"choices":', "data: []}", ""]))
    assert events[0].kind == "data" and events[0].data == {"choices": []}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('data: {"error": {"message": "context too long", "code": 400}}', "context too long"),
        ('data: {"error": "boom"}', "boom"),
        ('data: {"object": "error", "message": "bad sampling", "code": 400}', "bad sampling"),
        ("data: {not json", "malformed"),
    ],
)
def test_sse_error_events(line: str, message: str) -> None:
    (event,) = iter_sse_events([line, ""])
    assert event.kind == "error" and message in (event.message or "")


def test_sse_event_field_error() -> None:
    (event,) = iter_sse_events(["event: error", 'data: {"detail": "x"}', ""])
    assert event.kind == "error"


def test_compare_outputs() -> None:
    assert compare_outputs(["a", "b", "c"], ["a", "B", "c"]) == [1]
    assert compare_outputs(["a"], ["a", "extra"]) == [1]
    assert compare_outputs([], []) == []


def test_acceptance_per_position() -> None:
    # 10 verify steps: 4 accepted 0 drafts, 3 accepted 1, 2 accepted 2, 1 accepted 3.
    p = acceptance_per_position([4, 3, 2, 1])
    assert p == pytest.approx([6 / 10, 3 / 6, 1 / 3])
    assert acceptance_per_position([5, 0, 0]) == [0.0, None]


def _cumulative(tokens: list[float], rates: list[float]) -> list[float]:
    """Server's cumulative accept length after each segment of traffic."""
    out, t, v = [], 0.0, 0.0
    for tok, rate in zip(tokens, rates, strict=True):
        t, v = t + tok, v + tok / rate
        out.append(t / v)
    return out


def test_window_accept_length_recovers_window_rate_after_unknown_history() -> None:
    # 30 000 tokens served before us at 1.4, then our warm-up + window at 2.1.
    a_start, a_before, a_after = _cumulative([30000, 500, 2500], [1.4, 2.1, 2.1])
    value, source = window_accept_length(a_start, a_before, a_after, 500, 2500)
    assert source == "window" and value == pytest.approx(2.1, rel=1e-6)


def test_window_accept_length_fresh_server_and_fallbacks() -> None:
    a_before, a_after = _cumulative([500, 2500], [1.9, 1.9])
    assert window_accept_length(None, a_before, a_after, 500, 2500) == (
        pytest.approx(1.9),
        "window",
    )
    assert window_accept_length(None, None, 2.0, 0, 2500) == (2.0, "window")
    assert window_accept_length(1.5, 1.5, 2.0, 0, 2500) == (2.0, "cumulative")
    assert window_accept_length(None, None, None, 500, 2500) == (None, "none")


def test_builtin_prompts_are_varied_and_hashed() -> None:
    ps = load_prompts("builtin")
    assert len(ps) >= 20 and len(ps.hash) == 64
    lengths = [sum(len(m["content"]) for m in p) for p in ps.prompts]
    assert min(lengths) < 100 < 1000 < max(lengths)
    assert any(len(p) > 2 for p in ps.prompts)  # multi-turn
    assert load_prompts("builtin").hash == ps.hash


def test_prompt_hash_ignores_ids_and_key_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"id": 1, "messages": [{"role": "user", "content": "hi"}]}\n\n')
    b.write_text('{"messages": [{"content": "hi", "role": "user"}]}\n')
    assert load_prompts(str(a)).hash == load_prompts(str(b)).hash
    b.write_text('{"messages": [{"content": "hi!", "role": "user"}]}\n')
    assert load_prompts(str(a)).hash != load_prompts(str(b)).hash


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("", "no prompts"),
        ("{oops\n", ":1: not valid JSON"),
        ('{"messages": []}\n', 'non-empty "messages" list'),
        ('{"prompt": "x"}\n', '"messages"'),
        ('{"messages": [{"role": "bot", "content": "x"}]}\n', "role"),
        (
            '{"messages": [{"role": "user", "content": "q"}, '
            '{"role": "assistant", "content": "a"}]}',
            "last message",
        ),
    ],
)
def test_bad_prompt_files_name_the_file(tmp_path: Path, content: str, needle: str) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(content)
    with pytest.raises(InputError, match=r"p\.jsonl") as info:
        load_prompts(str(f))
    assert needle in str(info.value)


def test_missing_prompt_file() -> None:
    with pytest.raises(InputError, match="nope.jsonl"):
        load_prompts("/nonexistent/nope.jsonl")


def test_render_plain_and_spec_validation() -> None:
    text = render_plain([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}])
    assert text == "System: S\n\nUser: Q\n\nAssistant:"
    with pytest.raises(InputError, match="runs must be >= 1"):
        BenchSpec(runs=0)
    with pytest.raises(InputError, match="aggregate"):
        BenchSpec(aggregate="max")
    # the setting's old name, in an older study file, means the same
    assert BenchSpec(objective="median").aggregate == "median"


@given(
    st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=30),
    st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_sse_roundtrip_any_content(pieces: list[str], comments: list[bool]) -> None:
    lines: list[str] = []
    for piece, comment in zip(pieces, comments, strict=False):
        if comment:
            lines += [": keep-alive", ""]
        lines += [_chunk(piece), ""]
    lines += ["data: [DONE]", ""]
    events = list(iter_sse_events(lines))
    assert events[-1].kind == "done"
    text = "".join(e.data["choices"][0]["delta"]["content"] for e in events[:-1] if e.data)
    assert text == "".join(pieces)
