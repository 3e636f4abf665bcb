"""A recorded run with one poisoned cluster (3 clusters x 2 stages, the real multi-process
trainer into a real ledger and store): the cluster is excluded in every stage, verify recomputes
its flags and every contribution score and agrees, a forged flag or score fails verify, and the
page shows the exclusion next to the scores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e.forger import Forger, Payloads
from e2e.recorded_runs import copy_run, with_short_warm_up

from records import OuterStep
from trainer.config import PoisonForTesting, with_overrides
from trainer.presets import run_preset
from veritrain.audit.verify import Report, verify_run
from veritrain.record.training import train_recorded
from veritrain.settings import Settings, load_settings
from veritrain.sources import DirectSource
from veritrain.sources.recorded_run import RecordedRun
from web.settings import WebSettings

RUN_ID = "poisoned"
POISONED, STEP = 2, 1
"""Cluster 2 sends 100x its pseudo-gradient in outer step 1 (blocking DiLoCo: round 1)."""


@pytest.fixture(scope="module")
def poisoned_run(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = load_settings(data_dir=tmp_path_factory.mktemp("poisoned") / "veritrain-data")
    config = replace(
        with_short_warm_up(
            with_overrides(
                run_preset("tiny"), run_id=RUN_ID, clusters=3, outer_steps=3, inner_steps=4
            )
        ),
        poison_for_testing=PoisonForTesting(
            cluster=POISONED, step=STEP, kind="scale", factor=100.0
        ),
    )
    train_recorded(settings, config, quiet=True)
    return settings


def steps(settings: Settings) -> list[OuterStep]:
    with DirectSource(settings) as source:
        return [step for _, step in RecordedRun.load(source, RUN_ID).outer_steps]


def verify(settings: Settings, *, deep: bool = False) -> Report:
    with DirectSource(settings) as source:
        return verify_run(source, RUN_ID, deep=deep)


def test_the_poisoned_cluster_is_excluded_by_one_verdict_and_the_others_are_clean(
    poisoned_run: Settings,
) -> None:
    recorded = steps(poisoned_run)
    (applied,) = recorded[STEP].applied
    verdicts = {v.cluster: v for v in applied.verdicts}
    assert set(verdicts) == {0, 1, 2}  # one verdict per cluster, for both stages
    assert "large_norm" in verdicts[POISONED].flags and verdicts[POISONED].excluded
    assert "100" in verdicts[POISONED].reason or "x the reference" in verdicts[POISONED].reason
    assert [verdicts[c].flags for c in (0, 1)] == [(), ()]
    for c in (0, 1):
        score = verdicts[c].score
        assert (
            score is not None and score.held_out < 0 and score.own_data < 0
        )  # honest updates help
    poisoned_score = verdicts[POISONED].score
    assert poisoned_score is not None and poisoned_score.held_out > 1.0  # x100 ruins the model
    for other in (0, 2):
        assert not recorded[other].anomalies, f"step {other} flagged {recorded[other].anomalies}"


def test_verify_recomputes_the_flags_and_scores_and_agrees(poisoned_run: Settings) -> None:
    report = verify(poisoned_run, deep=True)

    assert report.ok, report.render()
    result = report.results[12]
    assert result.checked >= 3 + 3  # every round by the rules, every step recomputed
    assert any(
        "3 of 3 steps recomputed from their contributions (bitwise" in note for note in result.notes
    ), result.notes


def hide_the_flag(step: dict[str, Any]) -> None:
    verdict = step["applied"][0]["verdicts"][POISONED]
    verdict.update(flags=[], reason="", excluded=False)


def flatter_a_score(step: dict[str, Any]) -> None:
    step["applied"][0]["verdicts"][0]["score"]["held_out"] -= 0.01


def lower_a_norm(step: dict[str, Any]) -> None:
    step["applied"][0]["verdicts"][1]["norm"] *= 0.999


FORGERIES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    # what the operator rewrites in step 1's entry: what check 12 says
    "flag hidden": (hide_the_flag, "the rules give flags ['large_norm'"),
    "score flattered": (flatter_a_score, "cluster 0: score recorded"),
    "norm lowered": (lower_a_norm, "cluster 1: norm recorded"),
}


@pytest.mark.parametrize("case", list(FORGERIES))
def test_a_forged_verdict_fails_verify(case: str, poisoned_run: Settings, tmp_path: Path) -> None:
    """An operator holding every key rewrites step 1's verdicts and re-signs the whole log
    (tests/e2e/forger.py): only the recomputation can tell."""
    change, message = FORGERIES[case]
    forged = copy_run(poisoned_run, tmp_path / "veritrain-data")

    def edit(payloads: Payloads) -> Payloads:
        for kind, payload in payloads:
            if kind == "outer_step" and payload["step"] == STEP:
                change(payload)
        return payloads

    Forger(forged, RUN_ID).rewrite(edit)
    report = verify(forged)
    failures = [f.message for f in report.results[12].failures]
    assert any(message in m for m in failures), (
        f"{case}: check 12 does not say {message!r}:\n{report.render()}"
    )
    assert {n for n, r in report.results.items() if not r.passed} == {12}, report.render()


def test_the_page_shows_the_exclusion_next_to_the_scores(
    poisoned_run: Settings, serve_app: Callable[[WebSettings], str]
) -> None:
    url = serve_app(poisoned_run)
    page = httpx.get(f"{url}/runs/{RUN_ID}", timeout=30).text
    row = page[
        page.index('<tr class="anomalous">') : page.index(
            "</tr>", page.index('<tr class="anomalous">')
        )
    ]
    assert f"cluster {POISONED} (excluded)" in row
    assert (
        'class="score flag"' in row and f"{POISONED}: " in row
    )  # its score, marked, beside the flag


def test_verify_recomputes_the_verdicts_of_an_overlapped_compressed_run(tmp_path: Path) -> None:
    """DiLoCoX: compressed payloads; the tiny preset's short overlap applies round t during step
    t+1 (the last step applies two rounds), so each recomputation starts from the previous
    step's state with an exchange in flight."""
    settings = load_settings(data_dir=tmp_path / "veritrain-data")
    config = with_overrides(
        run_preset("tiny"), run_id="overlapped", method="dilocox", outer_steps=3, inner_steps=4
    )
    assert config.outer.overlapped and config.outer.compressed
    train_recorded(settings, config, quiet=True)

    with DirectSource(settings) as source:
        report = verify_run(source, "overlapped", deep=True)
        recorded = [step for _, step in RecordedRun.load(source, "overlapped").outer_steps]
    assert report.ok, report.render()
    assert [[a.round for a in s.applied] for s in recorded] == [[], [0], [1, 2]]
    assert all(
        len(a.verdicts) == 2 and a.verdicts[0].score is not None
        for s in recorded
        for a in s.applied
    )
    assert any(
        "2 of 2 steps recomputed from their contributions (bitwise" in n
        for n in report.results[12].notes
    )
