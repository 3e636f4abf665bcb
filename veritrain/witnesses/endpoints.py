"""The witnesses a log pushes its tree heads to: ``VERITRAIN_WITNESSES``.

The setting is a list of ``VKEY@URL`` items separated by spaces or commas, where VKEY is the
witness's C2SP verifier key (signature type 0x04, as ``veritrain witness keygen`` prints it)
and URL its tlog-witness submission prefix (``POST <URL>/add-checkpoint``)::

    VERITRAIN_WITNESSES="w1.example+1a2b3c4d+BAbc...=@https://w1.example, w2+...@http://10.0.0.2:7380"

Light on purpose (settings import it): it parses and checks, and talks to no one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from attestation.errors import AttestationError
from attestation.keys import COSIGNATURE_V1_ALGORITHM, PublicKey

_SEPARATORS = re.compile(r"[\s,]+")
_MAX_NAME = 255
"""The ledger stores witness names in a 255-character column (ledger/models.py NAME_LENGTH)."""


@dataclass(frozen=True)
class WitnessEndpoint:
    """One witness: the key its cosignatures must verify under, and where to reach it."""

    vkey: str
    """C2SP verifier key, signature type 0x04."""
    url: str
    """Submission prefix, without a trailing slash."""

    @property
    def key(self) -> PublicKey:
        return PublicKey.from_vkey(self.vkey, signature_type=COSIGNATURE_V1_ALGORITHM)

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def add_checkpoint_url(self) -> str:
        return f"{self.url}/add-checkpoint"


def parse_witness(item: str) -> WitnessEndpoint:
    """Parse one ``VKEY@URL`` item; raise ValueError with a message meant for a person."""
    # A key name may contain '@' and a URL may too (user info), but the key's base64 part,
    # after the second '+', cannot: the first '@' after it ends the key.
    parts = item.split("+", 2)
    if len(parts) != 3 or "@" not in parts[2]:
        raise ValueError(f"expected VKEY@URL, got {item!r}")
    blob, _, url = parts[2].partition("@")
    vkey = f"{parts[0]}+{parts[1]}+{blob}"
    try:
        key = PublicKey.from_vkey(vkey, signature_type=COSIGNATURE_V1_ALGORITHM)
    except AttestationError as exc:
        raise ValueError(
            f"{item!r}: expected a witness verifier key (signature type 0x04, from "
            f"`veritrain witness keygen`): {exc}"
        ) from None
    if len(key.name) > _MAX_NAME:
        raise ValueError(f"{item!r}: expected a witness name of at most {_MAX_NAME} characters")
    split = urlsplit(url)
    if split.scheme not in ("http", "https") or not split.netloc or split.query or split.fragment:
        raise ValueError(f"{item!r}: expected an http:// or https:// URL after '@', got {url!r}")
    return WitnessEndpoint(vkey=key.vkey, url=url.rstrip("/"))


def parse_witnesses(value: str) -> tuple[WitnessEndpoint, ...]:
    """Parse the whole setting (empty: no witnesses); a witness key may appear only once."""
    endpoints = tuple(parse_witness(item) for item in _SEPARATORS.split(value.strip()) if item)
    seen: set[str] = set()
    for endpoint in endpoints:
        if endpoint.vkey in seen:
            raise ValueError(f"witness key {endpoint.vkey!r} is listed twice")
        seen.add(endpoint.vkey)
    return endpoints


def parse_witness_option(item: str) -> tuple[str, WitnessEndpoint | None]:
    """A verifier's ``--witness``: ``VKEY`` (its cosignature is required) or ``VKEY@URL`` (its
    cosignature is required, and its current view of the log is asked at URL). Return the vkey
    and the endpoint (None without URL); raise ValueError with a message meant for a person."""
    parts = item.split("+", 2)
    if len(parts) == 3 and "@" in parts[2]:
        endpoint = parse_witness(item)
        return endpoint.vkey, endpoint
    return item, None
