"""A real recorded run attested by a second TEE back-end, registered by one module
(tests/second_tee_backend.py), verifies through the registry: ``veritrain verify`` picks the
verifier from the TEE type the genesis names and holds the quotes as opaque bytes. A run whose
TEE type no back-end serves fails check 5 and says which types this verifier has.

The run is rebuilt by tests/e2e/forger.py, re-attested by every cluster's own signer
(veritrain/cluster_identity.py), which asks the registry for the genesis' type."""

from __future__ import annotations

import json
from typing import Any

import pytest
from e2e.forger import Forger, Payloads
from e2e.recorded_runs import RUN_ID
from second_tee_backend import REPORT_TYPE, TEST_ONLY_TEE_TYPE

from records import KIND_OUTER_STEP, OuterStep
from storage import open_store
from veritrain.audit.verify import Report, verify_run
from veritrain.errors import RecorderError
from veritrain.record.training import resume_recorded
from veritrain.settings import Settings, load_settings
from veritrain.sources import DirectSource
from veritrain.sources.recorded_run import RecordedRun


def _verify(settings: Settings) -> Report:
    with DirectSource(settings) as source:
        return verify_run(source, None)


def _forger(settings: Settings) -> Forger:
    with DirectSource(settings) as source:
        return Forger(settings, source.latest_run_id())


def _name_tee_type(tee_type: str) -> Any:
    def edit(payloads: Payloads) -> Payloads:
        payloads[0][1]["tee"]["type"] = tee_type
        return payloads

    return edit


def test_a_run_attested_by_a_second_backend_verifies_through_the_registry(
    fresh_run: Settings,
) -> None:
    forger = _forger(fresh_run)
    forger.rewrite(_name_tee_type(TEST_ONLY_TEE_TYPE))

    report = _verify(fresh_run)
    assert report.ok, report.render()
    assert report.results[5].checked > 0
    assert report.results[5].notes == [
        "TEE type 'test-only': a test-only back-end: binds steps to keys, proves nothing "
        "about hardware"
    ]
    # The quotes on record are the second back-end's own evidence, not software quotes.
    payload = next(p for kind, p in forger.payloads() if kind == KIND_OUTER_STEP)
    step = OuterStep.from_payload(payload)
    with open_store(fresh_run.store_url) as store:
        evidence = json.loads(store.read_bytes(step.attestation.quotes[0].object, 1 << 20))
    assert evidence["payloadType"] == REPORT_TYPE


def test_a_run_whose_tee_type_has_no_backend_fails_check_5_naming_the_registered_ones(
    fresh_run: Settings,
) -> None:
    # Only the genesis names another type (re-signed by the log key; quotes left as they are).
    _forger(fresh_run).rewrite(_name_tee_type("sev-snp"), reattest=False)

    report = _verify(fresh_run)
    assert not report.ok
    assert [f.message for f in report.results[5].failures] == [
        "cannot check this run's quotes: tee_type 'sev-snp': no TEE back-end is registered "
        "for it (registered: software, test-only); a back-end is one module in "
        "attestation/backends/ (docs/attestation.md)"
    ]


def test_resuming_with_another_backend_than_the_genesis_names_is_refused_before_anything_runs(
    recorded_run: Settings,
) -> None:
    other = load_settings(data_dir=recorded_run.data_dir, tee_type=TEST_ONLY_TEE_TYPE)
    with DirectSource(recorded_run) as source:
        before = source.latest_run_id(), RecordedRun.load(source, RUN_ID).last_step

    with pytest.raises(RecorderError) as refused:
        resume_recorded(other, RUN_ID, quiet=True)

    assert str(refused.value) == (
        f"cannot resume {RUN_ID!r}: its genesis names the TEE back-end 'software', this host is "
        f"set to {TEST_ONLY_TEE_TYPE!r}; resume it with VERITRAIN_TEE_TYPE=software"
    )
    with DirectSource(recorded_run) as source:
        assert (source.latest_run_id(), RecordedRun.load(source, RUN_ID).last_step) == before
