"""``veritrain verify --api`` against a server that lies about what it serves: malformed or
out-of-range values are failed checks naming the entry (never a traceback, and ``--json``
still prints a report); a returning verifier's memory is keyed by run and source."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e.auditor_cli import run_as_auditor_in_process
from e2e.lying_proxy import lying_proxy
from e2e.recorded_runs import RUN_ID

from veritrain.audit.verify import SeenHeads, verify_run
from veritrain.settings import Settings
from veritrain.sources.api import ApiSource
from web.settings import WebSettings

Serve = Callable[[WebSettings], str]


def null_and_infinite_metrics(path: str, document: Any) -> Any:
    if path.endswith("/metrics"):
        for series in document["series"]:
            if series["key"] == "eval_loss":
                series["values"][1] = None
            if series["key"] == "train_loss":
                series["values"][2] = 1e999  # parses as inf
    return document


def proofs_that_are_not_hex(path: str, document: Any) -> Any:
    if path.endswith("/proof/inclusion"):
        document["hashes"] = ["not hex"] * len(document["hashes"])
    return document


def entries_that_are_not_strings(path: str, document: Any) -> Any:
    if path.endswith("/entries"):
        for entry in document["entries"]:
            entry["body"] = {"not": "a string"}
    return document


@pytest.mark.parametrize(
    ("lie", "check", "words"),
    [
        (null_and_infinite_metrics, 9, "not a finite number"),
        (proofs_that_are_not_hex, 3, "malformed JSON"),
        (entries_that_are_not_strings, 2, "cannot be read"),
    ],
    ids=lambda v: v.__name__ if callable(v) else str(v),
)
def test_a_lying_server_is_a_failed_check_in_the_json_report_not_a_traceback(
    lie: Callable[[str, Any], Any],
    check: int,
    words: str,
    recorded_run: Settings,
    serve_app: Serve,
    tmp_path: Path,
) -> None:
    with lying_proxy(serve_app(recorded_run), lie) as url:
        result = run_as_auditor_in_process(["verify", RUN_ID, "--api", url, "--json"], tmp_path)

    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    failed = next(c for c in report["checks"] if c["number"] == check)
    assert not failed["passed"]
    assert any(words in f["message"] for f in failed["failures"]), failed


def test_metrics_lies_name_the_step_they_concern(
    recorded_run: Settings, serve_app: Serve, tmp_path: Path
) -> None:
    with lying_proxy(serve_app(recorded_run), null_and_infinite_metrics) as url:
        report = json.loads(
            run_as_auditor_in_process(["verify", RUN_ID, "--api", url, "--json"], tmp_path).stdout
        )

    failures = next(c for c in report["checks"] if c["number"] == 9)["failures"]
    assert {(f["step"], f["index"]) for f in failures} == {(1, 3), (2, 4)}


def test_what_a_verifier_remembers_is_keyed_by_run_and_source(
    recorded_run: Settings, serve_app: Serve, tmp_path: Path
) -> None:
    seen = SeenHeads(tmp_path / "seen")
    url = serve_app(recorded_run)
    with ApiSource(url) as source:
        assert verify_run(source, RUN_ID, seen_heads=seen).ok
        sighting = seen.last_seen(RUN_ID, source.description)
    assert sighting is not None and sighting.run_id == RUN_ID and sighting.finished
    assert seen.last_seen(RUN_ID, "http://another.example") is None


def test_with_sampling_the_newest_checkpoint_is_always_re_hashed(
    fresh_run: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No size the source reports decides what is checked: the newest checkpoint is re-hashed
    in full, and its verified bytes size the rest of the run."""
    import veritrain.audit.verify.object_checks as object_checks
    from veritrain.sources import DirectSource

    monkeypatch.setattr(object_checks, "FULL_CHECK_BYTES", 0)  # sample, however small the run
    monkeypatch.setattr(object_checks, "SAMPLED_STEPS", 0)
    with DirectSource(fresh_run) as source:
        last = verify_run(source, RUN_ID).results[7]
        assert last.passed and "1 of 4 checkpoints re-hashed" in last.notes[0], last.notes
        manifest = json.loads(source.read_object(_newest_manifest(fresh_run)))
    digest = next(r["digest"] for r in manifest["resources"] if r["name"].startswith("model-"))
    path = Path(fresh_run.store_url.removeprefix("file://")) / "sha256" / digest
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))

    with DirectSource(fresh_run) as source:
        report = verify_run(source, RUN_ID)
    assert any(f.step == 3 and digest[:16] in f.message for f in report.results[7].failures), (
        report.render()
    )


def _newest_manifest(settings: Settings) -> str:
    import sqlite3

    db = sqlite3.connect(settings.database_url.removeprefix("sqlite:///"))
    (body,) = db.execute(
        "select body from entries where kind = 'outer_step' order by idx desc limit 1"
    ).fetchone()
    db.close()
    manifest: str = json.loads(body)["payload"]["checkpoint"]["manifest_object"]
    return manifest
