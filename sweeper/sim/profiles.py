"""Hardware/model profiles for the simulated SGLang server: YAML files -> typed Profile.

A profile holds every coefficient of the performance model (sweeper.sim.model), so a
new "machine" is a new YAML file, not new code. Built-in profiles live beside this module
in profiles/*.yaml; any other path works too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROFILE_DIR = Path(__file__).with_name("profiles")


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Hardware:
    gpu_name: str
    gpu_memory_gb: float
    num_gpus: int
    collnet: bool = False  # no CollNet/SHARP switch: CollNet* algorithms fail


@dataclass(frozen=True)
class Defaults:
    """SGLang defaults that depend on the model/hardware (what SGLang would auto-pick)."""

    tp_size: int = 1
    cuda_graph_max_bs: int = 64
    mem_fraction_static: float = 0.88
    max_running_requests: int = 256
    max_running_requests_spec: int = 48  # SGLang forces 48 under speculation when unset
    speculative: tuple[int, int, int] = (3, 1, 4)  # steps, topk, draft tokens when unset
    context_length: int = 131072


@dataclass(frozen=True)
class Build:
    """The SGLang build the simulated node runs: its flag set.

    Upstream 0.5.23 has no draft-TP flag (the draft follows the attention-TP group); some
    builds add ``--speculative-draft-tp-size``: ``draft_tp_flag: true`` simulates one.
    """

    version: str = "0.5.23"
    draft_tp_flag: bool = False


@dataclass(frozen=True)
class Startup:
    load_seconds: float  # weight loading at real time
    capture_seconds_per_graph: float  # one captured batch size (doubled with a draft)


@dataclass(frozen=True)
class Target:
    """One target forward of T = batch x k tokens (k per request) is a roofline plus overheads:

    fixed_ms + max(weights_ms, compute_ms_per_token x T) + allreduce_ms_per_token x T
    + per_request_ms x batch + per_token_ms x (k - 1), + eager_ms without a CUDA
    graph. See sweeper.sim.model.
    """

    fixed_ms: float  # per forward whatever its size: kernel launches, TP all-reduce latency
    weights_ms: float  # streaming the weights from HBM once: the memory-bound floor
    compute_ms_per_token: float  # GEMM FLOPs of one token at the achievable rate
    allreduce_ms_per_token: float  # one token's activations over the TP links, every layer
    # each request's memory-bound work per forward: its KV-cache read (in a MoE also the
    # experts its token routes to); paid once per forward, whatever k is
    per_request_ms: float
    per_token_ms: float  # each further verify position: per-position tree/accept/sampling kernels
    eager_ms: float  # extra per forward without a CUDA graph (launch overhead)
    prefill_ms: float  # first token of a short prompt
    prefill_per_request_ms: float  # each further prompt in the same prefill batch
    no_overlap_ms: float = 0.0  # scheduler overhead no longer hidden by the overlap schedule
    attention_backend: Mapping[str, float] = field(default_factory=dict)  # verify factors
    # CUDA-graph / kernel-tile padding: a forward of n tokens costs like the smallest bucket
    # >= n (token-proportional terms only); empty = no padding
    verify_buckets: tuple[int, ...] = ()
    # attention DP (--attn-dp-size D): each group of tp/D GPUs attends to its own requests
    # (per_request_ms paid for ceil(batch / D)), but every forward gathers the groups'
    # tokens before the MLP and scatters them after; None = half of fixed_ms (the same
    # bytes as the all-reduce it replaces, as a gather/scatter pair with padding)
    dp_attention_ms: float | None = None
    # --speculative-attention-mode: the verify forward's kernels; chain / tree factors
    verify_attention_mode: Mapping[str, float] = field(
        default_factory=lambda: {"prefill": 1.0, "decode": 0.97, "decode_tree": 1.12})

    @property
    def forward_ms(self) -> float:
        """One decode token at batch 1 with a CUDA graph (memory-bound)."""
        return (self.fixed_ms + self.weights_ms + self.allreduce_ms_per_token
                + self.per_request_ms)


@dataclass(frozen=True)
class Draft:
    compute_ms_tp1: float  # one draft step on one GPU
    tp_scaling_exponent: float  # compute(tp) = compute_ms_tp1 / tp ** exponent
    comm_ms: float  # per draft step at the target's TP, custom all-reduce, NCCL defaults
    gather_ms: float  # per cycle when the draft runs on fewer GPUs than the target
    topk_cost: float  # relative extra draft compute per extra branch
    per_request: float  # relative extra draft cost per extra request in the batch
    eager_factor: float  # draft step cost multiplier without CUDA graphs
    no_custom_all_reduce_factor: float = 1.3
    nvls_factor: float = 0.95
    # --speculative-draft-attention-backend: draft step factor (unlisted = 1)
    attention_backend: Mapping[str, float] = field(
        default_factory=lambda: {"fa3": 1.0, "flashinfer": 1.04, "triton": 1.15,
                                 "torch_native": 2.5})
    # --speculative-draft-model-quantization: draft compute factor (unlisted = 1); the
    # acceptance it costs is spec.quantization_acceptance
    quantization_cost: Mapping[str, float] = field(
        default_factory=lambda: {"fp8": 0.75, "w8a8_fp8": 0.75, "modelopt_fp8": 0.75,
                                 "mxfp8": 0.75, "w8a8_int8": 0.78, "awq": 0.65,
                                 "gptq": 0.65, "mxfp4": 0.6, "modelopt_fp4": 0.6})


@dataclass(frozen=True)
class Spec:
    overhead_ms: float  # per cycle: sampling, tree building, bookkeeping
    tree_verify_ms: float  # per request per cycle when topk > 1 (tree attention masks)
    acceptance: tuple[float, ...]  # P(draft token at depth d accepted | all before accepted)
    branch_exponent: float  # m candidates at a depth act like m ** exponent tries
    algorithm_acceptance: Mapping[str, float] = field(default_factory=dict)
    algorithm_draft_cost: Mapping[str, float] = field(default_factory=dict)
    # a quantized draft agrees with the target less often (unlisted = 1)
    quantization_acceptance: Mapping[str, float] = field(
        default_factory=lambda: {"fp8": 0.99, "w8a8_fp8": 0.99, "modelopt_fp8": 0.99,
                                 "mxfp8": 0.99, "w8a8_int8": 0.985, "awq": 0.96,
                                 "gptq": 0.96, "mxfp4": 0.95, "modelopt_fp4": 0.95})


@dataclass(frozen=True)
class HangRule:
    """Configurations matching every env and args item never become healthy."""

    env: Mapping[str, str]
    args: Mapping[str, str]
    reason: str


@dataclass(frozen=True)
class Nccl:
    algo: Mapping[str, float]  # comm factor per NCCL_ALGO value (unset = 1.0)
    proto: Mapping[str, float]  # comm factor per NCCL_PROTO value (unset = 1.0)
    default_channels: int  # what NCCL's tuner uses for the draft's small collectives
    best_channels: int
    channel_penalty: float  # comm factor per doubling away from best_channels
    hang: HangRule | None = None


@dataclass(frozen=True)
class Memory:
    target_weights_gb: float  # whole target model; split over tp
    draft_weights_gb: float  # whole draft; split over draft tp
    min_kv_gb: float  # below this SGLang says "Not enough memory"
    activation_reserve_gb: float  # kept outside the static pool for activations
    graph_gb_per_token: float  # CUDA graph memory per captured (batch x token) slot


@dataclass(frozen=True)
class PromptCategory:
    """Prompts that ask for one kind of text, and how predictable that text is to a draft.

    A prompt belongs to the first category (in the profile's order) one of whose ``words``
    it contains (case-insensitive); ``accept`` multiplies the per-depth acceptance of its
    requests (code and extraction are more predictable than creative writing)."""

    name: str
    accept: float
    words: tuple[str, ...]


@dataclass(frozen=True)
class Noise:
    """What a real node adds to the model, each at --sim-noise 1 (scaled by it; 0: none).

    Per request: ``cycle_sd`` and ``accept_sd``. Per server start: ``start_sd``, one speed
    factor for every request the start serves (real restarts differ: allocation, clocks,
    placement), drawn from --sim-seed. Over time: ``drift_sd``, a random walk of the speed
    (log-sd per square-root hour of serving). Per prompt: ``categories`` and ``prompt_sd``
    (a fixed factor per prompt text, seeded by it): the acceptance a prompt gets, so tok/s
    depends on what is asked. A figure over a prompt set is the mean over its prompts
    (``sweeper.sim.truth.expected_throughput(prompts=...)``)."""

    cycle_sd: float  # log-normal sd of a request's speed factor
    accept_sd: float  # log-normal sd of a request's acceptance factor
    # A fixed speed factor per distinct configuration (log-normal, this sd), seeded by
    # config_residual_seed and a hash of the resolved flags/env: effects no formula captures.
    # Part of the ground truth (not run-to-run noise), so --sim-noise 0 keeps it.
    config_residual_sd: float = 0.0
    config_residual_seed: int = 0
    start_sd: float = 0.0  # log-normal sd of a start's speed factor
    drift_sd: float = 0.0  # log-normal sd of the speed's random walk per sqrt(hour)
    prompt_sd: float = 0.0  # log-normal sd of a prompt's own acceptance factor
    categories: tuple[PromptCategory, ...] = ()


FAULT_KINDS = ("lossy", "http_500", "crash_serving")


@dataclass(frozen=True)
class Match:
    """Which launches a rule applies to: every args / env item must match.

    Values are strings or lists of strings (any of them); args compare with the resolved
    SGLang value (after defaults), env with the variable, "unset" meaning absent.
    """

    args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    env: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class FaultRule:
    """A fault a matching launch shows while serving (sweeper.sim.faults)."""

    kind: str  # lossy, http_500 or crash_serving
    when: Match = field(default_factory=Match)
    requests: int = 2  # crash_serving: generation requests served before the crash
    every: int = 8  # lossy: one token in `every` is replaced
    # profile rules describe broken speculative configurations: the no-speculation server
    # is left alone unless a rule says speculative_only: false (lossy never applies to it)
    speculative_only: bool = True
    reason: str = ""


@dataclass(frozen=True)
class Profile:
    """Every coefficient of one simulated machine + model. See profiles/demo.yaml."""

    name: str
    description: str
    model: str
    hardware: Hardware
    defaults: Defaults
    startup: Startup
    target: Target
    draft: Draft
    spec: Spec
    nccl: Nccl
    memory: Memory
    noise: Noise
    faults: tuple[FaultRule, ...] = ()
    source: str = ""
    build: Build = field(default_factory=Build)


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped with the package."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str | Path | Profile) -> Profile:
    """Load a profile by built-in name (``demo``, ``kimi-k2.5-8xh200``) or YAML path.

    >>> load_profile("demo").name
    'demo'
    """
    if isinstance(name_or_path, Profile):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith((".yaml", ".yml")) or path.exists()):
        path = PROFILE_DIR / f"{text}.yaml"
        if not path.exists():
            raise ProfileError(
                f"unknown sim profile {text!r}: use one of {', '.join(builtin_profiles())} "
                "or a path to a profile YAML file"
            )
    try:
        key = (str(path.resolve()), path.stat().st_mtime_ns)
        if key not in _CACHE:
            # ground-truth sweeps call this thousands of times: parse each file once
            _CACHE[key] = _parse(path)
        return _CACHE[key]
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read profile: {exc}") from exc


_CACHE: dict[tuple[str, int], Profile] = {}


def _parse(path: Path) -> Profile:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: cannot read profile: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile is a YAML mapping")
    return _build(data, str(path))


_SECTIONS: dict[str, type] = {
    "hardware": Hardware,
    "defaults": Defaults,
    "startup": Startup,
    "target": Target,
    "draft": Draft,
    "spec": Spec,
    "nccl": Nccl,
    "memory": Memory,
    "noise": Noise,
}


def _build(data: dict[str, Any], source: str) -> Profile:
    known = {"name", "description", "model", "faults", "build", *_SECTIONS}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProfileError(f"{source}: unknown key(s) {', '.join(unknown)}")
    sections: dict[str, Any] = {}
    for key, cls in _SECTIONS.items():
        raw = data.get(key, {} if key == "defaults" else None)
        if not isinstance(raw, dict):
            raise ProfileError(f"{source}: missing or invalid section {key!r}")
        sections[key] = _section(cls, dict(raw), f"{source}: {key}")
    try:
        return Profile(
            name=str(data["name"]),
            description=str(data.get("description", "")).strip(),
            model=str(data.get("model", "")),
            faults=_faults(data.get("faults"), source),
            source=source,
            build=_section(Build, dict(data.get("build") or {}), f"{source}: build"),
            **sections,
        )
    except KeyError as exc:
        raise ProfileError(f"{source}: missing key {exc.args[0]!r}") from exc


def _section(cls: type, raw: dict[str, Any], where: str) -> Any:
    # YAML keys may use dashes like SGLang's flags; the dataclasses use underscores.
    raw = {k.replace("-", "_"): v for k, v in raw.items()}
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ProfileError(f"{where}: unknown key(s) {', '.join(unknown)}")
    if "acceptance" in raw:
        raw["acceptance"] = tuple(float(x) for x in raw["acceptance"])
    if "speculative" in raw:
        raw["speculative"] = tuple(int(x) for x in raw["speculative"])
    if "verify_buckets" in raw:
        buckets = sorted({int(x) for x in raw["verify_buckets"] or ()})
        if buckets and buckets[0] < 1:
            raise ProfileError(f"{where}: verify_buckets must be positive token counts")
        raw["verify_buckets"] = tuple(buckets)
    if cls is Noise and raw.get("categories") is not None:
        raw["categories"] = _categories(raw["categories"], where)
    if cls is Nccl and raw.get("hang") is not None:
        hang = raw["hang"]
        raw["hang"] = HangRule(
            env={str(k): str(v) for k, v in (hang.get("env") or {}).items()},
            args={str(k): str(v) for k, v in (hang.get("args") or {}).items()},
            reason=str(hang.get("reason", "")),
        )
    try:
        return cls(**raw)
    except TypeError as exc:
        raise ProfileError(f"{where}: {exc}") from exc


def _categories(raw: Any, where: str) -> tuple[PromptCategory, ...]:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: categories maps a name to {{accept, words}}")
    out = []
    for name, item in raw.items():
        if not isinstance(item, dict) or set(item) - {"accept", "words"} \
                or not isinstance(item.get("accept"), int | float) or item["accept"] <= 0:
            raise ProfileError(f"{where}: categories.{name}: needs accept (> 0) and words")
        words = tuple(str(w).lower() for w in _strings(item.get("words") or []))
        out.append(PromptCategory(str(name), float(item["accept"]), words))
    return tuple(out)


def _strings(value: Any) -> tuple[str, ...]:
    values = value if isinstance(value, list | tuple) else [value]
    return tuple(str(v) for v in values)


def _match(raw: Any, where: str) -> Match:
    if raw is None:
        return Match()
    if not isinstance(raw, dict) or set(raw) - {"args", "env"}:
        raise ProfileError(f"{where}: 'when' takes 'args' and 'env' mappings")
    args = raw.get("args") or {}
    env = raw.get("env") or {}
    if not isinstance(args, dict) or not isinstance(env, dict):
        raise ProfileError(f"{where}: 'when' takes 'args' and 'env' mappings")
    return Match(
        args={str(k).lstrip("-").replace("_", "-"): _strings(v) for k, v in args.items()},
        env={str(k): _strings(v) for k, v in env.items()},
    )


def _faults(raw: Any, source: str) -> tuple[FaultRule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProfileError(f"{source}: faults is a list of rules")
    rules = []
    for i, item in enumerate(raw):
        where = f"{source}: faults[{i}]"
        if not isinstance(item, dict):
            raise ProfileError(f"{where}: a rule is a mapping with a kind")
        unknown = sorted(set(item) - {"kind", "when", "requests", "every", "reason",
                                      "speculative_only"})
        if unknown:
            raise ProfileError(f"{where}: unknown key(s) {', '.join(unknown)}")
        kind = str(item.get("kind", ""))
        if kind not in FAULT_KINDS:
            raise ProfileError(f"{where}: kind must be one of {', '.join(FAULT_KINDS)}")
        requests, every = int(item.get("requests", 2)), int(item.get("every", 8))
        if requests < 0 or every < 2:
            raise ProfileError(f"{where}: requests must be >= 0 and every >= 2")
        rules.append(FaultRule(kind=kind, when=_match(item.get("when"), where),
                               requests=requests, every=every,
                               speculative_only=bool(item.get("speculative_only", True)),
                               reason=str(item.get("reason", ""))))
    return tuple(rules)
