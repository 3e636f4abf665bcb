"""The ledger: one append-only, RFC 9162 Merkle-logged, C2SP-signed log per training run.

Entry points: :class:`ledger.service.Ledger` (append and query), :mod:`ledger.merkle`
(proofs and verifiers), :mod:`ledger.note` / :mod:`ledger.tlog_checkpoint` / :mod:`ledger.receipt`
(signed notes, tree heads, offline receipts), :func:`ledger.audit.audit_run_log` (the run
audit, no database needed), :func:`ledger.db.upgrade` (schema migrations). See docs/ledger.md.
"""
