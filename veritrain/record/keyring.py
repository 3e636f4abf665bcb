"""The coordinator's private keys, kept as C2SP signer-key files (mode 0600) under
``VERITRAIN_KEY_DIR``::

    <key_dir>/runs/<run_id>/log.key        signs the run's tree heads; named by the run's origin
    <key_dir>/runs/<run_id>/statement.key  signs the run's DSSE provenance statements
    <key_dir>/runs/<run_id>/model-signing.pem  signs every checkpoint for OpenSSF model signing

Keys are created on first use and never replaced (``attestation.keys.load_or_create``), so a
resumed run signs with the keys its genesis committed to. No cluster key is ever here: each
cluster keeps its own in its own folder on its own host (veritrain/cluster_identity.py). Only
public keys leave this folder: the genesis entry and the ledger's enrolled-keys table carry
their C2SP verifier strings.
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

    def log_key(self, run_id: str) -> SigningKey:
        return self._run_key(run_id, "log", self.run_origin(run_id))

    def statement_key(self, run_id: str) -> SigningKey:
        return self._run_key(run_id, "statement", f"{self.run_origin(run_id)}/statement")

    def model_signing_key(self, run_id: str) -> Path:
        """Where the run's model-signing key is (an elliptic-curve PEM, created on first use:
        the OpenSSF tool does not sign with Ed25519)."""
        from veritrain.model_signature import load_or_create_key

        check_run_id(run_id)
        path = self.root / "runs" / run_id / "model-signing.pem"
        load_or_create_key(path)
        return path

    def __call__(self, origin: str) -> SigningKey:
        """The ledger's ``LogKeys``: the log key of the run whose origin is ``origin``."""
        prefix = f"{self.origin}/runs/"
        if not origin.startswith(prefix):
            raise LedgerError(f"expected a log origin under {prefix!r}, got {origin!r}")
        return self.log_key(origin[len(prefix) :])

    def _run_key(self, run_id: str, file_stem: str, name: str) -> SigningKey:
        check_run_id(run_id)  # the run id becomes a folder name: no '/', no '..'
        return load_or_create(self.root / "runs" / run_id / f"{file_stem}.key", name)
