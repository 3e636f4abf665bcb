"""Checks 4–6: each outer step's provenance statement, its attestation quotes, and the
clusters' signed contributions and the exchanges applied from them (DESIGN.md §5,
docs/records.md). Every expected value is recomputed from the genesis and the entries, never
taken from the object being checked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from attestation.attester import QuoteExpectations, QuotePolicy, QuoteVerifier
from attestation.canonical import canonical_digest
from attestation.contribution import Contribution, verify_contribution
from attestation.dsse import Envelope, verify_envelope
from attestation.errors import AttestationError, UnknownTeeTypeError
from attestation.keys import PublicKey
from attestation.quote import report_data
from attestation.registry import tee_backend
from attestation.statement import IN_TOTO_PAYLOAD_TYPE, DataShard, parse_statement
from ledger.merkle import root_hash
from records import Genesis, OuterStep
from records.outer_step import UNCOMPRESSED_BITS, Compression, aggregate_digest
from storage.errors import StorageError
from veritrain.audit.verify.expect import Mismatch, expect
from veritrain.audit.verify.inner_commitment_checks import check_inner_commitments
from veritrain.audit.verify.report import Report
from veritrain.errors import VeritrainError
from veritrain.sources import RunSource, read_verified
from veritrain.sources.recorded_run import LogEntry, RecordedRun
from veritrain.step_attestation import outer_step_events, shard_dependency, statement_parameters

_FETCH_ERRORS = (StorageError, VeritrainError, ValueError, AttestationError)
"""What fetching and checking one object can raise: a failed check of that object, never a
verifier bug (KeyError/TypeError are not caught: typed records leave none to catch)."""


def check_statements(
    report: Report,
    run: RecordedRun,
    genesis: Genesis | None,
    source: RunSource,
    shard_digests: Mapping[int, str] | None,
) -> None:
    """4. Every outer step's DSSE envelope is signed by the run's statement key, and its
    in-toto/SLSA statement names exactly what the genesis and the entry imply: the run and
    step, the checkpoint (subject) and the previous one, the parameters (config digest,
    method, H, compression), the code (source digest and git commit), the data shards the
    step read and the metrics."""
    result = report.check(4)
    if genesis is None:
        result.fail("not checked: no readable genesis")
        return
    try:
        statement_key = PublicKey.from_vkey(genesis.keys.statement)
    except AttestationError as exc:
        result.fail(f"the genesis names no valid statement key: {exc}", index=0)
        return
    previous_root: str | None = None
    for entry, step in run.outer_steps:
        result.checked += 1
        try:
            _check_statement(
                run.run_id, step, genesis, source, statement_key, previous_root, shard_digests
            )
        except _FETCH_ERRORS as exc:
            result.fail(str(exc), index=entry.index, step=step.step)
        previous_root = step.checkpoint.manifest_root


def _check_statement(
    run_id: str,
    step: OuterStep,
    genesis: Genesis,
    source: RunSource,
    key: PublicKey,
    previous_root: str | None,
    shard_digests: Mapping[int, str] | None,
) -> None:
    attestation = step.attestation
    envelope = Envelope.from_json(read_verified(source, attestation.statement_object))
    verified = verify_envelope(envelope, keys=[key], payload_type=IN_TOTO_PAYLOAD_TYPE)
    expect(
        "statement digest",
        attestation.statement_digest,
        hashlib.sha256(verified.payload).hexdigest(),
    )
    statement = parse_statement(verified.payload)
    expect("statement run", run_id, statement.run_id)
    expect("statement step", step.step, statement.step)
    expect(
        "statement subject (manifest root)", step.checkpoint.manifest_root, statement.manifest_root
    )
    expect("statement previous checkpoint", previous_root, statement.previous_manifest_root)
    expect("entry previous checkpoint", previous_root, step.checkpoint.previous_manifest_root)
    expect("entry method", genesis.method, step.method)
    expect(
        "statement parameters",
        statement_parameters(
            method=genesis.method,
            inner_steps=step.inner_steps,
            compression=step.compression,
            config_digest=genesis.config_digest,
        ),
        dict(statement.hyperparameters),
    )
    expect("statement code digest", genesis.code.source_sha256, statement.code.source_sha256)
    expect("statement git commit", genesis.code.git_commit, statement.code.git_commit)
    expect(
        "statement metrics digest", canonical_digest(dict(step.metrics)), statement.metrics_digest
    )
    expect("entry metrics digest", canonical_digest(dict(step.metrics)), step.metrics_digest)
    if shard_digests is not None:
        read = step.shards_read()
        missing = [i for i in read if i not in shard_digests]
        if missing:
            raise Mismatch(
                f"data ranges name shards {missing[:5]} that the data manifest does not list"
            )
        expected = sorted(_key(shard_dependency(i, shard_digests[i])) for i in read)
        expect("statement data shards", expected, sorted(_key(s) for s in statement.data_shards))


def _key(shard: DataShard) -> tuple[str, str]:
    return shard.name, shard.sha256


def check_quotes(
    report: Report, run: RecordedRun, genesis: Genesis | None, source: RunSource
) -> None:
    """5. Every cluster's quote for every step: endorsed by that cluster's enrolled platform root
    for that cluster's enrolled attestation key, valid at the time the entry was recorded, with the
    reference launch measurement, registers that replay from the recorded statements, a nonce equal
    to the log root just before the entry (freshness), and report_data binding nonce, previous leaf
    and statement."""
    result = report.check(5)
    if genesis is None:
        result.fail("not checked: no readable genesis")
        return
    tee = genesis.tee
    try:
        # The genesis names the TEE type; the registry holds its verifier (attestation/backends/).
        backend = tee_backend(tee.type)
    except UnknownTeeTypeError as exc:
        result.fail(f"cannot check this run's quotes: {exc}", index=0)
        return
    try:
        verifiers: list[QuoteVerifier] = [
            backend.verifier(
                QuotePolicy(
                    platform_root=PublicKey.from_vkey(k.platform_root),
                    attestation_key=PublicKey.from_vkey(k.attestation),
                    launch_measurement=bytes.fromhex(tee.launch_measurement),
                    minimum_svn=tee.minimum_svn,
                )
            )
            for k in genesis.keys.clusters
        ]
    except AttestationError as exc:
        result.fail(f"the genesis attestation keys are unusable: {exc}", index=0)
        return
    result.notes.append(f"TEE type {tee.type!r}: {backend.assurance}")
    leaves = [e.leaf for e in run.entries]
    statements: list[str] = []
    steps = run.outer_steps
    for position, (entry, step) in enumerate(steps):
        attestation = step.attestation
        statements.append(attestation.statement_digest)
        nonce = root_hash(leaves[: entry.index])
        quotes = {q.cluster: q.object for q in attestation.quotes}
        following = steps[position + 1][1].quorum.clusters if position + 1 < len(steps) else None
        try:
            expect("nonce (log root before this entry)", nonce.hex(), attestation.nonce)
            _check_quoting(step.quorum.clusters, sorted(quotes), following)
            if entry.recorded_at is None:
                raise Mismatch("the entry has no recorded_at to check the quotes' validity against")
        except Mismatch as exc:
            result.fail(str(exc), index=entry.index, step=step.step)
            continue
        expected = QuoteExpectations(
            nonce=nonce,
            report_data=report_data(
                nonce, leaves[entry.index - 1], bytes.fromhex(attestation.statement_digest)
            ),
            event_log=outer_step_events(statements),
            at=entry.recorded_at,
        )
        for cluster, digest in sorted(quotes.items()):
            result.checked += 1
            try:
                if cluster >= len(verifiers):
                    raise Mismatch(f"the genesis enrolls no attestation key for cluster {cluster}")
                verifiers[cluster].verify(read_verified(source, digest), expected)
            except _FETCH_ERRORS as exc:
                result.fail(f"cluster {cluster} quote: {exc}", index=entry.index, step=step.step)


def _check_quoting(
    clusters: Sequence[int], quoting: Sequence[int], following: Sequence[int] | None
) -> None:
    """Quotes come from the step's clusters, every one of them -- but a cluster that left the
    run during the step (it is gone from the next step's quorum) may have stopped before it
    could quote. The last step of a run that ended has no next step to show that."""
    strangers = [c for c in quoting if c not in clusters]
    if strangers:
        raise Mismatch(
            f"quotes from cluster(s) {strangers}, which "
            f"are not in the step's quorum {list(clusters)}"
        )
    missing = [c for c in clusters if c not in quoting]
    if following is None:
        expect("quoting clusters", list(clusters), list(quoting))
    elif any(c in following for c in missing):
        stayed = [c for c in missing if c in following]
        raise Mismatch(
            f"no quote from cluster(s) {stayed} of the step's "
            "quorum, which took part in the next step too"
        )


def check_contributions(
    report: Report, run: RecordedRun, genesis: Genesis | None, source: RunSource
) -> None:
    """6. Every (cluster, stage) contribution is signed by that cluster's genesis key (with its
    per-inner-step commitments, which must have the entry's shape: inner_commitment_checks.py);
    every exchange applied in a step names a round that was signed, in order, none twice and none
    missing, combining exactly the contributions signed in that round; the aggregate digest and the
    step's compression follow from what was applied."""
    result = report.check(6)
    if genesis is None:
        result.fail("not checked: no readable genesis")
        return
    try:
        keys = [PublicKey.from_vkey(k.contribution) for k in genesis.keys.clusters]
    except AttestationError as exc:
        result.fail(f"the genesis names no valid cluster keys: {exc}", index=0)
        return
    signed: dict[int, dict[tuple[int, int], str]] = {}
    next_round = 0
    previous = genesis.topology.present
    for entry, step in run.outer_steps:
        _check_quorum(report, entry, step, previous, genesis.topology.clusters)
        previous = step.quorum.clusters
        expected_pairs = (
            set()
            if genesis.method == "allreduce"
            else {(c, s) for c in step.quorum.clusters for s in range(genesis.topology.stages)}
        )
        own = step.signed_contributions()
        if set(own) != expected_pairs:
            result.fail(
                "expected contributions from (cluster, stage) "
                f"{sorted(expected_pairs)}, got {sorted(own)}",
                index=entry.index,
                step=step.step,
            )
        _check_signatures(report, run, entry, step, keys, source)
        check_inner_commitments(result, run.run_id, entry, step, source)
        if own:
            signed[step.step] = own
        next_round = _check_applied(report, entry, step, signed, next_round)
    if run.final_entry is not None and next_round != len(signed):
        missing = [r for r in sorted(signed) if r >= next_round]
        result.fail(
            f"the run finished without applying the exchange of round(s) {missing}",
            index=run.final_entry.index,
        )


def _check_quorum(
    report: Report, entry: LogEntry, step: OuterStep, previous: Sequence[int], clusters: int
) -> None:
    """The step's clusters are clusters of the run, and what joined and left is what changed
    since the step before (the genesis' starting clusters, for step 0)."""
    result = report.check(6)
    quorum = step.quorum
    try:
        outside = [c for c in quorum.clusters if c >= clusters]
        if outside:
            raise Mismatch(
                f"the quorum names cluster(s) {outside}, but the run has clusters 0..{clusters - 1}"
            )
        expect(
            "clusters that joined",
            sorted(set(quorum.clusters) - set(previous)),
            list(quorum.joined),
        )
        expect(
            "clusters that left", sorted(set(previous) - set(quorum.clusters)), list(quorum.left)
        )
    except Mismatch as exc:
        result.fail(f"quorum: {exc}", index=entry.index, step=step.step)


def _check_signatures(
    report: Report,
    run: RecordedRun,
    entry: LogEntry,
    step: OuterStep,
    keys: list[PublicKey],
    source: RunSource,
) -> None:
    result = report.check(6)
    for cluster_record in step.contributions:
        cluster = cluster_record.cluster
        for stage_record in cluster_record.stages:
            result.checked += 1
            stage = stage_record.stage
            try:
                if cluster >= len(keys):
                    raise Mismatch(f"the genesis enrolls no key for cluster {cluster}")
                envelope = Envelope.from_json(read_verified(source, stage_record.signature_object))
                verify_contribution(
                    envelope,
                    key=keys[cluster],
                    expected=Contribution(
                        run_id=run.run_id,
                        step=step.step,
                        cluster=cluster,
                        stage=stage,
                        payload_digest=stage_record.digest,
                        commitments_digest=stage_record.commitments,
                    ),
                )
            except _FETCH_ERRORS as exc:
                result.fail(
                    f"cluster {cluster} stage {stage} contribution: {exc}",
                    index=entry.index,
                    step=step.step,
                )


def _check_applied(
    report: Report,
    entry: LogEntry,
    step: OuterStep,
    signed: Mapping[int, Mapping[tuple[int, int], str]],
    next_round: int,
) -> int:
    """The exchanges ``step`` applied; returns the round the next applied exchange must be."""
    result = report.check(6)
    for applied in step.applied:
        round_ = applied.round
        used = applied.combined_digests()
        if round_ not in signed or round_ > step.step:
            result.fail(
                f"applies the exchange of round {round_}, which no step before it signed",
                index=entry.index,
                step=step.step,
            )
        elif round_ != next_round:
            what = "again" if round_ < next_round else f"before round {next_round}"
            result.fail(
                f"applies the exchange of round {round_} {what} "
                "(rounds are applied once each, in order)",
                index=entry.index,
                step=step.step,
            )
        elif round_ < step.step - 1:
            result.fail(
                f"applies the exchange of round {round_} more than one step late",
                index=entry.index,
                step=step.step,
            )
        elif used != dict(signed[round_]):
            result.fail(
                f"the exchange of round {round_} applied here combines "
                f"payloads other than the ones signed in step {round_}",
                index=entry.index,
                step=step.step,
            )
        next_round = max(next_round, round_ + 1)
    if aggregate_digest(step.applied) != step.aggregate_digest:
        result.fail(
            "aggregate digest does not match the applied contributions",
            index=entry.index,
            step=step.step,
        )
    last = step.applied[-1] if step.applied else None
    compression = (
        Compression(rank=last.rank, bits=last.bits)
        if last
        else Compression(rank=0, bits=UNCOMPRESSED_BITS)
    )
    if compression != step.compression:
        result.fail(
            f"compression: expected {compression.to_payload()} (the "
            f"last exchange applied), got {step.compression.to_payload()}",
            index=entry.index,
            step=step.step,
        )
    applied_rounds = {a.round for a in step.applied}
    for anomaly in step.anomalies:
        if anomaly.round not in applied_rounds:
            result.fail(
                f"an anomaly names round {anomaly.round}, which this step did not apply",
                index=entry.index,
                step=step.step,
            )
    return next_round
