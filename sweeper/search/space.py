"""The search space: a StudySpec's parameters as Optuna distributions, with SGLang's
speculative rules built in, and sampled parameters -> LaunchConfig.

Why the names look the way they do
----------------------------------
SGLang's three speculative numbers depend on each other (docs/SGLANG.md):
topk == 1 forces draft tokens = steps + 1, and topk > 1 allows
2 <= draft tokens <= steps * topk + 1. Sampling them independently would waste restarts
on invalid trials and produce silent duplicates (SGLang rewrites the draft tokens of every
topk-1 trial to the same value). Optuna, on the other hand, requires a parameter name to
keep one distribution in every trial, and a sampler learns only across trials that share a
name: one draft-token parameter per (topk, steps) branch split what TPE learnt about draft
tokens a dozen ways (and the dashboard's importances with it). So:

* ``speculative-eagle-topk``: sampled first, from the study's choices or range.
* ``speculative-num-steps``: one shared name while every steps value admits a
  draft-token value for this topk; when only some do (a high draft-token ``low``),
  the topk branch gets ``speculative-num-steps|topk=K`` over the steps that do.
  Empty branches cannot occur: the study loader refuses a topk that admits no
  (steps, draft tokens) pair.
* draft tokens: never sampled for topk 1 (it is steps + 1); for topk > 1 one parameter
  for every branch, ``speculative-num-draft-tokens|position``, a float in [0, 1]: the
  position inside the values valid for that (topk, steps) -- ``[max(low, 2),
  min(high, S*K + 1)]``, or the study's choices inside it -- each value owning an equal
  share of [0, 1]. 0.9 means "verify nearly the whole tree" whatever the branch, which is
  what carries over from one branch to the next. A branch with a single valid value does
  not sample it.

Every other parameter (flags such as ``speculative-draft-tp-size``, ``env.NAME``) is a
plain suggest_int/float/categorical under its own name.

``suggest`` and ``effective`` return *effective* user-facing parameters: SGLang's dashed
flag names and ``env.NAME`` keys, after SGLang's rules (the derived draft tokens
included), so the configuration a trial records -- and launch, export, status, report and
dashboard show -- is the one the server runs, never the position. ``effective`` still
reads trials of studies made before the shared name (``...-tokens|topk=K,steps=S``), so
their results stay readable; resuming such a study is refused by the space signature.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from sweeper.launch import LaunchConfig
from sweeper.study import (
    DRAFT,
    ENV_PREFIX,
    STEPS,
    TOPK,
    TRIPLE,
    UNSET,
    ParamSpec,
    StudySpec,
    render_value,
)

BRANCH_SEP = "|"  # internal name = user name + "|" + qualifier, e.g. "...-steps|topk=2"
DRAFT_POSITION = f"{DRAFT}{BRANCH_SEP}position"  # draft tokens, shared by every branch
_POSITION_DIST = FloatDistribution(0.0, 1.0)

_MISSING = object()
# dimensions the preflight may take out of a sweep (remote/preflight.OPTIONAL_DIMENSIONS)
_OPTIONAL = frozenset({"speculative-draft-tp-size"})


def user_name(internal: str) -> str:
    """``speculative-num-draft-tokens|position`` -> ``speculative-num-draft-tokens``."""
    return internal.split(BRANCH_SEP, 1)[0]


@dataclass(frozen=True)
class Slot:
    """How one parameter is obtained in one branch: sampled under ``name`` from ``dist``,
    or fixed to ``value`` (a branch with one valid value, or server.args). With
    ``values``, the sampled number is a position in [0, 1] that picks one of them."""

    name: str | None
    dist: BaseDistribution | None
    value: Any = None
    values: tuple[Any, ...] | None = None
    legacy: str | None = None  # the per-branch name studies made before the shared one

    @property
    def sampled(self) -> bool:
        return bool(self.name and self.dist)

    def decode(self, internal: Any) -> Any:
        """The sampled number -> the parameter's value."""
        if self.values is None or internal is _MISSING:
            return internal
        n = len(self.values)
        return self.values[min(n - 1, max(0, int(float(internal) * n)))]

    def encode(self, value: Any) -> Any:
        """A parameter's value -> the sampled number (the middle of its share)."""
        if self.values is None:
            return value
        return (self.values.index(value) + 0.5) / len(self.values)

    def grid(self) -> list[Any]:
        """Sampled numbers that reach every value once (enumeration)."""
        if self.values is not None:
            return [self.encode(v) for v in self.values]
        return _domain(self.dist)


Picker = Callable[[Slot], Any]


