"""`veritrain verify --api URL` and `veritrain reproduce --api URL`: an auditor with nothing
but the server's URL checks a real recorded run, and catches tampering the API exposes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from e2e.auditor_cli import run_as_auditor
from e2e.recorded_runs import RUN_ID
from e2e.tampering import (
    STEP,
    delete_entry,
    edit_metric,
    flip_checkpoint_byte,
    roll_back_tree_head,
)

from veritrain.audit.reproduce import reproduce_step
from veritrain.audit.verify import verify_run
from veritrain.audit.verify.seen_heads import SeenHeads
from veritrain.settings import Settings
from veritrain.sources.api import ApiSource
from web.settings import WebSettings

Serve = Callable[[WebSettings], str]


def test_verify_and_reproduce_with_only_the_url(
    recorded_run: Settings, serve_app: Serve, tmp_path: Path
) -> None:
    url = serve_app(recorded_run)
    result = run_as_auditor(["verify", RUN_ID, "--api", url, "--json"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and [c["number"] for c in report["checks"]] == list(range(1, 13))
    assert report["source"] == url

    reproduced = run_as_auditor(["reproduce", RUN_ID, "--step", "1", "--api", url], tmp_path)
    assert reproduced.returncode == 0, reproduced.stdout + reproduced.stderr
    assert "MATCH" in reproduced.stdout and "MISMATCH" not in reproduced.stdout


def test_the_most_recent_run_is_the_default(
    recorded_run: Settings, serve_app: Serve, tmp_path: Path
) -> None:
    source = ApiSource(serve_app(recorded_run))
    try:
        assert source.latest_run_id() == RUN_ID
        comparison = reproduce_step(source, None, 0, cluster=1)
    finally:
        source.close()
    assert comparison.ok and comparison.cluster == 1


@pytest.mark.parametrize(
    "tamper",
    [edit_metric, delete_entry, roll_back_tree_head, flip_checkpoint_byte],
    ids=lambda f: f.__name__,
)
def test_tampering_shows_through_the_api(
    tamper: Callable[[Settings], None], fresh_run: Settings, serve_app: Serve, tmp_path: Path
) -> None:
    tamper(fresh_run)
    source = ApiSource(serve_app(fresh_run))
    try:
        report = verify_run(source, RUN_ID, seen_heads=SeenHeads(tmp_path / "witness"))
    finally:
        source.close()
    assert not report.ok
    assert any(f.step == STEP for f in report.failures), report.render()
