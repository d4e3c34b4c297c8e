"""The search space: a StudySpec's parameters as Optuna distributions, with SGLang's
speculative rules built in, and sampled parameters -> LaunchConfig.

Why the names look the way they do
----------------------------------
SGLang's three speculative numbers depend on each other (docs/SGLANG.md):
topk == 1 forces draft tokens = steps + 1, and topk > 1 allows
2 <= draft tokens <= steps * topk + 1. Sampling them independently would waste restarts
on invalid trials and produce silent duplicates (SGLang rewrites the draft tokens of every
topk-1 trial to the same value). Optuna, on the other hand, requires a parameter name to
keep one distribution in every trial. So each *branch* gets its own name, with the
range fixed by that branch:

* ``speculative-eagle-topk``: sampled first, from the study's choices or range.
* ``speculative-num-steps``: one shared name while every steps value admits a
  draft-token value for this topk; when only some do (a high draft-token ``low``),
  the topk branch gets ``speculative-num-steps|topk=K`` over the steps that do.
  Empty branches cannot occur: the study loader refuses a topk that admits no
  (steps, draft tokens) pair.
* ``speculative-num-draft-tokens``: never sampled for topk 1 (it is steps + 1); for
  topk > 1, ``speculative-num-draft-tokens|topk=K,steps=S`` over
  ``[max(low, 2), min(high, S*K + 1)]`` (or the choices inside it). A branch with a
  single valid value is not sampled at all.

Every other parameter (flags such as ``speculative-draft-tp-size``, ``env.NAME``) is a
plain suggest_int/float/categorical under its own name. ``TPESampler(multivariate=True,
group=True)`` learns each branch's group separately.

``suggest`` and ``effective`` return *effective* user-facing parameters: SGLang's dashed
flag names and ``env.NAME`` keys, after SGLang's rules (the derived draft tokens of a
topk-1 trial included), so the configuration a trial records is the one the server runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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

BRANCH_SEP = "|"  # internal name = user name + "|" + branch, e.g. "...-tokens|topk=2,steps=3"

_MISSING = object()
Picker = Callable[[str, BaseDistribution], Any]


def user_name(internal: str) -> str:
    """``speculative-num-draft-tokens|topk=2,steps=3`` -> ``speculative-num-draft-tokens``."""
    return internal.split(BRANCH_SEP, 1)[0]


@dataclass(frozen=True)
class _Slot:
    """How one speculative number is obtained in one branch: sampled under ``name`` from
    ``dist``, or fixed to ``value`` (a branch with one valid value, or server.args)."""

    name: str | None
    dist: BaseDistribution | None
    value: Any = None

    def get(self, pick: Picker) -> Any:
        return pick(self.name, self.dist) if self.name and self.dist else self.value


def _distribution(p: ParamSpec) -> BaseDistribution:
    if p.kind == "choices":
        return CategoricalDistribution(p.choices)
    if p.kind == "int":
        assert isinstance(p.low, int) and isinstance(p.high, int)
        return IntDistribution(p.low, p.high, log=p.log, step=p.step or 1)
    assert p.low is not None and p.high is not None
    return FloatDistribution(float(p.low), float(p.high), log=p.log)


def _restricted(p: ParamSpec, values: list[int], name: str) -> _Slot:
    """``p`` narrowed to ``values`` (a contiguous run of its domain) under ``name``."""
    if len(values) == 1:
        return _Slot(None, None, values[0])
    if p.kind == "choices":
        return _Slot(name, CategoricalDistribution(values))
    return _Slot(name, IntDistribution(values[0], values[-1], log=p.log, step=p.step or 1))


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
        self._plain: dict[str, BaseDistribution] = {
            n: _distribution(p) for n, p in space.items() if n not in TRIPLE}
        self._topk: _Slot | None = None
        self._steps: dict[int, _Slot] = {}
        self._draft: dict[tuple[int, int], _Slot] = {}
        if not rules.active:
            return
        self._topk = (_Slot(TOPK, _distribution(space[TOPK])) if TOPK in space
                      else _Slot(None, None, args[TOPK]))
        all_steps = rules.steps_values()
        for k in rules.topk_values():
            steps = rules.steps_values(k)
            if STEPS not in space:
                self._steps[k] = _Slot(None, None, args[STEPS])
            elif steps == all_steps:
                self._steps[k] = _Slot(STEPS, _distribution(space[STEPS]))
            else:
                self._steps[k] = _restricted(space[STEPS], steps, f"{STEPS}{BRANCH_SEP}topk={k}")
            if k == 1:
                continue
            for s in steps:
                drafts = rules.draft_values(k, s)
                if DRAFT in space:
                    self._draft[(k, s)] = _restricted(
                        space[DRAFT], drafts, f"{DRAFT}{BRANCH_SEP}topk={k},steps={s}")
                else:
                    self._draft[(k, s)] = _Slot(None, None, args[DRAFT])

    # --- the walk shared by suggest / effective / internal_params -----------------
    def _walk(self, pick: Picker) -> dict[str, Any]:
        """Pick every parameter a trial uses, branch by branch; the effective dict."""
        space = self.spec.space
        eff: dict[str, Any] = {}
        k = self._topk.get(pick) if self._topk is not None else _MISSING
        s = self._steps[k].get(pick) if k is not _MISSING else _MISSING
        # _MISSING only for a start_from entry that leaves the speculative numbers out
        if k is not _MISSING and s is not _MISSING:
            if TOPK in space:
                eff[TOPK] = k
            if STEPS in space:
                eff[STEPS] = s
            if k == 1:
                eff[DRAFT] = s + 1  # what SGLang would force; say it on the command line
            else:
                d = self._draft[(k, s)].get(pick)
                if DRAFT in space:
                    eff[DRAFT] = d
        for name, dist in self._plain.items():
            v = pick(name, dist)
            if v is not _MISSING:
                eff[name] = v
        # The study's order first (readable commands), the derived draft tokens last.
        order = [n for n in space if n in eff] + [n for n in eff if n not in space]
        return {n: eff[n] for n in order}

    def suggest(self, trial: optuna.trial.BaseTrial) -> dict[str, Any]:
        """Ask ``trial`` for a configuration; returns the effective parameters."""
        return self._walk(lambda name, dist: _suggest(trial, name, dist))

    def effective(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Effective parameters of a finished trial's ``trial.params``."""
        def pick(name: str, dist: BaseDistribution) -> Any:
            if name not in params:
                raise KeyError(f"trial parameters lack {name!r}: was the study's space "
                               "changed after this trial ran?")
            return params[name]
        return self._walk(pick)

    def internal_params(self, user_params: Mapping[str, Any]) -> dict[str, Any]:
        """A start_from entry (user-facing names) -> Optuna params for
        ``study.enqueue_trial``. Parameters the entry omits are left to the sampler.
        StudyError when the entry is outside the space or breaks SGLang's rules."""
        checked = self.spec.check_config(user_params)
        internal: dict[str, Any] = {}

        def pick(name: str, dist: BaseDistribution) -> Any:
            user = user_name(name)
            if user not in checked:
                # check_config allows this for plain parameters, and for the speculative
                # numbers only all together (the walk then skips them)
                return _MISSING
            internal[name] = checked[user]
            return checked[user]

        self._walk(pick)
        return internal

    def distributions(self) -> dict[str, BaseDistribution]:
        """Every internal parameter name a trial may use, with its distribution."""
        out: dict[str, BaseDistribution] = {}
        slots = [self._topk, *self._steps.values(), *self._draft.values()]
        for slot in slots:
            if slot is not None and slot.name and slot.dist:
                out[slot.name] = slot.dist
        out.update(self._plain)
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
            else:
                args[name] = value
        args["port"] = server.port
        args["host"] = server.host
        return LaunchConfig(launcher=server.launcher, args=args, env=env)

    def baseline_config(self) -> LaunchConfig:
        """The same server without speculation: server.args minus every speculative flag."""
        return self.launch_config({}).without_speculation()
