"""Rewriting a recorded run the way an operator holding every key could, built on the
project's own library (tests only).

The operator of an embedded deployment holds the key folder: the log key, the statement key,
the platform root, and every cluster's attestation and contribution keys. A :class:`Forger`
reads a run's entries, lets a test edit their payloads, and rebuilds the whole log from
scratch: every entry re-appended through ``ledger.service.Ledger`` (new hash chain, new tree
heads signed with the log key), and every outer step re-attested with those keys through the
project's own signers (a fresh statement over the edited parameters, fresh quotes bound to the
new log, fresh contribution signatures by every cluster's key). This models an operator who
also holds every cluster's key folder, as on a one-host deployment. The result is as
self-consistent as the operator can make it; ``tests/e2e/test_forger.py`` shows which
rewrites ``veritrain verify`` still catches and which only witnesses or independent cluster
keys could.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from attestation.canonical import canonical_digest
from attestation.statement import CodeDigest
from ledger.db import create_engine
from ledger.service import Ledger
from records import KIND_OUTER_STEP, Genesis, OuterStep, parse_record
from records.commitments import InnerCommitments
from records.genesis import RunKeys
from records.outer_step import ClusterContributions, StepAttestation, aggregate_digest
from storage import ObjectStore, open_store
from trainer.recorder import AttestationRequest, ContributionDigest
from veritrain.cluster_identity import ClusterKeyFolder, ClusterSigner
from veritrain.record.keyring import KeyRing
from veritrain.settings import Settings
from veritrain.step_attestation import StatementSigner, shard_dependency, statement_parameters

Payloads = list[tuple[str, dict[str, Any]]]
"""(kind, payload) of every entry, in log order."""

_RUN_TABLES = (
    "metrics",
    "cosignatures",
    "tree_heads",
    "tree_nodes",
    "enrolled_keys",
    "entries",
    "runs",
)


@dataclass(frozen=True)
class Forger:
    settings: Settings
    run_id: str

    def payloads(self) -> Payloads:
        engine = create_engine(self.settings.database_url)
        try:
            return [
                (e.kind, copy.deepcopy(e.payload))
                for e in Ledger(engine).entries(self.run_id, 0, 1000)
            ]
        finally:
            engine.dispose()

    def rewrite(
        self,
        edit: Callable[[Payloads], Payloads],
        *,
        key_dir: Path | None = None,
        origin: str | None = None,
        clock: Callable[[], datetime] | None = None,
        reattest: bool = True,
    ) -> None:
        """Rebuild the run's log from ``edit(payloads)``, re-signing and re-attesting every
        step with the coordinator's and every cluster's keys. ``key_dir``/``origin``: rebuild
        under new keys (``<key_dir>`` and ``<key_dir>/cluster-keys``) and another origin prefix;
        ``clock``: the times the entries are recorded at. ``reattest=False``: an operator who
        holds only the coordinator's keys (the log and statement keys): payloads are kept as
        edited, quotes and cluster signatures are not remade."""
        payloads = edit(self.payloads())
        origin = origin or self.settings.origin
        keys = KeyRing(key_dir or self.settings.keys_path, origin)
        cluster_root = (
            (key_dir / "cluster-keys") if key_dir else self.settings.data_dir / "cluster-keys"
        )
        genesis = Genesis.from_payload(payloads[0][1])
        folders = [
            ClusterKeyFolder(cluster_root / f"cluster-{c}", origin)
            for c in range(genesis.topology.clusters)
        ]
        if reattest:
            genesis = replace(
                genesis,
                keys=RunKeys(
                    log=keys.log_key(self.run_id).public.vkey,
                    statement=keys.statement_key(self.run_id).public.vkey,
                    # the checkpoints' model.sig stay valid
                    model_signing=genesis.keys.model_signing,
                    # what each cluster's process measured and signed, signed again as it is
                    clusters=tuple(
                        f.enrol(
                            self.run_id,
                            genesis.config_digest,
                            c,
                            hardware=genesis.keys.cluster(c).hardware,
                        )
                        for c, f in enumerate(folders)
                    ),
                ),
            )
        self._drop_run()
        engine = create_engine(self.settings.database_url)
        try:
            ledger = Ledger(
                engine, origin=origin, log_keys=keys, **({"clock": clock} if clock else {})
            )
            ledger.create_run(self.run_id, genesis.to_payload())
            with open_store(self.settings.store_url) as store:
                now = datetime.now(
                    UTC
                )  # endorsements are made now, whatever times the entries claim
                signers = [
                    ClusterSigner(
                        keys=folder,
                        run_id=self.run_id,
                        cluster=c,
                        stage=s,
                        store=store,
                        tee_type=genesis.tee.type,
                        launch_measurement=bytes.fromhex(genesis.tee.launch_measurement),
                        now=now,
                    )
                    for c, folder in enumerate(folders)
                    for s in range(genesis.topology.stages)
                    if reattest  # the clusters' signers attest only when steps are re-attested
                ]
                statements = StatementSigner(
                    run_id=self.run_id,
                    key=keys.statement_key(self.run_id),
                    store=store,
                    code=CodeDigest(
                        source_sha256=genesis.code.source_sha256, git_commit=genesis.code.git_commit
                    ),
                )
                shards = self._shard_digests(payloads)
                history: list[str] = []
                for kind, payload in payloads[1:]:
                    if kind == KIND_OUTER_STEP and reattest:
                        step = self._reattest(
                            ledger,
                            statements,
                            signers,
                            history,
                            genesis,
                            OuterStep.from_payload(payload),
                            shards,
                            store,
                        )
                        ledger.append(
                            self.run_id,
                            kind,
                            step.to_payload(),
                            step=step.step,
                            metrics=dict(step.metrics),
                        )
                    elif kind == KIND_OUTER_STEP:
                        metrics = payload.get("metrics")
                        ledger.append(
                            self.run_id, kind, payload, step=payload["step"], metrics=metrics
                        )
                    else:
                        ledger.append(self.run_id, kind, payload)
        finally:
            engine.dispose()

    def _reattest(
        self,
        ledger: Ledger,
        statements: StatementSigner,
        signers: list[ClusterSigner],
        history: list[str],
        genesis: Genesis,
        step: OuterStep,
        shards: dict[int, str],
        store: ObjectStore,
    ) -> OuterStep:
        statement_object, statement_digest = statements.sign(
            step=step.step,
            manifest_root=step.checkpoint.manifest_root,
            previous_manifest_root=step.checkpoint.previous_manifest_root,
            hyperparameters=statement_parameters(
                method=step.method,
                inner_steps=step.inner_steps,
                compression=step.compression,
                config_digest=genesis.config_digest,
            ),
            data_shards=[shard_dependency(i, shards[i]) for i in step.shards_read() if i in shards],
            metrics_digest=canonical_digest(dict(step.metrics)),
        )
        history.append(statement_digest)
        head = ledger.latest_tree_head(self.run_id)
        request = AttestationRequest(
            step=step.step,
            nonce=head.root_hash.hex(),
            prev_leaf=ledger.entry(self.run_id, head.size - 1).leaf_hash.hex(),
            statement_digest=statement_digest,
            statements=tuple(history),
        )
        own = step.signed_contributions()
        # The clusters' recorded per-inner-step commitments, signed again as they are.
        commitments = {
            (c.cluster, s.stage): InnerCommitments.from_payload(
                json.loads(store.read_bytes(s.commitments, 1 << 24))
            )
            for c in step.contributions
            for s in c.stages
        }
        evidence = [
            e
            for signer, (c, s) in zip(
                signers,
                [
                    (c, s)
                    for c in range(genesis.topology.clusters)
                    for s in range(genesis.topology.stages)
                ],
                strict=True,
            )
            if (
                e := signer.attest(
                    request,
                    ContributionDigest(cluster=c, stage=s, digest=own[(c, s)])
                    if (c, s) in own
                    else None,
                    commitments.get((c, s)),
                )
            )
        ]
        contributions = tuple(
            ClusterContributions(
                cluster=c,
                stages=tuple(
                    e.contribution
                    for e in evidence
                    if e.cluster == c and e.contribution is not None
                ),
            )
            for c in sorted({c for c, _ in own})
        )
        quotes = tuple(e.quote for e in evidence if e.quote is not None)
        return replace(
            step,
            metrics_digest=canonical_digest(dict(step.metrics)),
            aggregate_digest=aggregate_digest(step.applied),
            contributions=contributions,
            attestation=StepAttestation(
                statement_object=statement_object,
                statement_digest=statement_digest,
                nonce=head.root_hash.hex(),
                quotes=quotes,
            ),
        )

    def _shard_digests(self, payloads: Payloads) -> dict[int, str]:
        record = parse_record(payloads[1][0], payloads[1][1])
        manifest = getattr(record, "manifest", None)
        shards = getattr(manifest, "shards", ())
        return {s.index: s.sha256 for s in shards}

    def _drop_run(self) -> None:
        engine = create_engine(self.settings.database_url)
        try:
            with engine.begin() as connection:
                for table in _RUN_TABLES:
                    column = "id" if table == "runs" else "run_id"
                    connection.execute(
                        sa.text(f"delete from {table} where {column} = :run"), {"run": self.run_id}
                    )
        finally:
            engine.dispose()