def _domain(dist: BaseDistribution | None) -> list[Any]:
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        if dist.log:
            raise TypeError(f"cannot enumerate {dist!r} (a log range)")
        return list(range(dist.low, dist.high + 1, dist.step))
    raise TypeError(f"cannot enumerate {dist!r} (a float range)")


def _distribution(p: ParamSpec) -> BaseDistribution:
    if p.kind == "choices":
        return CategoricalDistribution(p.choices)
    if p.kind == "int":
        assert isinstance(p.low, int) and isinstance(p.high, int)
        return IntDistribution(p.low, p.high, log=p.log, step=p.step or 1)
    assert p.low is not None and p.high is not None
    return FloatDistribution(float(p.low), float(p.high), log=p.log)


def _restricted(p: ParamSpec, values: list[int], name: str) -> Slot:
    """``p`` narrowed to ``values`` (a contiguous run of its domain) under ``name``."""
    if len(values) == 1:
        return Slot(None, None, values[0])
    if p.kind == "choices":
        return Slot(name, CategoricalDistribution(values))
    return Slot(name, IntDistribution(values[0], values[-1], log=p.log, step=p.step or 1))


def _suggest(trial: optuna.trial.BaseTrial, name: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    raise TypeError(f"unsupported distribution {dist!r}")


class SearchSpace:
    """A study's search space: Optuna names and distributions on one side, effective
    SGLang configurations (LaunchConfig) on the other."""

    def __init__(self, spec: StudySpec) -> None:
        self.spec = spec
        rules = spec.rules
        space = spec.space
        args = spec.server.args
        # without the triple's rules (NGRAM), steps and draft tokens are plain flags
        self._plain: list[Slot] = [Slot(n, _distribution(p)) for n, p in space.items()
                                   if n not in TRIPLE or not rules.active]
        self._topk: Slot | None = None
        self._steps: dict[int, Slot] = {}
        self._draft: dict[tuple[int, int], Slot] = {}
        if not rules.active:
            return
        self._topk = (Slot(TOPK, _distribution(space[TOPK])) if TOPK in space
                      else Slot(None, None, args[TOPK]))
        all_steps = rules.steps_values()
        for k in rules.topk_values():
            steps = rules.steps_values(k)
            if STEPS not in space:
                self._steps[k] = Slot(None, None, args[STEPS])
            elif steps == all_steps:
                self._steps[k] = Slot(STEPS, _distribution(space[STEPS]))
            else:
                self._steps[k] = _restricted(space[STEPS], steps, f"{STEPS}{BRANCH_SEP}topk={k}")
            if k == 1:
                continue
            for s in steps:
                drafts = rules.draft_values(k, s)
                if DRAFT not in space:
                    self._draft[(k, s)] = Slot(None, None, args[DRAFT])
                elif len(drafts) == 1:
                    self._draft[(k, s)] = Slot(None, None, drafts[0])
                else:
                    self._draft[(k, s)] = Slot(
                        DRAFT_POSITION, _POSITION_DIST, values=tuple(drafts),
                        legacy=f"{DRAFT}{BRANCH_SEP}topk={k},steps={s}")

    # --- the walk shared by suggest / effective / internal_params -----------------
    def _walk(self, pick: Picker) -> dict[str, Any]:
        """Pick every parameter a trial uses, branch by branch; the effective dict.
        ``pick(slot)`` returns the sampled number of a sampled slot (or _MISSING)."""
        def get(slot: Slot) -> Any:
            return slot.decode(pick(slot)) if slot.sampled else slot.value

        space = self.spec.space
        eff: dict[str, Any] = {}
        k: Any
        s: Any
        k = get(self._topk) if self._topk is not None else _MISSING
        s = get(self._steps[k]) if k is not _MISSING else _MISSING
        # _MISSING only for a start_from entry that leaves the speculative numbers out
        if k is not _MISSING and s is not _MISSING:
            if TOPK in space:
                eff[TOPK] = k
            if STEPS in space:
                eff[STEPS] = s
            if k == 1:
                eff[DRAFT] = s + 1  # what SGLang would force; say it on the command line
            else:
                d = get(self._draft[(k, s)])
                if DRAFT in space:
                    eff[DRAFT] = d
        for slot in self._plain:
            v = get(slot)
            if v is not _MISSING:
                eff[str(slot.name)] = v
        # The study's order first (readable commands), the derived draft tokens last.
        order = [n for n in space if n in eff] + [n for n in eff if n not in space]
        return {n: eff[n] for n in order}

    def suggest(self, trial: optuna.trial.BaseTrial) -> dict[str, Any]:
        """Ask ``trial`` for a configuration; returns the effective parameters."""
        def pick(slot: Slot) -> Any:
            assert slot.dist is not None  # only sampled slots are picked
            return _suggest(trial, str(slot.name), slot.dist)
        return self._walk(pick)

    def effective(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Effective parameters of a finished trial's ``trial.params``."""
        def pick(slot: Slot) -> Any:
            if slot.name is not None and slot.name in params:
                return params[slot.name]
            if slot.legacy is not None and slot.legacy in params:
                return slot.encode(params[slot.legacy])  # a trial of the per-branch space
            if slot in self._plain and user_name(str(slot.name)) in _OPTIONAL:
                # the preflight took this dimension out: the host's build lacks its flag
                return _MISSING
            raise KeyError(f"trial parameters lack {slot.name!r}: was the study's space "
                           "changed after this trial ran?")
        return self._walk(pick)

    def internal_params(self, user_params: Mapping[str, Any]) -> dict[str, Any]:
        """A start_from entry (user-facing names) -> Optuna params for
        ``study.enqueue_trial``. Parameters the entry omits are left to the sampler.
        StudyError when the entry is outside the space or breaks SGLang's rules."""
        checked = self.spec.check_config(user_params)
        internal: dict[str, Any] = {}

        def pick(slot: Slot) -> Any:
            user = user_name(str(slot.name))
            if user not in checked:
                # check_config allows this for plain parameters, and for the speculative
                # numbers only all together (the walk then skips them)
                return _MISSING
            internal[str(slot.name)] = slot.encode(checked[user])
            return internal[str(slot.name)]

        self._walk(pick)
        return internal

    def configurations(self, every_plain: bool = True
                       ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """Every (internal params, effective params) the space can produce, one per
        distinct configuration; plain parameters at every value, or (``every_plain``
        False) at their first. TypeError for a float or log range (not enumerable)."""
        stack: list[list[int]] = [[]]
        while stack:
            prefix = stack.pop()
            depth = 0
            internal: dict[str, Any] = {}

            def pick(slot: Slot, prefix: list[int] = prefix,
                     internal: dict[str, Any] = internal) -> Any:
                nonlocal depth
                if not every_plain and slot in self._plain:
                    first = getattr(slot.dist, "low", None)
                    if isinstance(slot.dist, CategoricalDistribution):
                        first = slot.dist.choices[0]
                    internal[str(slot.name)] = first
                    return first
                grid = slot.grid()
                if depth == len(prefix):
                    stack.extend(prefix + [j] for j in range(len(grid) - 1, 0, -1))
                    prefix.append(0)
                v = grid[prefix[depth]]
                depth += 1
                internal[str(slot.name)] = v
                return v

            eff = self._walk(pick)
            yield internal, eff

    def distributions(self) -> dict[str, BaseDistribution]:
        """Every internal parameter name a trial may use, with its distribution."""
        out: dict[str, BaseDistribution] = {}
        slots = [self._topk, *self._steps.values(), *self._draft.values(), *self._plain]
        for slot in slots:
            if slot is not None and slot.sampled:
                assert slot.name is not None and slot.dist is not None
                out[slot.name] = slot.dist
        return out

    def emitted_flags(self) -> set[str]:
        """Every SGLang flag (no ``--``) a trial or the baseline may pass."""
        flags = set(self.spec.server.args) | {"port", "host"}
        flags |= {n for n in self.spec.space if not n.startswith(ENV_PREFIX)}
        if self._topk is not None:
            flags.add(DRAFT)
        return flags

    # --- configurations ----------------------------------------------------------
    def launch_config(self, effective: Mapping[str, Any]) -> LaunchConfig:
        """server.args and server.env, overridden by the effective parameters; an env
        parameter whose value is ``unset`` is left out of the environment."""
        server = self.spec.server
        args = dict(server.args)
        env = dict(server.env)
        for name, value in effective.items():
            if name.startswith(ENV_PREFIX):
                if value != UNSET:
                    env[name[len(ENV_PREFIX):]] = render_value(value)
            elif value is None:
                args.pop(name, None)  # a null choice leaves the flag out (SGLang's default)
            else:
                args[name] = value
        args["port"] = server.port
        args["host"] = server.host
        return LaunchConfig(launcher=server.launcher, args=args, env=env)

    def baseline_config(self) -> LaunchConfig:
        """The same server without speculation: server.args minus every speculative flag."""
        return self.launch_config({}).without_speculation()
