"""Fuzzing the study loader (issue 16): whatever the YAML document, loading it gives a
StudySpec or one StudyError line, never another exception, never more than one short
line, and within bounded memory (tracemalloc's peak, measured per document).

Three generators: valid studies with one value replaced by hostile data, raw text made
of YAML's own syntax (anchors, aliases, merge keys, tags, flow and block collections),
and alias chains of random fan-out and depth. Derandomized, so a run is reproducible.
"""

from __future__ import annotations

import copy
import tracemalloc
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sweeper.errors import StudyError
from sweeper.study import StudySpec, load_study

from .test_study import BASE

PEAK_BYTES = 50 * 1024 * 1024
FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])

HOSTILE_TEXT = st.sampled_from([
    "", " ", "\n", "\x1b[2J", "\r\nerror: fake", "\u202e", "\x00", "a" * 20_000, "~",
    "$(touch X)", "; touch X", "`id`", "{python}", "%s%n", "null", "1e-3", ".nan",
    "2024-13-45", "hf_notthesecret", "CHANGE-ME", "-oProxyCommand=x", "é" * 50,
])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10 ** 40),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30), HOSTILE_TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=12),
                                                           HOSTILE_TEXT), inner, max_size=4)),
    max_leaves=12)


def paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += paths(v, (*prefix, i))
    return out


SECRET = "hf_fuzzsecret_7781"


def check(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    tracemalloc.start()
    try:
        try:
            spec = load_study(str(path))
        except StudyError as exc:
            message = str(exc)
            assert message.isprintable() and len(message) <= 700, repr(message[:300])
            assert SECRET not in message  # it only ever sits at server.env.HF_TOKEN
        else:
            assert isinstance(spec, StudySpec)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"peak {peak / 1e6:.0f} MB"


@FUZZ
@given(st.data())
def test_a_valid_study_with_one_value_replaced(tmp_path: Path, data: st.DataObject) -> None:
    study = copy.deepcopy(BASE)
    study["server"]["env"] = {"HF_TOKEN": SECRET}
    where = data.draw(st.sampled_from(paths(study)[1:]))
    value = data.draw(VALUES)
    node = study
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = value
    try:
        text = yaml.safe_dump(study, allow_unicode=True)
    except yaml.YAMLError:
        return  # a value PyYAML cannot write is not a document
    check(tmp_path, text)


SYNTAX = st.sampled_from([
    "hosts: [{ssh: local}]\n", "server:\n", "  env:\n", "    HF_TOKEN: ", "space:\n",
    "  tp-size: {choices: ", "&a ", "&b ", "*a", "*b", "<<: *a\n", "[", "]", "{", "}",
    ", ", ": ", "- ", "\n", "  ", "? ", "!!str ", "!!int ", "!!binary ", "!!set ",
    "!!python/object:os.system ", "!!timestamp ", "|\n  ", ">-\n  ", "'", '"', "#",
    "---\n", "...\n", "%YAML 1.1\n", "x", "1", "2024-13-45", ".inf", "~",
    "hf_notthesecret", "\t", "\x1b", "\u202e",
])


@FUZZ
@given(st.lists(SYNTAX, max_size=60))
def test_yaml_syntax_soup(tmp_path: Path, tokens: list[str]) -> None:
    check(tmp_path, "".join(tokens))


@FUZZ
@given(st.integers(1, 30), st.integers(1, 12), st.sampled_from(["list", "merge", "key"]),
       st.sampled_from(["server.env.FOO", "space.tp-size.choices", "start_from"]))
def test_alias_chains(tmp_path: Path, fanout: int, depth: int, kind: str, where: str) -> None:
    lines = ["x-anchors:"]
    if kind == "merge":
        lines.append("  - &n0 {k0: 0, k1: 1}")
        for d in range(1, depth + 1):
            lines.append(f"  - &n{d} {{<<: [{', '.join([f'*n{d - 1}'] * fanout)}]}}")
        use = f"{{<<: *n{depth}}}"
    else:
        lines.append("  - &n0 [x, x]")
        for d in range(1, depth + 1):
            lines.append(f"  - &n{d} [{', '.join([f'*n{d - 1}'] * fanout)}]")
        use = f"{{? *n{depth} : 1}}" if kind == "key" else f"*n{depth}"
    body = yaml.safe_dump(BASE)
    if where == "server.env.FOO":
        body += f"\nserver_extra: {use}\n".replace("server_extra", "x-use")
    elif where == "start_from":
        body = body.replace("start_from:", f"start_from:\n- {{tp-size: {use}}}")
    else:
        body += f"\nx-more: {{choices: {use}}}\n"
    check(tmp_path, "\n".join(lines) + "\n" + body)
