"""True optimum of each simulated landscape: enumerate a study's space against a profile.

ALL FIGURES COME FROM THE SIMULATED SGLang SERVER's performance model (sweeper.sim, a test
double): ``expected_throughput`` per configuration, noise-free. They say what a search on
that landscape should find, never how real hardware performs.

The space is a study's ``space:`` (default studies/demo.yaml: steps 1-6, topk {1,2,4}, draft
tokens 2-16, draft TP {1,4}, NCCL_ALGO, NCCL_PROTO) with the study's fixed ``server.args``
and ``server.env``, under SGLang's rules as the sweeper applies them: topk 1 verifies
steps + 1 tokens whatever was asked (duplicates dropped), a tree verifies at most
steps x topk + 1, ``unset`` leaves a variable out. ``--param`` replaces or adds a dimension.

    python bench/landscapes/optima.py                       # every landscape + built-ins
    python bench/landscapes/optima.py bench/landscapes/deep-chain-h100.yaml
    python bench/landscapes/optima.py --param speculative-num-steps=1-10 --concurrency 8
    python bench/landscapes/optima.py --markdown            # the README's table
    python bench/landscapes/optima.py --structural          # without per-config residuals
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sweeper.sim import Expectation, Profile, expected_throughput, load_profile  # noqa: E402

HERE = Path(__file__).resolve().parent
DEFAULT_STUDY = ROOT / "studies" / "demo.yaml"
KIMI_STUDY = ROOT / "studies" / "eagle3-kimi.yaml"  # TP8: the model does not fit at TP4


def parse_values(spec: Any) -> list[Any]:
    """A study dimension ({int: [lo, hi]} / {choices: [...]}) or CLI text (lo-hi, a,b,c)."""
    if isinstance(spec, dict):
        if "int" in spec:
            lo, hi = spec["int"]
            return list(range(int(lo), int(hi) + 1))
        if "choices" in spec:
            return list(spec["choices"])
        raise SystemExit(f"unsupported space dimension {spec!r} (int or choices)")
    text = str(spec)
    if "-" in text and "," not in text and text.replace("-", "").isdigit():
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(v) if v.isdigit() else v for v in text.split(",")]


@dataclass
class Space:
    fixed_args: dict[str, Any]
    fixed_env: dict[str, str]
    dims: dict[str, list[Any]]

    def points(self) -> list[tuple[dict[str, Any], dict[str, str]]]:
        names = list(self.dims)
        seen: set[tuple[Any, ...]] = set()
        out = []
        for values in itertools.product(*(self.dims[n] for n in names)):
            args, env = dict(self.fixed_args), dict(self.fixed_env)
            for name, value in zip(names, values, strict=True):
                if name.startswith("env."):
                    if str(value) != "unset":
                        env[name[4:]] = str(value)
                else:
                    args[name] = value
            steps = args.get("speculative-num-steps")
            topk = args.get("speculative-eagle-topk")
            if steps is not None and topk is not None:
                if int(topk) == 1:
                    args["speculative-num-draft-tokens"] = int(steps) + 1  # SGLang's rule
                elif int(args.get("speculative-num-draft-tokens", 0)) > int(steps) * int(topk) + 1:
                    continue  # more tokens than the tree has nodes: the sweeper skips it
            key = (tuple(sorted(args.items())), tuple(sorted(env.items())))
            if key not in seen:
                seen.add(key)
                out.append((args, env))
        return out


def load_space(study: Path, params: list[str]) -> Space:
    data = yaml.safe_load(study.read_text())
    server = data.get("server") or {}
    fixed_args = {k: v for k, v in (server.get("args") or {}).items()
                  if k not in ("model-path", "speculative-draft-model-path")}
    dims = {str(k): parse_values(v) for k, v in (data.get("space") or {}).items()}
    for item in params:
        name, _, values = item.partition("=")
        dims[name] = parse_values(values)
    return Space(fixed_args, {k: str(v) for k, v in (server.get("env") or {}).items()}, dims)


@dataclass
class Optimum:
    profile: str
    points: int
    failures: dict[str, int]
    best: Expectation
    args: dict[str, Any]
    env: dict[str, str]
    near: int  # configurations within 1% of the optimum (the optimum included)
    baseline: float

    @property
    def tok_s(self) -> float:
        return float(self.best.total_tok_s or 0.0)


def optimum(profile: str | Profile, space: Space, concurrency: int) -> Optimum:
    scored = []
    failures: dict[str, int] = {}
    for args, env in space.points():
        e = expected_throughput(profile, args, env, concurrency=concurrency)
        if e.failure:
            failures[e.failure] = failures.get(e.failure, 0) + 1
        else:
            scored.append((e, args, env))
    if not scored:
        raise SystemExit(f"{profile}: every configuration of the space fails ({failures})")
    best, args, env = max(scored, key=lambda r: r[0].total_tok_s or 0.0)
    top = best.total_tok_s or 0.0
    near = sum(1 for e, _, _ in scored if (e.total_tok_s or 0.0) >= 0.99 * top)
    # the sweeper's baseline: the same server without any speculative flag
    plain = {k: v for k, v in space.fixed_args.items() if not k.startswith("speculative-")}
    base = expected_throughput(profile, plain, space.fixed_env, concurrency=concurrency)
    label = load_profile(profile).name
    return Optimum(label, len(scored) + sum(failures.values()), failures, best, args, env,
                   near, float(base.total_tok_s or 0.0))


def describe(o: Optimum) -> str:
    a = o.args
    parts = [f"steps {a.get('speculative-num-steps')}", f"topk {a.get('speculative-eagle-topk')}",
             f"draft tokens {a.get('speculative-num-draft-tokens')}"]
    if "speculative-draft-tp-size" in a:
        parts.append(f"draft TP {a['speculative-draft-tp-size']}")
    parts += [f"{k}={v}" for k, v in sorted(o.env.items())] or ["NCCL defaults"]
    return ", ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="*",
                    help="profile names or YAML paths (default: every bench/landscapes/*.yaml "
                         "and the two built-ins)")
    ap.add_argument("--study", type=Path, default=None,
                    help="default: studies/demo.yaml (eagle3-kimi.yaml for the kimi profile)")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUES",
                    help="replace/add a dimension: lo-hi or a,b,c (env.NAME for variables)")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--markdown", action="store_true", help="one table row per profile")
    ap.add_argument("--structural", action="store_true",
                    help="drop noise.config_residual_sd: the optimum of the formulas alone")
    ns = ap.parse_args()
    profiles = ns.profiles or [*sorted(str(p) for p in HERE.glob("*.yaml")),
                               "demo", "kimi-k2.5-8xh200"]
    print("SIMULATED ground truth (sweeper.sim test double), concurrency "
          f"{ns.concurrency}{'; ' + ', '.join(ns.param) if ns.param else ''}")
    if ns.markdown:
        print("| landscape | optimum | tok/s | vs baseline | fail | within 1% |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name in profiles:
        profile = load_profile(name)
        if ns.structural:
            profile = dataclasses.replace(
                profile, noise=dataclasses.replace(profile.noise, config_residual_sd=0.0))
        label = profile.name
        study = ns.study or (KIMI_STUDY if label == "kimi-k2.5-8xh200" else DEFAULT_STUDY)
        o = optimum(profile, load_space(study, ns.param), ns.concurrency)
        failed = sum(o.failures.values())
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(o.failures.items())) or "none"
        if ns.markdown:
            print(f"| {label} | {describe(o)} | {o.tok_s:.1f} | x{o.tok_s / o.baseline:.2f} | "
                  f"{failed}/{o.points} | {o.near} |")
            continue
        print(f"\n{label} ({name}; space of {study.name})")
        print(f"  optimum   {describe(o)}: {o.tok_s:.1f} tok/s "
              f"(accept length {o.best.accept_length or 1.0:.2f}); no speculation "
              f"{o.baseline:.1f} (x{o.tok_s / o.baseline:.2f})")
        print(f"  failing   {failed} of {o.points} configurations ({kinds})")
        print(f"  within 1% {o.near} configuration(s)")


if __name__ == "__main__":
    main()
