"""``veritrain verify``: re-check a whole recorded run from its ledger and objects.

The checks, in order (each a group in the report; every failure names the entry index and
outer step):

1. the latest signed tree head verifies under the run's log key (pinned, previously seen, or
   named by the genesis) and extends the head this verifier saw before;
2. every entry is canonical, in place, hash-chained by ``prev``, and the leaves hash to the
   signed root with the signed size;
3. the log's inclusion proof of every entry verifies against the signed root;
4. every step's DSSE statement is signed by the run's statement key and names exactly the
   entry's checkpoint, previous checkpoint, data shards, code and metrics;
5. every cluster's quote is endorsed by the platform root, carries the reference launch
   measurement, replays from the recorded statements, answers the nonce fixed by the log
   just before the entry, and binds the previous leaf and the statement;
6. every contribution is signed by its cluster, and every applied exchange combines exactly
   the contributions signed in its round;
7. every checkpoint manifest hashes to its digest and root; files are re-hashed;
8. the data manifest matches its entry; shards are re-hashed; steps read training shards only;
9. the metrics table equals the metrics signed in the entries.
"""

from __future__ import annotations

from attestation.errors import AttestationError
from ledger.errors import LedgerError
from veritrain.verify.evidence_checks import check_contributions, check_quotes, check_statements
from veritrain.verify.log_checks import check_chain, check_inclusion, check_tree_head, remember
from veritrain.verify.object_checks import (
    check_checkpoints,
    check_data,
    check_metrics,
    load_data_index,
    shard_digests,
)
from veritrain.verify.report import Report
from veritrain.verify.source import RunSource
from veritrain.verify.view import RunView
from veritrain.verify.witness import Witness


def verify_run(
    source: RunSource,
    run_id: str | None = None,
    *,
    deep: bool = False,
    vkey: str | None = None,
    witness: Witness | None = None,
) -> Report:
    """Run every check on ``run_id`` (default: the most recent run) and return the report."""
    run_id = run_id or source.latest_run_id()
    view = RunView.from_bodies(run_id, source.entry_bodies(run_id))
    report = Report(run_id=run_id, source=source.description)
    note = source.tree_head(run_id)

    try:
        head = check_tree_head(report, view, note, pinned_vkey=vkey, witness=witness, source=source)
    except (LedgerError, AttestationError) as exc:
        report.check(1).fail(str(exc))
        head = None
    chain_ok = check_chain(report, view, note, head)
    check_inclusion(report, view, source, head)
    data = load_data_index(report, view, source)
    check_statements(report, view, source, shard_digests(data))
    check_quotes(report, view, source)
    check_contributions(report, view, source)
    seed_root = head.checkpoint.root_hash if head else b""
    check_checkpoints(report, view, source, deep=deep, seed_root=seed_root)
    check_data(report, view, source, data, deep=deep, seed_root=seed_root)
    check_metrics(report, view, source)

    steps = [e.step for e in view.outer_steps if e.step is not None]
    report.summary = {
        "entries": len(view.entries),
        "outer steps": len(steps),
        "finished": any(e.kind == "run.final" for e in view.entries),
    }
    if head is not None:
        report.summary["tree size"] = head.checkpoint.size
    if report.ok and chain_ok:
        remember(witness, head)
    return report
