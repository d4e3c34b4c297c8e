"""Which configurations are valid: a searched parameter (``ParamSpec``), SGLang's
speculative rules on the study's space (``SpeculativeRules``), and the check of one
user-facing configuration (a start_from entry) against both.
sweeper/search/space.py owns *how Optuna samples them*."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from sweeper.study.base import (
    ALGORITHM,
    DRAFT,
    ENV_PREFIX,
    SPECULATIVE_PREFIX,
    STEPS,
    TOPK,
    TRIPLE,
    coerce_float,
    fail,
    render_value,
    show,
    suggest,
)
from sweeper.study.flagtypes import read_as
from sweeper.study.sections import ServerSpec


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



def _spec_number(path: Path, name: str, space: dict[str, ParamSpec],
                 args: dict[str, Any]) -> SpecNumber:
    if name in space:
        p = space[name]
        for v in ([p.low, p.high] if p.kind != "choices" else list(p.choices)):
            if p.kind == "float" or isinstance(v, bool) or not isinstance(v, int) or v < 1:
                fail(path, f"space.{name}", f"{name} takes positive integers, got {show(v)}",
                      "use {int: [lo, hi]} or integer choices >= 1")
        if p.kind == "int" and p.low is not None and p.high is not None and \
                len(range(int(p.low), int(p.high) + 1, p.step or 1)) > 256:
            # every (topk, steps) pair becomes a branch: keep that enumerable
            fail(path, f"space.{name}.int", f"{p.describe()} is too wide for {name}",
                  "keep it within 256 values")
        return p
    if name in args:
        v = args[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            fail(path, f"server.args.{name}", f"expected a positive integer, got {show(v)}",
                  "fix the value")
        return v
    return None


def _where(name: str, space: Mapping[str, Any]) -> str:
    return f"space.{name}" if name in space else f"server.args.{name}"


def check_rules(path: Path, space: dict[str, ParamSpec], args: dict[str, Any]
                 ) -> SpeculativeRules:
    check_knobs(path, space, args)
    if _values(ALGORITHM, space, args) and all(
            str(a).upper() == "NGRAM" for a in _values(ALGORITHM, space, args)):
        # NGRAM: no draft model, SGLang sets topk = --speculative-ngram-max-bfs-breadth and
        # draft tokens 12 / steps = draft tokens // topk by default: the draft tokens (and
        # steps) are plain parameters, not EAGLE's triple
        if TOPK in space or TOPK in args:
            fail(path, _where(TOPK, space), "NGRAM ignores it: SGLang sets topk to "
                 f"{NGRAM_BREADTH}", f"search {NGRAM_BREADTH} instead")
        return SpeculativeRules(None, None, None)
    rules = SpeculativeRules(*(_spec_number(path, n, space, args) for n in TRIPLE))
    searched_spec = [n for n in space if n.startswith(SPECULATIVE_PREFIX)]
    if ALGORITHM in space and any(c is None or c is False
                                  for c in space[ALGORITHM].choices):
        fail(path, f"space.{ALGORITHM}", "a choice turns speculation off",
              "the baseline trial measures the server without speculation: drop that choice")
    if searched_spec and ALGORITHM not in args and ALGORITHM not in space:
        fail(path, f"space.{searched_spec[0]}", "a speculative parameter is searched but "
              f"server.args has no {ALGORITHM}", f"add server.args.{ALGORITHM} (e.g. EAGLE3)")
    given = [n for n in TRIPLE if getattr(rules, _attr(n)) is not None]
    if not given:
        return rules
    if rules.steps is None:
        fail(path, _where(given[0], space), f"{given[0]} is set without {STEPS}",
              f"SGLang needs steps too: add {STEPS} to space or server.args")
    if rules.topk is None:
        fail(path, _where(STEPS, space), f"{STEPS} is set without {TOPK}",
              f"SGLang needs all three or none: add {TOPK} to space or server.args")
    topks = rules.topk_values()
    if rules.draft is None and any(k > 1 for k in topks):
        fail(path, _where(TOPK, space), f"topk can exceed 1 but {DRAFT} is not set",
              f"add {DRAFT} to space or server.args (SGLang needs all three)")
    if isinstance(rules.draft, ParamSpec) and all(k == 1 for k in topks):
        fail(path, f"space.{DRAFT}", "searched, but topk is always 1, where SGLang sets "
              "draft tokens = steps + 1", f"remove {DRAFT} from space")
    for k in topks:
        if k > 1 and not rules.steps_values(k):
            s_max = max(rules.steps_values())
            fail(path, _where(TOPK, space),
                  f"topk={k} admits no {DRAFT} value with any {STEPS} (needs 2 <= draft "
                  f"tokens <= steps*topk+1, at most {s_max * k + 1} here)",
                  f"drop {k} from topk or lower {DRAFT}'s low")
    return rules


# SGLang 0.5.23's speculative algorithms (speculative/spec_info.py; NEXTN aliases EAGLE)
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO",
              "FROZEN_KV_MTP")
ATTN_DP = "attn-dp-size"
NGRAM_BREADTH = "speculative-ngram-max-bfs-breadth"
ATTENTION_MODES = ("prefill", "decode")
# --speculative-draft-model-quantization's choices (SGLang 0.5.23's QUANTIZATION_CHOICES)
QUANTIZATIONS = (
    "awq", "fp8", "mxfp8", "gptq", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf",
    "modelopt", "modelopt_fp8", "modelopt_fp4", "nvfp4_online", "modelopt_mixed",
    "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "w4afp8", "mxfp4", "auto-round",
    "auto-round-int8", "compressed-tensors", "modelslim", "mxfp_w4a8", "quark",
    "quark_int4fp8_moe", "quark_mxfp4", "mlx_q4", "mlx_q8", "unquant", "humming",
)
# flags 0.5.23 retired: what to write instead (its --config refuses a deprecated action)
RETIRED = {
    "disable-cuda-graph": "cuda-graph-backend-decode: disabled (and cuda-graph-backend-prefill)",
    "cuda-graph-max-bs": "cuda-graph-max-bs-decode (SGLang 0.5.23 finds --cuda-graph-max-bs "
                         "ambiguous)",
}


def _values(name: str, space: Mapping[str, ParamSpec], args: Mapping[str, Any]) -> list[Any]:
    """Every value a flag may take in this study: searched values, or the fixed one."""
    if name in space:
        p = space[name]
        return p.domain() if p.kind != "float" else [p.low, p.high]
    return [args[name]] if name in args else []


def check_knobs(path: Path, space: dict[str, ParamSpec], args: dict[str, Any]) -> None:
    """SGLang 0.5.23's rules for the knobs beyond the speculative triple."""
    for name, instead in RETIRED.items():
        if name in space or name in args:
            fail(path, _where(name, space), f"{name} is retired in SGLang 0.5.23",
                 f"use {instead}")
    algorithms = [str(a).upper() for a in _values(ALGORITHM, space, args) if a is not None]
    for a in algorithms:
        if a not in ALGORITHMS:
            fail(path, _where(ALGORITHM, space), f"unknown speculative algorithm {show(a)}",
                 suggest(a, list(ALGORITHMS)))
    if "NGRAM" in algorithms and len(set(algorithms)) > 1:
        fail(path, f"space.{ALGORITHM}", "NGRAM takes other flags than the draft-model "
             "algorithms (no draft, no topk)", "sweep NGRAM in a study of its own")
    ngram_flags = [n for n in [*space, *args] if n.startswith("speculative-ngram-")]
    if ngram_flags and "NGRAM" not in algorithms:
        fail(path, _where(ngram_flags[0], space), "only NGRAM reads it",
             f"set {ALGORITHM}: NGRAM or remove it")
    for name, allowed in (("speculative-attention-mode", ATTENTION_MODES),
                          ("speculative-draft-model-quantization", QUANTIZATIONS)):
        for v in _values(name, space, args):
            if v is not None and v not in allowed:
                fail(path, _where(name, space), f"{show(v)} is not a value SGLang takes",
                     suggest(str(v), list(allowed)))
    for name in ("cuda-graph-max-bs-decode", ATTN_DP, NGRAM_BREADTH):
        for v in _values(name, space, args):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                fail(path, _where(name, space), f"{name} takes positive integers, got "
                     f"{show(v)}", "fix the value")
    _check_dp_attention(path, space, args, algorithms)


