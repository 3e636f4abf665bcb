"""Under tolerance, reproduce checks what the model says token by token (docs/auditing.md,
"Generations"): every recorded token, teacher-forced through the recorded checkpoint, must be
its greedy choice within the published margin. A faked continuation, re-signed by an operator
holding every key, fails; an honest run re-executed under other settings passes."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from e2e.forger import Forger

from attestation.canonical import canonical_json
from records.generations import Generation, Generations
from storage import open_store
from trainer.execution import Execution
from veritrain.audit.reproduce import reproduce_step
from veritrain.settings import Settings
from veritrain.sources import DirectSource
from veritrain.sources.recorded_run import RecordedRun

STEP = 2
FAKED = "the model never said this at all, not one word of it. "


def _fake_first_continuation(settings: Settings, run_id: str) -> str:
    """Store a generations object whose first continuation is made up (consistent text and
    byte-level tokens, the right length); return its digest."""
    with DirectSource(settings) as source:
        digest = RecordedRun.load(source, run_id).step(STEP).generations.object
    with open_store(settings.store_url) as store:
        said = Generations.from_payload(json.loads(store.read_bytes(digest, 1 << 20)))
        first = said.generations[0]
        text = (FAKED * 8)[: said.max_new_tokens]
        assert text != first.text
        faked = Generation(prompt=first.prompt, text=text, token_ids=tuple(text.encode()))
        forged = replace(said, generations=(faked, *said.generations[1:]))
        return store.put_bytes(canonical_json(forged.to_payload()))


def test_a_faked_continuation_fails_tolerance_reproduce(fresh_run: Settings) -> None:
    with DirectSource(fresh_run) as source:
        run_id = source.latest_run_id()
    faked = _fake_first_continuation(fresh_run, run_id)

    def point_at_the_fake(payloads: list[tuple[str, dict[str, Any]]]) -> Any:
        for kind, payload in payloads:
            if kind == "outer_step" and payload["step"] == STEP:
                payload["generations"]["object"] = faked
        return payloads

    Forger(fresh_run, run_id).rewrite(point_at_the_fake)

    with DirectSource(fresh_run) as source:
        comparison = reproduce_step(source, run_id, STEP, mode="tolerance")
    assert not comparison.ok
    generations = [m for m in comparison.mismatched if m.startswith("generation for ")]
    assert len(generations) == 1, comparison.render()
    assert "is not the recorded checkpoint's greedy one: token " in generations[0]


def test_an_honest_run_under_other_settings_passes_the_generation_check(
    recorded_run: Settings,
) -> None:
    with DirectSource(recorded_run) as source:
        comparison = reproduce_step(source, None, STEP, execution=Execution(precision="fp64"))

    assert comparison.mode == "tolerance"
    assert comparison.ok, comparison.render()
    assert any(
        m.startswith("generations: ") and "are the recorded checkpoint's greedy choices" in m
        for m in comparison.matched
    ), comparison.render()
