"""The tamper matrix (issue #5): after a real recorded run, each alteration below makes
`veritrain verify` fail with a message naming the outer step; the untouched run verifies."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from e2e.tampering import (
    STEP,
    delete_entry,
    edit_metric,
    flip_checkpoint_byte,
    flip_data_shard_byte,
    replace_checkpoint,
    replace_quote,
    resign_with_foreign_keys,
    rewrite_generations,
    roll_back_tree_head,
    swap_entries,
)

from veritrain.audit.verify import Report, verify_run
from veritrain.audit.verify.seen_heads import SeenHeads, Sighting
from veritrain.settings import Settings
from veritrain.sources import DirectSource


def verify(settings: Settings, witness_dir: Path) -> Report:
    source = DirectSource(settings)
    try:
        return verify_run(source, None, seen_heads=SeenHeads(witness_dir))
    finally:
        source.close()


def _names_step(step: int | None, message: str, wanted: int) -> bool:
    """A failure names a step as its own, or among the steps it puts in doubt (a shard read
    by several steps)."""
    return step == wanted or re.search(rf"outer steps? [\d, ]*\b{wanted}\b", message) is not None


CASES: dict[str, tuple[Callable[[Settings], None], set[int]]] = {
    # case: (tamper, check groups that must report the step)
    "checkpoint byte flipped": (flip_checkpoint_byte, {7}),
    "data shard byte flipped": (flip_data_shard_byte, {8}),
    "metric edited in the database": (edit_metric, {9}),
    "entry deleted": (delete_entry, {2}),
    "two entries swapped": (swap_entries, {2}),
    "entry re-signed with a foreign key": (resign_with_foreign_keys, {4}),
    "quote replaced by another step's": (replace_quote, {2, 5}),
    "signed tree head rolled back": (roll_back_tree_head, {2}),
    "checkpoint replaced by another step's": (replace_checkpoint, {7}),
    "generation rewritten": (rewrite_generations, {7}),
}


@pytest.fixture(scope="module")
def honest_sighting(recorded_run: Settings, tmp_path_factory: pytest.TempPathFactory) -> Sighting:
    """What a verifier remembers of the untouched run (its origin, key, size and root), once:
    every case's copy of the run is byte for byte the same log."""
    seen = SeenHeads(tmp_path_factory.mktemp("witness"))
    report = verify(recorded_run, seen.directory)
    assert report.ok, report.render()
    with DirectSource(recorded_run) as source:
        sighting = seen.last_seen(report.run_id, source.description)
    assert sighting is not None
    return sighting


def test_the_untouched_run_verifies(fresh_run: Settings, tmp_path: Path) -> None:
    report = verify(fresh_run, tmp_path / "witness")
    assert report.ok, report.render()
    assert sorted(report.results) == list(range(1, 13))


@pytest.mark.parametrize("case", list(CASES))
def test_tampering_fails_verification_naming_the_step(
    case: str, fresh_run: Settings, honest_sighting: Sighting, tmp_path: Path
) -> None:
    tamper, groups = CASES[case]
    witness = tmp_path / "witness"
    with DirectSource(fresh_run) as source:  # this verifier has seen the honest run, here
        SeenHeads(witness).remember(replace(honest_sighting, source=source.description))
    tamper(fresh_run)
    report = verify(fresh_run, witness)
    text = report.render()
    assert not report.ok, f"{case} went unnoticed:\n{text}"
    for group in groups:
        named = [f for f in report.results[group].failures if _names_step(f.step, f.message, STEP)]
        assert named, f"{case}: check {group} does not name outer step {STEP}:\n{text}"
    assert _names_step(None, text, STEP)
