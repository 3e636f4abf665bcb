"""OpenSSF model signing of every checkpoint (PyPI ``model-signing``): the file ``model.sig``
that lets the standard tool check a downloaded checkpoint folder::

    huggingface_hub.snapshot_download(repo_id=RUN, revision="step-000012", endpoint=URL,
    local_dir=D) model_signing verify key --public_key model-signing.pub --signature D/model.sig D

The coordinator signs each step's checkpoint with an elliptic-curve key of its own key folder
(``runs/<run>/model-signing.pem``; the tool signs with P-256/384/521 keys, not Ed25519), whose
public key the genesis enrols (``keys.model_signing``). The tool signs a DSSE envelope over an
in-toto statement whose subject digest is the SHA-256 of the files' concatenated digests in
name order -- exactly the checkpoint's manifest root -- and whose predicate lists every file
with its SHA-256 (the "files" serialization our manifests already use).

Signing hashes the folder's files once more (the tool's own hashing); a local store's objects
are hard-linked into the folder, an S3 store's are downloaded. A verifier re-checks a signature
without the files: :func:`check_signature` verifies the envelope under the enrolled key and
compares its statement with the manifest (the standard tool, run on a download, re-hashes the
files themselves).
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from attestation.dsse import pae
from storage import ObjectStore
from storage.checkpoint_files import Manifest
from veritrain.errors import VeritrainError

SIGNATURE_FILE = "model.sig"
"""The signature's name in a checkpoint folder (the tool's default)."""
PREDICATE_TYPE = "https://model_signing/signature/v1.0"


class ModelSignatureError(VeritrainError, ValueError):
    """A model signature does not verify, or signs other files than the checkpoint's."""


def load_or_create_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """The P-256 signing key at ``path`` (PEM, mode 0600), created on first use."""
    if path.exists():
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ModelSignatureError(f"{path}: expected an elliptic-curve private key")
        return key
    key = ec.generate_private_key(ec.SECP256R1())
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pem)
    return key


def public_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def sign_checkpoint(store: ObjectStore, manifest: Manifest, key_path: Path) -> bytes:
    """``model.sig`` of the checkpoint ``manifest`` names, made by the model-signing tool over
    the files (hard-linked from a local store, else downloaded) in a scratch folder."""
    from model_signing import signing  # heavy (sigstore): only the coordinator pays for it

    with tempfile.TemporaryDirectory(prefix="veritrain-sign-") as scratch:
        folder = Path(scratch) / "checkpoint"
        folder.mkdir()
        for entry in manifest.entries:
            target = folder / entry.name
            local = store.local_path(entry.digest)
            if local is not None:
                os.link(local, target)
            else:
                with store.open(entry.digest) as reader, target.open("wb") as out:
                    for chunk in reader:
                        out.write(chunk)
        signature = Path(scratch) / SIGNATURE_FILE
        signing.Config().use_elliptic_key_signer(private_key=key_path).sign(folder, signature)  # type: ignore[no-untyped-call]
        return signature.read_bytes()


def check_signature(signature: bytes, manifest: Manifest, public_key_pem: str) -> None:
    """Return None if ``signature`` (a ``model.sig``) is the enrolled key's signature over
    exactly ``manifest``'s files and root; else raise :class:`ModelSignatureError`."""
    try:
        bundle = json.loads(signature)
        envelope = bundle["dsseEnvelope"]
        payload = base64.b64decode(envelope["payload"], validate=True)
        payload_type = str(envelope["payloadType"])
        signatures = [base64.b64decode(s["sig"], validate=True) for s in envelope["signatures"]]
        statement = json.loads(payload)
        subjects = statement["subject"]
        predicate = statement["predicate"]
        resources = {
            str(r["name"]): (str(r["algorithm"]), str(r["digest"])) for r in predicate["resources"]
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelSignatureError(f"model.sig is not a model-signing bundle: {exc!r}") from None
    key = serialization.load_pem_public_key(public_key_pem.encode())
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ModelSignatureError("the enrolled model-signing key is not an elliptic-curve key")
    message = pae(payload_type, payload)
    if not any(_verifies(key, s, message) for s in signatures):
        raise ModelSignatureError("model.sig does not verify under the genesis' model-signing key")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise ModelSignatureError(
            f"model.sig: expected predicate type {PREDICATE_TYPE}, "
            f"got {statement.get('predicateType')!r}"
        )
    expected = {e.name: ("sha256", e.digest) for e in manifest.entries}
    if resources != expected:
        raise ModelSignatureError(
            f"model.sig signs files {sorted(resources)}, the "
            f"checkpoint holds {sorted(expected)} (or other digests)"
        )
    roots = [s.get("digest", {}).get("sha256") for s in subjects if isinstance(s, dict)]
    if roots != [manifest.root]:
        raise ModelSignatureError(
            f"model.sig: expected the manifest root {manifest.root} as its subject, got {roots}"
        )


def _verifies(key: ec.EllipticCurvePublicKey, signature: bytes, message: bytes) -> bool:
    try:
        key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True
