"""Checks 4–6: each outer step's provenance statement, its attestation quotes, and the
clusters' signed contributions (DESIGN.md §5, docs/records.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from attestation.attester import SOFTWARE_TEE_TYPE, QuoteExpectations
from attestation.canonical import canonical_digest
from attestation.contribution import Contribution, verify_contribution
from attestation.dsse import Envelope, verify_envelope
from attestation.errors import AttestationError
from attestation.keys import PublicKey
from attestation.measurement import launch_measurement
from attestation.quote import Quote, report_data
from attestation.statement import IN_TOTO_PAYLOAD_TYPE, parse_statement
from attestation.verifier import SoftwarePolicy, verify_quote
from ledger.merkle import root_hash
from storage.errors import StorageError
from veritrain.step_attestation import outer_step_events
from veritrain.verify.report import CheckResult, Report
from veritrain.verify.source import RunSource, read_verified
from veritrain.verify.view import RunView, ViewEntry

_FETCH_ERRORS = (StorageError, OSError, ValueError, KeyError, TypeError, AttestationError)


def check_statements(report: Report, view: RunView, source: RunSource, shard_digests: Mapping[int, str] | None) -> None:
    """4. Every outer step's DSSE envelope is signed by the run's statement key and its
    in-toto/SLSA statement names exactly what the entry records: the checkpoint (subject),
    the previous checkpoint, the data shards read, the code, the metrics."""
    result = report.check(4)
    genesis = view.genesis
    try:
        statement_key = PublicKey.from_vkey(genesis["keys"]["statement"])
    except (KeyError, TypeError, AttestationError) as exc:
        result.fail(f"the genesis names no valid statement key: {exc}", index=0)
        return
    previous_root: str | None = None
    for entry in view.outer_steps:
        result.checked += 1
        step = entry.step
        try:
            _check_statement(view.run_id, entry, source, statement_key, genesis, previous_root, shard_digests)
        except _FETCH_ERRORS as exc:
            result.fail(str(exc), index=entry.index, step=step)
        previous_root = _get(entry.payload, "checkpoint", "manifest_root")


def _check_statement(
    run_id: str,
    entry: ViewEntry,
    source: RunSource,
    key: PublicKey,
    genesis: Mapping[str, Any],
    previous_root: str | None,
    shard_digests: Mapping[int, str] | None,
) -> None:
    payload = entry.payload
    attestation = payload["attestation"]
    envelope = Envelope.from_json(read_verified(source, attestation["statement_object"]))
    verified = verify_envelope(envelope, keys=[key], payload_type=IN_TOTO_PAYLOAD_TYPE)
    digest = hashlib.sha256(verified.payload).hexdigest()
    _expect("statement digest", attestation["statement_digest"], digest)
    statement = parse_statement(verified.payload)
    _expect("statement run", run_id, statement.run_id)
    _expect("statement step", payload["step"], statement.step)
    _expect("statement subject (manifest root)", payload["checkpoint"]["manifest_root"], statement.manifest_root)
    _expect("statement previous checkpoint", previous_root, statement.previous_manifest_root)
    _expect("statement code digest", genesis["code"]["source_sha256"], statement.code.source_sha256)
    _expect("statement metrics digest", canonical_digest(payload.get("metrics", {})), statement.metrics_digest)
    _expect("entry metrics digest", canonical_digest(payload.get("metrics", {})), payload["metrics_digest"])
    if shard_digests is not None:
        read = sorted(
            {i for r in payload["data_ranges"] for first, last in r["shards"] for i in range(int(first), int(last) + 1)}
        )
        missing = [i for i in read if i not in shard_digests]
        if missing:
            raise ValueError(f"data ranges name shards {missing[:5]} that the data manifest does not list")
        expected = sorted((f"shard-{i:06d}", shard_digests[i]) for i in read)
        _expect("statement data shards", expected, sorted((s.name, s.sha256) for s in statement.data_shards))


def check_quotes(report: Report, view: RunView, source: RunSource) -> None:
    """5. Every cluster's quote for every step: endorsed by the genesis platform root, for the
    genesis attester key, with the reference launch measurement, registers that replay from the
    recorded statements, a nonce equal to the log root just before the entry (freshness), and
    report_data binding nonce, previous leaf and statement."""
    result = report.check(5)
    genesis = view.genesis
    try:
        tee = genesis["tee"]
        policy = _quote_policy(genesis, result)
        attesters = [PublicKey.from_vkey(v) for v in genesis["keys"]["attesters"]]
    except (KeyError, TypeError, ValueError, AttestationError) as exc:
        result.fail(f"the genesis attestation settings are unusable: {exc}", index=0)
        return
    if policy is None:
        return
    result.notes.append(f"TEE type {tee['type']!r}: binds steps to keys and measurements, not hardware isolation")
    leaves = [e.leaf for e in view.entries]
    statements: list[str] = []
    for entry in view.outer_steps:
        attestation = entry.payload.get("attestation", {})
        statement_digest = attestation.get("statement_digest", "")
        statements.append(statement_digest)
        try:
            nonce = root_hash(leaves[: entry.index])
            _expect("nonce (log root before this entry)", nonce.hex(), attestation["nonce"])
            binding = report_data(nonce, leaves[entry.index - 1], bytes.fromhex(statement_digest))
            quotes = {int(q["cluster"]): q["object"] for q in attestation["quotes"]}
            _expect("quoting clusters", list(range(len(attesters))), sorted(quotes))
        except _FETCH_ERRORS as exc:
            result.fail(str(exc), index=entry.index, step=entry.step)
            continue
        expected = QuoteExpectations(
            nonce=nonce,
            report_data=binding,
            event_log=outer_step_events(statements),
            at=entry.recorded_at or datetime.now(UTC),
        )
        for cluster, digest in sorted(quotes.items()):
            result.checked += 1
            try:
                quote = Quote.from_json(read_verified(source, digest))
                _expect(f"cluster {cluster} attestation key", attesters[cluster].vkey, quote.endorsement.body.attestation_key.vkey)
                verify_quote(quote, policy=policy, expected=expected)
            except _FETCH_ERRORS as exc:
                result.fail(f"cluster {cluster} quote: {exc}", index=entry.index, step=entry.step)


def _quote_policy(genesis: Mapping[str, Any], result: CheckResult) -> SoftwarePolicy | None:
    tee = genesis["tee"]
    if tee["type"] != SOFTWARE_TEE_TYPE:
        result.fail(f"this verifier checks software-TEE runs only, the genesis says {tee['type']!r}", index=0)
        return None
    reference = tee["reference"]
    recomputed = launch_measurement(
        code_digest=reference["code_digest"],
        dependency_digest=reference["dependency_digest"],
        config_digest=reference["config_digest"],
    )
    measurement = bytes.fromhex(tee["launch_measurement"])
    if recomputed != measurement:
        result.fail("the genesis launch measurement does not hash its own reference digests", index=0)
    for name, actual in (
        ("code_digest", genesis["code"]["source_sha256"]),
        ("dependency_digest", genesis["dependencies"]["sha256"]),
        ("config_digest", genesis["config_digest"]),
    ):
        if reference[name] != actual:
            result.fail(f"genesis reference {name} {reference[name]} differs from the recorded {actual}", index=0)
    return SoftwarePolicy(
        platform_roots=(PublicKey.from_vkey(genesis["keys"]["platform_root"]),),
        launch_measurement=measurement,
        minimum_svn=int(tee.get("minimum_svn", 0)),
    )


def check_contributions(report: Report, view: RunView, source: RunSource) -> None:
    """6. Every (cluster, stage) contribution is signed by that cluster's genesis key, and
    every exchange applied in a step combines exactly the contributions signed in its round."""
    result = report.check(6)
    try:
        keys = [PublicKey.from_vkey(v) for v in view.genesis["keys"]["clusters"]]
    except (KeyError, TypeError, AttestationError) as exc:
        result.fail(f"the genesis names no valid cluster keys: {exc}", index=0)
        return
    signed_by_step: dict[int, dict[tuple[int, int], str]] = {}
    for entry in view.outer_steps:
        step = entry.step
        own: dict[tuple[int, int], str] = {}
        for cluster_record in entry.payload.get("contributions", []):
            cluster = int(cluster_record["cluster"])
            for stage_record in cluster_record["stages"]:
                result.checked += 1
                stage, digest = int(stage_record["stage"]), str(stage_record["digest"])
                try:
                    envelope = Envelope.from_json(read_verified(source, stage_record["signature_object"]))
                    verify_contribution(
                        envelope,
                        key=keys[cluster],
                        expected=Contribution(run_id=view.run_id, step=int(step or 0), cluster=cluster, stage=stage, payload_digest=digest),
                    )
                except (*_FETCH_ERRORS, IndexError) as exc:
                    result.fail(f"cluster {cluster} stage {stage} contribution: {exc}", index=entry.index, step=step)
                own[(cluster, stage)] = digest
        if step is not None:
            signed_by_step[step] = own
        for applied in entry.payload.get("applied", []):
            round_ = int(applied["round"])
            used = {(int(c["cluster"]), int(c["stage"])): str(c["digest"]) for c in applied["contribution_digests"]}
            if round_ in signed_by_step and used != signed_by_step[round_]:
                result.fail(
                    f"the exchange of round {round_} applied here combines payloads other than the ones signed in step {round_}",
                    index=entry.index,
                    step=step,
                )
        ordered = sorted(
            (int(a["round"]), int(c["cluster"]), int(c["stage"]), str(c["digest"]))
            for a in entry.payload.get("applied", [])
            for c in a["contribution_digests"]
        )
        if canonical_digest([list(o) for o in ordered]) != entry.payload.get("aggregate_digest"):
            result.fail("aggregate digest does not match the applied contributions", index=entry.index, step=step)


def _expect(what: str, expected: object, actual: object) -> None:
    if expected != actual:
        raise ValueError(f"{what}: expected {expected!r}, got {actual!r}")


def _get(payload: Mapping[str, Any], *path: str) -> Any:
    value: Any = payload
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value
