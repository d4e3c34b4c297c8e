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


# ----------------------------------------------------------- the innocent values of issue 9
def test_speculative_numbers_are_never_blamed_for_an_nccl_fault() -> None:
    """make demo: trials 3 and 4 failed because of CollNetDirect and happened to share
    topk 4 and 4 draft tokens; topk 4 and draft 4 must stay measurable."""
    mem = FailureMemory()
    mem.add(3, "a", cfg(2, 4, 4, NCCL_ALGO="CollNetDirect", NCCL_PROTO="LL"), "nccl")
    mem.add(4, "b", cfg(3, 4, 4, NCCL_ALGO="CollNetDirect", NCCL_PROTO="Simple"), "nccl")
    assert mem.predict("c", cfg(2, 4, 9, NCCL_ALGO="Ring", NCCL_PROTO="LL")) is None
    assert mem.predict("d", cfg(5, 2, 4, NCCL_ALGO="Tree", NCCL_PROTO="LL")) is None
    assert mem.predict("e", cfg(4, 4, 4, NCCL_ALGO="unset", NCCL_PROTO="Simple")) is None
    p = mem.predict("f", cfg(1, 1, 2, NCCL_ALGO="CollNetDirect", NCCL_PROTO="LL128"))
    assert p is not None and p.kind == "nccl" and "NCCL_ALGO=CollNetDirect" in p.reason
    assert "topk" not in p.reason and "draft" not in p.reason


def test_draft_placement_is_not_blamed_for_an_nccl_fault() -> None:
    mem = FailureMemory()
    for i, (algo, proto) in enumerate([("CollNetDirect", "LL"), ("CollNetDirect", "Simple")]):
        eff = cfg(2 + i, 2, 5, NCCL_ALGO=algo, NCCL_PROTO=proto)
        eff["speculative-draft-tp-size"] = 1
        mem.add(i + 1, f"x{i}", eff, "nccl")
    other = cfg(3, 2, 5, NCCL_ALGO="Tree", NCCL_PROTO="LL")
    other["speculative-draft-tp-size"] = 1
    assert mem.predict("y", other) is None


def test_settings_shared_by_the_failures_are_blamed_together() -> None:
    """Both failures hold CollNetDirect and LL128, neither ever ran: either could be the
    cause, so only configurations holding both are skipped."""
    mem = FailureMemory()
    mem.add(1, "a", cfg(2, 1, 3, NCCL_ALGO="CollNetDirect", NCCL_PROTO="LL128"), "nccl")
    mem.add(2, "b", cfg(4, 2, 6, NCCL_ALGO="CollNetDirect", NCCL_PROTO="LL128"), "nccl")
    assert mem.predict("c", cfg(3, 2, 5, NCCL_ALGO="Tree", NCCL_PROTO="LL128")) is None
    assert mem.predict("d", cfg(3, 2, 5, NCCL_ALGO="CollNetDirect", NCCL_PROTO="LL")) is None
    both = mem.predict("e", cfg(3, 2, 5, NCCL_ALGO="CollNetDirect", NCCL_PROTO="LL128"))
    assert both is not None and "NCCL_ALGO=CollNetDirect with NCCL_PROTO=LL128" in both.reason
    # LL128 runs elsewhere: CollNetDirect alone explains both failures now
    mem.add(5, "f", cfg(3, 1, 4, NCCL_ALGO="Tree", NCCL_PROTO="LL128"), None)
    alone = mem.predict("g", cfg(3, 2, 5, NCCL_ALGO="CollNetDirect", NCCL_PROTO="LL"))
    assert alone is not None and "NCCL_PROTO" not in alone.reason


def test_two_causes_of_one_class_are_each_learnt() -> None:
    mem = FailureMemory()
    mem.add(1, "a", cfg(2, 1, 3, NCCL_ALGO="CollNetDirect", NCCL_PROTO="LL"), "nccl")
    mem.add(2, "b", cfg(3, 2, 5, NCCL_ALGO="CollNetChain", NCCL_PROTO="LL128"), "nccl")
    mem.add(3, "c", cfg(4, 4, 7, NCCL_ALGO="CollNetDirect", NCCL_PROTO="Simple"), "nccl")
    mem.add(4, "d", cfg(5, 1, 6, NCCL_ALGO="CollNetChain", NCCL_PROTO="unset"), "nccl")
    for algo in ("CollNetDirect", "CollNetChain"):
        p = mem.predict("e", cfg(2, 2, 4, NCCL_ALGO=algo, NCCL_PROTO="LL"))
        assert p is not None and algo in p.reason
    assert mem.predict("f", cfg(2, 2, 4, NCCL_ALGO="Ring", NCCL_PROTO="LL")) is None


def test_the_same_configuration_failing_twice_is_not_a_value_rule() -> None:
    mem = FailureMemory()
    mem.add(1, "a", cfg(2, 1, 3, NCCL_ALGO="CollNetDirect"), "nccl")
    mem.add(2, "a", cfg(2, 1, 3, NCCL_ALGO="CollNetDirect"), "nccl")  # a retry, say
    assert mem.predict("b", cfg(3, 1, 4, NCCL_ALGO="CollNetDirect")) is None


def test_a_rejected_flag_is_blamed_but_never_an_environment_variable() -> None:
    mem = FailureMemory()
    for i, steps in enumerate((2, 4)):
        eff = cfg(steps, 2, 5, NCCL_PROTO="LL")
        eff["attention-backend"] = "trtllm_mha"
        mem.add(i, f"a{i}", eff, "invalid_args")
    eff = cfg(3, 1, 4, NCCL_PROTO="LL")
    assert mem.predict("b", eff) is None  # NCCL_PROTO=LL never ran, yet it cannot reject
    eff["attention-backend"] = "trtllm_mha"
    p = mem.predict("c", eff)
    assert p is not None and p.kind == "invalid_args" and "attention-backend" in p.reason


def test_a_hang_is_predicted_only_for_the_same_configuration() -> None:
    mem = FailureMemory()
    mem.add(1, "a", cfg(2, 1, 3, NCCL_ALGO="NVLSTree"), "hang")
    mem.add(2, "b", cfg(4, 2, 6, NCCL_ALGO="NVLSTree"), "hang")
    assert mem.predict("c", cfg(3, 4, 9, NCCL_ALGO="NVLSTree")) is None
    assert mem.predict("a", cfg(2, 1, 3, NCCL_ALGO="NVLSTree")) is not None
