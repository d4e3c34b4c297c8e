"""The prompt set: formats, the one stratified order every measurement walks, and a bad
file refused before anything starts."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from sweeper.errors import InputError
from sweeper.measure.prompts import (
    coverage_note,
    load_prompts,
    stratified_order,
    synthetic_prompts,
)
from sweeper.study import BenchSpec

from .conftest import run_cli
from .test_cli_errors import assert_one_line_error


def _prefix_balanced(cats: list[str | None], order: list[int]) -> None:
    total = Counter(cats)
    seen: Counter[str | None] = Counter()
    for t, i in enumerate(order, 1):
        seen[cats[i]] += 1
        for cat, n in total.items():
            # every prefix holds each category within one prompt of its share
            assert abs(seen[cat] - t * n / len(cats)) < 1.0 + 1e-9, (t, cat, seen)


def test_builtin_set_has_categories_and_a_representative_first_pass() -> None:
    ps = load_prompts()
    assert len(ps) == 24 and all(ps.categories)
    assert sorted(ps.sequence) == list(range(len(ps)))
    _prefix_balanced(list(ps.categories), list(ps.sequence))
    first = Counter(ps.category(i) for i in ps.sequence[:10])
    assert first["code"] == 2 and first["math"] == 2 and len(first) >= 7


@pytest.mark.parametrize("seed", range(5))
def test_stratified_order_every_prefix_in_proportion(seed: int) -> None:
    rng = random.Random(seed)
    cats: list[str | None] = [rng.choice("abcde") for _ in range(rng.randint(5, 60))]
    order = stratified_order(cats, seed)
    assert sorted(order) == list(range(len(cats)))
    _prefix_balanced(cats, order)


def _write(path: Path, items: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in items))
    return path


def _items(n: int) -> list[dict]:
    return [{"messages": [{"role": "user", "content": f"question {i}"}],
             "category": "ab"[i % 2]} for i in range(n)]


def test_the_order_is_a_function_of_the_contents_not_of_the_file_order(tmp_path: Path
                                                                        ) -> None:
    items = _items(12)
    a = load_prompts(str(_write(tmp_path / "a.jsonl", items)))
    shuffled = list(items)
    random.Random(1).shuffle(shuffled)
    b = load_prompts(str(_write(tmp_path / "b.jsonl", shuffled)))
    assert a.sequence != b.sequence  # indices differ: the files differ in order
    assert [a.prompts[i] for i in a.sequence] == [b.prompts[i] for i in b.sequence]


def test_rounds_continue_through_the_sequence_and_wrap() -> None:
    ps = load_prompts()
    seq = list(ps.sequence)
    assert [ps.round_prompts(r, 1)[0] for r in range(24)] == seq
    assert ps.round_prompts(10, 1) == [seq[10]]  # an extension continues, not restarts
    assert ps.round_prompts(24, 1) == [seq[0]]
    assert ps.round_prompts(1, 4) == seq[4:8]
    assert ps.round_prompts(6, 4) == seq[:4]


def test_sharegpt_and_mt_bench_formats(tmp_path: Path) -> None:
    share = [{"id": "x1", "conversations": [
        {"from": "system", "value": "be brief"}, {"from": "human", "value": "hi"},
        {"from": "gpt", "value": "hello"}, {"from": "human", "value": "and?"},
        {"from": "gpt", "value": "answer to drop"}]}]
    ps = load_prompts(str(_write(tmp_path / "s.jsonl", share)))
    assert [m["role"] for m in ps.prompts[0]] == ["system", "user", "assistant", "user"]
    (tmp_path / "s.json").write_text(json.dumps(share))  # ShareGPT's dumps: one JSON array
    assert load_prompts(str(tmp_path / "s.json")).prompts == ps.prompts
    mt = [{"question_id": 81, "category": "writing", "turns": ["Write a blog post", "Now"]}]
    ps = load_prompts(str(_write(tmp_path / "mt.jsonl", mt)))
    assert ps.prompts == [[{"role": "user", "content": "Write a blog post"}]]
    assert ps.ids == ["81"] and ps.categories == ["writing"]


@pytest.mark.parametrize("line, needle", [
    ('{"messages": "oops"}', "messages"),
    ("not json", "not valid JSON"),
    ('{"conversations": [{"from": "gpt", "value": "only an answer"}]}', "user"),
    ('{"turns": []}', "turns"),
    ('{"messages": [{"role": "user", "content": "x"}], "category": 3}', "category"),
])
def test_a_bad_line_is_named_with_its_file_and_line(tmp_path: Path, line: str,
                                                    needle: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "fine"}]}\n' + line + "\n")
    with pytest.raises(InputError, match=needle) as exc:
        load_prompts(str(path))
    assert f"{path}:2" in str(exc.value)


def test_synthetic_prompts_of_a_given_length() -> None:
    ps = load_prompts("synthetic", input_tokens=300)
    assert len(ps) >= 8 and len(set(map(str, ps.prompts))) == len(ps)
    for p in ps.prompts:
        # 300 tokens: a short header of ~8 tokens (5 words), then one-token words
        assert len(p[0]["content"].split()) == 300 - 8 + 5
    assert synthetic_prompts(300).hash == ps.hash != synthetic_prompts(301).hash
    with pytest.raises(InputError, match="input_tokens"):
        BenchSpec(prompts="builtin", input_tokens=300)
    with pytest.raises(InputError, match="warmup"):
        BenchSpec(temperature=0.7, warmup=0)


def test_coverage_note() -> None:
    ps = load_prompts()
    assert coverage_note(ps, 24, 1) is None and coverage_note(ps, 6, 4) is None
    note = coverage_note(ps, 10, 1)
    assert note is not None and "10 of the 24" in note and "runs: 24" in note
    assert "runs: 6" in (coverage_note(ps, 7, 4) or "")


def _study_with_prompts(make_study, value: str):  # noqa: ANN001, ANN202
    return make_study(benchmark={"prompts": value})


def test_validate_and_optimize_refuse_a_bad_prompts_file_before_any_start(
        make_study, tmp_path: Path) -> None:  # noqa: ANN001
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "fine"}]}\n'
                   '{"messages": "oops"}\n')
    path = _study_with_prompts(make_study, str(bad))
    assert_one_line_error(run_cli("validate", "--study", str(path)), f"{bad}:2",
                          "benchmark.prompts")
    proc = run_cli("optimize", "--study", str(path), "--trials", "1")
    assert_one_line_error(proc, f"{bad}:2", str(path))
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "host").exists()
    missing = tmp_path / "nope.jsonl"
    path = _study_with_prompts(make_study, str(missing))
    proc = run_cli("optimize", "--study", str(path), "--trials", "1")
    assert_one_line_error(proc, str(missing), "cannot read")
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "host").exists()


def test_validate_shows_the_prompts_and_warns_on_uneven_coverage(make_study) -> None:  # noqa: ANN001
    path = make_study(benchmark={"runs": 10})
    proc = run_cli("validate", "--study", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "prompts: builtin, 24 (8 categories" in proc.stdout
    assert "warning:" in proc.stderr and "10 of the 24" in proc.stderr
    path = make_study(benchmark={"runs": 24})
    proc = run_cli("validate", "--study", str(path))
    assert proc.returncode == 0 and "warning" not in proc.stderr
