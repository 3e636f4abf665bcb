"""Rewriting a recorded run the way an operator holding every key could, built on the
project's own library (tests only).

The operator of an embedded deployment holds the key folder: the log key, the statement key,
the platform root, and every cluster's attestation and contribution keys. A :class:`Forger`
reads a run's entries, lets a test edit their payloads, and rebuilds the whole log from
scratch: every entry re-appended through ``ledger.service.Ledger`` (new hash chain, new tree
heads signed with the log key), and every outer step re-attested with those keys through
``veritrain.step_attestation.StepAttestor`` (a fresh statement over the edited parameters,
fresh quotes bound to the new log, fresh contribution signatures). The result is as
self-consistent as the operator can make it; ``tests/e2e/test_forger.py`` shows which
rewrites ``veritrain verify`` still catches and which only witnesses or independent cluster
keys could.
"""

from __future__ import annotations

import copy
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
from records.genesis import RunKeys
from records.outer_step import aggregate_digest
from storage import open_store
from trainer.recorder import ContributionDigest
from veritrain.keyring import KeyRing
from veritrain.settings import Settings
from veritrain.step_attestation import StepAttestor, shard_dependency, statement_parameters

Payloads = list[tuple[str, dict[str, Any]]]
"""(kind, payload) of every entry, in log order."""

_RUN_TABLES = ("metrics", "tree_heads", "tree_nodes", "enrolled_keys", "entries", "runs")


@dataclass(frozen=True)
class Forger:
    settings: Settings
    run_id: str

    def payloads(self) -> Payloads:
        engine = create_engine(self.settings.database_url)
        try:
            return [(e.kind, copy.deepcopy(e.payload)) for e in Ledger(engine).entries(self.run_id, 0, 1000)]
        finally:
            engine.dispose()

    def rewrite(
        self,
        edit: Callable[[Payloads], Payloads],
        *,
        key_dir: Path | None = None,
        origin: str | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        """Rebuild the run's log from ``edit(payloads)``, re-signing and re-attesting every
        step. ``key_dir``/``origin``: rebuild under other keys or another origin prefix;
        ``clock``: the times the entries are recorded at."""
        payloads = edit(self.payloads())
        origin = origin or self.settings.origin
        keys = KeyRing(key_dir or self.settings.keys_path, origin)
        self._drop_run()
        engine = create_engine(self.settings.database_url)
        try:
            ledger = Ledger(engine, origin=origin, log_keys=keys, **({"clock": clock} if clock else {}))
            genesis = Genesis.from_payload(payloads[0][1])
            clusters = range(genesis.topology.clusters)
            genesis = replace(
                genesis,
                keys=RunKeys(
                    log=keys.log_key(self.run_id).public.vkey,
                    statement=keys.statement_key(self.run_id).public.vkey,
                    platform_root=keys.platform_root().public.vkey,
                    attesters=tuple(keys.attester_key(self.run_id, j).public.vkey for j in clusters),
                    clusters=tuple(keys.cluster_key(self.run_id, j).public.vkey for j in clusters),
                ),
            )
            ledger.create_run(self.run_id, genesis.to_payload())
            with open_store(self.settings.store_url) as store:
                attestor = StepAttestor(
                    run_id=self.run_id,
                    keys=keys,
                    store=store,
                    clusters=genesis.topology.clusters,
                    launch_measurement=bytes.fromhex(genesis.tee.launch_measurement),
                    code=CodeDigest(source_sha256=genesis.code.source_sha256, git_commit=genesis.code.git_commit),
                    previous_statements=[],
                    now=datetime.now(UTC),
                )
                shards = self._shard_digests(payloads)
                for kind, payload in payloads[1:]:
                    if kind == KIND_OUTER_STEP:
                        step = self._reattest(ledger, attestor, genesis, OuterStep.from_payload(payload), shards)
                        ledger.append(self.run_id, kind, step.to_payload(), step=step.step, metrics=dict(step.metrics))
                    else:
                        ledger.append(self.run_id, kind, payload)
        finally:
            engine.dispose()

    def _reattest(
        self, ledger: Ledger, attestor: StepAttestor, genesis: Genesis, step: OuterStep, shards: dict[int, str]
    ) -> OuterStep:
        head = ledger.latest_tree_head(self.run_id)
        attestation, contributions = attestor.attest(
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
            nonce=head.root_hash,
            prev_leaf_hash=ledger.entry(self.run_id, head.size - 1).leaf_hash,
            contributions=[
                ContributionDigest(cluster=c, stage=s, digest=d) for (c, s), d in sorted(step.signed_contributions().items())
            ],
        )
        return replace(
            step,
            metrics_digest=canonical_digest(dict(step.metrics)),
            aggregate_digest=aggregate_digest(step.applied),
            attestation=attestation,
            contributions=contributions,
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
                    connection.execute(sa.text(f"delete from {table} where {column} = :run"), {"run": self.run_id})
        finally:
            engine.dispose()
