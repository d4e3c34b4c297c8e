"""validate warns when the model sampler would hand a space too large for it to TPE."""

from __future__ import annotations

from sweeper.cli.tools import model_limit_note
from sweeper.search.model.candidates import MAX_CANDIDATES


def test_a_space_past_the_model_samplers_limit_is_named() -> None:
    note = model_limit_note("model", MAX_CANDIDATES + 1)
    assert note is not None and "TPE samples it alone" in note
    assert f"{MAX_CANDIDATES:,}" in note


def test_no_note_within_the_limit_for_another_sampler_or_a_continuous_space() -> None:
    assert model_limit_note("model", MAX_CANDIDATES) is None
    assert model_limit_note("tpe", MAX_CANDIDATES + 1) is None
    assert model_limit_note("model", None) is None
