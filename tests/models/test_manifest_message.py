"""A manifest mismatch says what changed and that the spec's behaviour changed (issue 10 item 17).

"Update the manifest" alone would invite accepting a bug: the message names each count as
before → after and says to update only if the change was intended.
"""

from __future__ import annotations

from tent_models.manifest import Counts, Manifest

EXPECTED = Counts(distinct_states=140, transitions=657, depth=8)


def test_a_mismatch_names_each_count_before_and_after() -> None:
    manifest = Manifest(models={"negotiation/ci": EXPECTED})
    measured = Counts(distinct_states=1_141, transitions=657, depth=7)
    message = manifest.compare("negotiation/ci", measured)
    assert message is not None
    assert "states 140 → 1,141 (+1,001)" in message
    assert "transitions 657 (unchanged)" in message
    assert "depth 8 → 7 (-1)" in message


def test_a_mismatch_says_the_behaviour_changed_and_to_update_only_if_intended() -> None:
    manifest = Manifest(models={"negotiation/ci": EXPECTED})
    message = manifest.compare(
        "negotiation/ci", Counts(distinct_states=141, transitions=657, depth=8)
    )
    assert message is not None
    assert "behaviour of the spec" in message
    assert "if (and only if) that change was intended" in message
    assert "otherwise it is a bug" in message


def test_a_missing_entry_says_it_was_never_reviewed() -> None:
    message = Manifest().compare("credit/ci", EXPECTED)
    assert message is not None
    assert "never reviewed" in message and "140 states" in message


def test_equal_counts_are_no_mismatch() -> None:
    assert Manifest(models={"m": EXPECTED}).compare("m", EXPECTED) is None
