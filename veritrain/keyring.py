"""The private keys of a deployment and its runs, kept as C2SP signer-key files (mode 0600)
under ``VERITRAIN_KEY_DIR``::

    <key_dir>/platform-root.key            endorses every attestation key (the "platform")
    <key_dir>/runs/<run_id>/log.key        signs the run's tree heads; named by the run's origin
    <key_dir>/runs/<run_id>/statement.key  signs the run's DSSE provenance statements
    <key_dir>/runs/<run_id>/attester-<j>.key   cluster j's attestation key (quotes)
    <key_dir>/runs/<run_id>/cluster-<j>.key    cluster j's contribution-signing key

Keys are created on first use and never replaced (``attestation.keys.load_or_create``), so a
resumed run signs with the keys its genesis committed to. Only public keys leave this folder:
the genesis entry and the ledger's enrolled-keys table carry their C2SP verifier strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attestation.keys import SigningKey, load_or_create
from ledger.envelope import check_run_id
from ledger.errors import LedgerError


@dataclass(frozen=True)
class KeyRing:
    root: Path
    origin: str
    """The deployment's origin prefix (``VERITRAIN_ORIGIN``)."""

    def run_origin(self, run_id: str) -> str:
        return f"{self.origin}/runs/{run_id}"

    def platform_root(self) -> SigningKey:
        return load_or_create(self.root / "platform-root.key", f"{self.origin}/platform-root")

    def log_key(self, run_id: str) -> SigningKey:
        return self._run_key(run_id, "log", self.run_origin(run_id))

    def statement_key(self, run_id: str) -> SigningKey:
        return self._run_key(run_id, "statement", f"{self.run_origin(run_id)}/statement")

    def attester_key(self, run_id: str, cluster: int) -> SigningKey:
        return self._run_key(run_id, f"attester-{cluster}", f"{self.run_origin(run_id)}/attester-{cluster}")

    def cluster_key(self, run_id: str, cluster: int) -> SigningKey:
        return self._run_key(run_id, f"cluster-{cluster}", f"{self.run_origin(run_id)}/cluster-{cluster}")

    def __call__(self, origin: str) -> SigningKey:
        """The ledger's ``LogKeys``: the log key of the run whose origin is ``origin``."""
        prefix = f"{self.origin}/runs/"
        if not origin.startswith(prefix):
            raise LedgerError(f"expected a log origin under {prefix!r}, got {origin!r}")
        return self.log_key(origin[len(prefix) :])

    def _run_key(self, run_id: str, file_stem: str, name: str) -> SigningKey:
        check_run_id(run_id)  # the run id becomes a folder name: no '/', no '..'
        return load_or_create(self.root / "runs" / run_id / f"{file_stem}.key", name)
