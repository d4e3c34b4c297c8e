"""Each group's failure memory (search/failures.py), read from the study: every trial that
ran on a server, its failure class when it was PRUNED. The pool (run/workers.py) hands a
group's memory to each of its workers' sessions at the start of a sweep."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from optuna.trial import FrozenTrial, TrialState

from sweeper.results import attrs as A
from sweeper.results.kind import ran_on_server
from sweeper.search.failures import FailureMemory


def group_memories(groups: Iterable[str], trials: Sequence[FrozenTrial]
                   ) -> dict[str, FailureMemory]:
    """A memory per group, holding the trials of that group (a trial without a group, from
    before groups were recorded, in every one)."""
    memories = {group: FailureMemory() for group in groups}
    for t in trials:
        ua = t.user_attrs
        if A.CONFIG_ID not in ua or not ran_on_server(t):
            continue
        for group, memory in memories.items():
            if ua.get(A.GROUP, group) == group:
                memory.add(t.number, ua[A.CONFIG_ID], ua.get(A.EFFECTIVE, {}),
                           ua.get(A.FAILURE) if t.state == TrialState.PRUNED else None)
    return memories