# Real SGLang flags a near-miss test would take for a typo of tp-size
_SIZE_FLAGS = frozenset({"dp-size", "ep-size", "pp-size", "attn-dp-size", "moe-dp-size",
                         "moe-ep-size", "speculative-draft-tp-size"})


def _near_miss(name: str, space: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """The key of the study closest to ``name`` (a flag it does not set), if one is a near
    miss (``tp-sise``): a rule that would conclude from SGLang's default for ``name`` says
    that typo instead, which is what the user has to fix."""
    strays = [k for k in (*space, *args)
              if not k.startswith(ENV_PREFIX) and k != name and k not in _SIZE_FLAGS]
    close = difflib.get_close_matches(name, strays, n=1, cutoff=0.8)
    return close[0] if close else None


def _check_dp_attention(path: Path, space: dict[str, ParamSpec], args: dict[str, Any],
                        algorithms: list[str]) -> None:
    """--attn-dp-size D: D divides --tp-size (SGLang asserts it); not with data-parallel
    replicas, NGRAM or STANDALONE (SGLang refuses both). The deprecated spelling
    --enable-dp-attention --dp-size D follows the same rule."""
    # "4" is a tp-size too: SGLang's argparse reads it with int()
    written = _values("tp-size", space, args)
    tps = [n for n in (read_as(v, int) for v in written) if n is not None]
    if written and not tps:
        return  # a tp-size SGLang cannot read: study/flagtypes.py says so
    typo = None if tps else _near_miss("tp-size", space, args)
    unset = "" if tps else " (not set: SGLang's default)"
    tps = tps or [1]
    dps = [v for v in _values(ATTN_DP, space, args) if isinstance(v, int)]
    name = ATTN_DP
    if not dps and any(v is True for v in _values("enable-dp-attention", space, args)):
        dps = [v for v in _values("dp-size", space, args) if isinstance(v, int)]
        name = "dp-size"
    for d in dps:
        for t in tps:
            if t % d and typo:
                fail(path, _where(typo, space), f"no SGLang flag --{typo} (did you mean "
                     f"--tp-size?); without tp-size, SGLang's default 1 leaves no room for "
                     f"{name} {d}", "rename it tp-size")
            if t % d:
                fail(path, _where(name, space), f"{name} {d} does not divide tp-size {t}{unset}",
                     "SGLang asserts tp_size % attn_dp_size == 0: use divisors of tp-size")
    if any(d > 1 for d in dps):
        if name == ATTN_DP and any(isinstance(v, int) and v > 1
                                   for v in _values("dp-size", space, args)):
            fail(path, _where(ATTN_DP, space), "attention DP with dp-size > 1",
                 "SGLang refuses data-parallel replicas together with attention DP")
        refused = sorted({a for a in algorithms if a in ("NGRAM", "STANDALONE")})
        if refused:
            fail(path, _where(name, space), f"attention DP with {refused[0]}",
                 f"SGLang refuses DP attention for {refused[0]}: keep {name} at 1")


def _attr(flag: str) -> str:
    return {STEPS: "steps", TOPK: "topk", DRAFT: "draft"}[flag]



class StudySpec(Protocol):
    """What ``check_config`` reads of a study (study/spec.StudySpec): a protocol, so that
    spec.py imports this module and not the other way round."""

    @property
    def path(self) -> Path: ...
    @property
    def rules(self) -> SpeculativeRules: ...
    @property
    def space(self) -> Mapping[str, ParamSpec]: ...
    @property
    def server(self) -> ServerSpec: ...
    def fixed(self, name: str) -> Any: ...


def check_config(spec: StudySpec, params: dict[str, Any], key: str) -> dict[str, Any]:
    path, rules, space = spec.path, spec.rules, spec.space
    known = [*space, *spec.server.args, *(f"{ENV_PREFIX}{v}" for v in spec.server.env)]
    if rules.active:
        known.append(DRAFT)
    params = {k: (coerce_float(v) if k in space and space[k].kind == "float" else v)
              for k, v in params.items()}
    for pname, value in params.items():
        pkey = f"{key}.{pname}"
        if not isinstance(pname, str):
            fail(path, pkey, "parameter names must be strings", "quote it")
        if pname == DRAFT and rules.active:
            pass  # steps + 1 for topk 1, else the space within SGLang's cap: checked below
        elif pname in space:
            if not space[pname].contains(value):
                fail(path, pkey, f"{show(value, pkey)} is outside the space "
                      f"({space[pname].describe()})", "pick a value inside the space")
        elif pname in known:
            fixed = spec.fixed(pname)
            if render_value(value) != render_value(fixed):
                fail(path, pkey, f"{pname} is fixed to {show(fixed, pkey)}, "
                     f"not {show(value, pkey)}",
                      "drop it from the entry or search it in space")
        else:
            fail(path, pkey, f"{show(pname)} is neither searched nor fixed",
                  suggest(str(pname), known) if known else "remove it")
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
            fail(path, key, f"{flag} is missing", f"give {flag} too: an entry gives all "
                  "the speculative numbers the space searches, or none")
    assert topk is not None and steps is not None
    if topk == 1:
        derived = steps + 1
        if DRAFT in params and params[DRAFT] != derived:
            fail(path, f"{key}.{DRAFT}", f"with topk 1 SGLang sets draft tokens to "
                  f"steps + 1 = {derived}, not {show(params[DRAFT])}",
                  f"write {derived} or leave it out")
        out[DRAFT] = derived
        return out
    allowed = rules.draft_values(topk, steps)
    draft = params.get(DRAFT, spec.server.args.get(DRAFT) if DRAFT not in space else None)
    if draft is None:
        fail(path, key, f"{DRAFT} is missing", f"give {DRAFT} (topk > 1)")
    if draft not in allowed or isinstance(draft, bool):
        why = (f"topk={topk}, steps={steps} allow draft tokens in "
               f"{_span(allowed)} (2 <= d <= steps*topk+1 = {steps * topk + 1})"
               if allowed else f"topk={topk}, steps={steps} admit no draft-token value")
        fail(path, f"{key}.{DRAFT}" if DRAFT in params else key,
              f"{show(draft)} breaks SGLang's rule: {why}", "pick a valid combination")
    return out


def _span(values: list[int]) -> str:
    if values == list(range(values[0], values[-1] + 1)):
        return f"[{values[0]}, {values[-1]}]"
    return str(values)

