"""``veritrain verify``: re-check a whole recorded run from its log and objects.

The checks, in order (each a group in the report; every failure names the entry index and
outer step):

1. the latest signed tree head verifies under the run's log key (pinned or named by the
   genesis) and, for a returning verifier, extends the head it saw before from this source
   under the same origin and key (and still ends finished if it was); with ``--witness ...
   --quorum K``, K given witnesses cosigned it (or a larger, consistent head);
2. every entry is canonical, in place, hash-chained by ``prev``, reads as its kind's typed
   record, has a later ``recorded_at`` than the one before, and the log has the run's layout;
   the leaves hash to the signed root with the signed size;
3. the log's inclusion proof of every entry verifies against the signed root;
4. every step's DSSE statement is signed by the run's statement key and names exactly what the
   genesis and the entry imply (checkpoint, previous checkpoint, parameters, code, data
   shards, metrics);
5. every cluster's quote is endorsed by the platform root, carries the reference launch
   measurement, replays from the recorded statements, answers the nonce fixed by the log just
   before the entry, and binds the previous leaf and the statement;
6. every contribution is signed by its cluster, and the exchanges applied name signed rounds
   in order, none twice or missing, combining exactly the contributions signed;
7. every checkpoint manifest hashes to its digest and root; files are re-hashed; every file
   of every revision besides the tensors (model config, tokenizer files, index, trainer state)
   is recomputed from the genesis and the data manifest, and no other file is there; every
   step's generations object hashes to its digest and answers the configured prompts;
8. the data manifest matches its entry; shards are re-hashed; the assignment rule and every
   step's data ranges are recomputed;
9. the metrics table equals the metrics signed in the entries;
10. the genesis: it names only rules this veritrain implements (docs/records.md, "Versions"),
    config digest recomputed, configuration consistent, TEE reference and verification policy
    within the published bounds;
11. ``run.final`` recomputed from the last outer step;
12. every applied exchange's verdicts follow from the recorded numbers by the genesis' rules,
    and (for a sample of steps) the numbers themselves -- statistics, contribution scores -- and
    the step's weights are recomputed from the stored contributions.

Nothing the source says is trusted, and nothing it sends can crash the verifier: a malformed
answer is a failed check in the report.
"""

from __future__ import annotations

from collections.abc import Sequence

from records import Genesis
from veritrain.audit.verify.cluster_key_checks import check_cluster_keys
from veritrain.audit.verify.commitment_checks import check_final, check_genesis
from veritrain.audit.verify.data_checks import check_data, load_data
from veritrain.audit.verify.evidence_checks import (
    check_contributions,
    check_quotes,
    check_statements,
)
from veritrain.audit.verify.log_checks import (
    check_chain,
    check_inclusion,
    check_tree_head,
    remember,
)
from veritrain.audit.verify.object_checks import check_checkpoints, check_generations, check_metrics
from veritrain.audit.verify.report import Report
from veritrain.audit.verify.revision_checks import check_revision_files
from veritrain.audit.verify.seen_heads import SeenHeads
from veritrain.audit.verify.verdict_checks import check_verdicts
from veritrain.audit.verify.witness_checks import check_witnesses
from veritrain.errors import SourceError
from veritrain.sources import RunSource
from veritrain.sources.recorded_run import RecordedRun


def verify_run(
    source: RunSource,
    run_id: str | None = None,
    *,
    deep: bool = False,
    vkey: str | None = None,
    seen_heads: SeenHeads | None = None,
    witnesses: Sequence[str] = (),
    quorum: int | None = None,
    cluster_keys: Sequence[tuple[int, str]] = (),
) -> Report:
    """Run every check on ``run_id`` (default: the most recent run) and return the report.
    ``cluster_keys``: (cluster, vkey) pairs an auditor learned out of band (``--cluster-key``)."""
    run_id = run_id or source.latest_run_id()
    report = Report(run_id=run_id, source=source.description)
    try:
        run = RecordedRun.from_bodies(run_id, source.entry_bodies(run_id))
    except SourceError as exc:
        report.check(2).fail(f"the run's entries cannot be read: {exc}")
        return report
    try:
        note: str | None = source.tree_head(run_id)
    except SourceError as exc:
        report.check(1).fail(f"the signed tree head cannot be read: {exc}")
        note = None

    head = check_tree_head(
        report, run, note, pinned_vkey=vkey, seen_heads=seen_heads, source=source
    )
    cosigners = check_witnesses(
        report,
        run,
        note,
        head,
        source,
        witnesses=witnesses,
        quorum=len(witnesses) if quorum is None else quorum,
        origin_pinned=vkey is not None,
    )
    check_chain(report, run, note, head)
    check_inclusion(report, run, source, head)
    config = check_genesis(report, run)
    genesis = run.genesis_entry.record if run.genesis_entry is not None else None
    genesis = genesis if isinstance(genesis, Genesis) else None
    report.cluster_keys = check_cluster_keys(report, genesis, cluster_keys)
    data = load_data(report, run, source)
    check_statements(report, run, genesis, source, data.manifest.shard_digests if data else None)
    check_quotes(report, run, genesis, source)
    check_contributions(report, run, genesis, source)
    signed_root = head.checkpoint.root_hash if head else b""
    revisions = check_checkpoints(report, run, genesis, source, deep=deep, signed_root=signed_root)
    check_revision_files(
        report, run, genesis, config, data.manifest if data else None, source, revisions
    )
    check_generations(report, run, source, config)
    check_data(report, run, source, data, config, deep=deep, signed_root=signed_root)
    check_metrics(report, run, source)
    check_final(report, run, config)
    check_verdicts(report, run, source, config, data, deep=deep, signed_root=signed_root)

    report.summary = {
        "entries": len(run.entries),
        "outer steps": len(run.step_entries),
        "finished": run.final_entry is not None,
    }
    if head is not None:
        report.summary["tree size"] = head.checkpoint.size
        report.summary["log origin"] = head.checkpoint.origin
    if witnesses:
        report.summary["witnessed by"] = ", ".join(cosigners) or "none"
    if report.ok:
        remember(seen_heads, run, source, head)
    return report
