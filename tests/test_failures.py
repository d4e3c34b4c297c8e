"""Failure prediction: the rules that save restarts, and the cases they must not touch."""

from __future__ import annotations

from sweeper.search.failures import FailureMemory

S, K, D = "speculative-num-steps", "speculative-eagle-topk", "speculative-num-draft-tokens"


def cfg(steps: int, topk: int, draft: int, **env: str) -> dict[str, object]:
    return {S: steps, K: topk, D: draft, **{f"env.{k}": v for k, v in env.items()}}


def test_same_configuration_predicted_whatever_the_class() -> None:
    mem = FailureMemory()
    mem.add(3, "abc", cfg(2, 1, 3), "hang")
    p = mem.predict("abc", cfg(2, 1, 3))
    assert p is not None and p.kind == "hang" and "trial 3" in p.reason
    assert mem.predict("other", cfg(2, 1, 3, NCCL_PROTO="LL")) is None


def test_nccl_value_failing_twice_and_never_running_is_predicted() -> None:
    mem = FailureMemory()
    mem.add(1, "a", cfg(2, 1, 3, NCCL_ALGO="CollNetDirect"), "nccl")
    assert mem.predict("b", cfg(4, 2, 6, NCCL_ALGO="CollNetDirect")) is None  # once is chance
    mem.add(2, "b", cfg(4, 2, 6, NCCL_ALGO="CollNetDirect"), "nccl")
    p = mem.predict("c", cfg(3, 4, 9, NCCL_ALGO="CollNetDirect"))
    assert p is not None and p.kind == "nccl" and "NCCL_ALGO=CollNetDirect" in p.reason
    assert mem.predict("d", cfg(3, 4, 9, NCCL_ALGO="Ring")) is None


def test_value_that_ever_ran_is_not_predicted() -> None:
    mem = FailureMemory()
    mem.add(1, "a", cfg(2, 1, 3, NCCL_ALGO="NVLSTree"), "nccl")
    mem.add(2, "b", cfg(3, 1, 4, NCCL_ALGO="NVLSTree"), "nccl")
    mem.add(3, "c", cfg(4, 1, 5, NCCL_ALGO="NVLSTree"), None)  # it can work
    assert mem.predict("d", cfg(5, 1, 6, NCCL_ALGO="NVLSTree")) is None


def test_mixed_or_non_nccl_failures_do_not_make_a_value_rule() -> None:
    mem = FailureMemory()
    mem.add(1, "a", cfg(2, 1, 3, NCCL_ALGO="Tree"), "nccl")
    mem.add(2, "b", cfg(3, 1, 4, NCCL_ALGO="Tree"), "crash")
    assert mem.predict("c", cfg(5, 1, 6, NCCL_ALGO="Tree")) is None
    mem = FailureMemory()
    mem.add(1, "a", cfg(2, 1, 3, NCCL_ALGO="Tree"), "hang")
    mem.add(2, "b", cfg(3, 1, 4, NCCL_ALGO="Tree"), "hang")
    assert mem.predict("c", cfg(5, 1, 6, NCCL_ALGO="Tree")) is None


def test_oom_is_monotone_in_steps_and_draft_tokens_at_the_same_topk() -> None:
    mem = FailureMemory()
    mem.add(7, "a", cfg(4, 4, 12, NCCL_PROTO="LL"), "oom")
    bigger = mem.predict("b", cfg(5, 4, 14, NCCL_PROTO="Simple"))  # NCCL does not matter
    assert bigger is not None and bigger.kind == "oom" and "trial 7" in bigger.reason
    assert mem.predict("c", cfg(4, 4, 11)) is None  # fewer draft tokens: may fit
    assert mem.predict("d", cfg(6, 2, 13)) is None  # another tree width
    other = cfg(5, 4, 14)
    other["speculative-draft-tp-size"] = 1  # another placement: memory differs
    assert mem.predict("e", other) is None
