"""What a witness holds for a log *now*, asked of the witness itself, never of the log.

C2SP tlog-witness, "Monitor Retrieval Mechanism": a witness serves the latest checkpoint it
cosigned for each log at ``<prefix>/<lowercase hex SHA-256 of the origin>/checkpoint`` (our
witness: ``web/witness_app.py``, at its submission prefix). The note carries the log's own
signature and the witness's cosignature, so what comes back proves two things at once: the
log key signed a tree of that size, and the witness checked it against everything it saw.

That is what catches a rollback to a head the witnesses once cosigned: the operator can serve
an old head *with* the old cosignatures, but it cannot make a witness forget the larger tree it
cosigned since (veritrain/audit/verify/witness_checks.py, veritrain/witnesses/push.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from ledger.cosignature import cosignatures_in
from ledger.errors import VerificationError
from ledger.tlog_checkpoint import Checkpoint, verify_checkpoint
from ledger.witness.witness import origin_hash
from veritrain.witnesses.endpoints import WitnessEndpoint


class WitnessViewError(Exception):
    """The witness could not be asked, or its answer does not verify (one line for a person)."""


@dataclass(frozen=True)
class WitnessView:
    """One witness's current view of one log."""

    witness: str
    """The witness's key name."""
    checkpoint: Checkpoint | None
    """The latest checkpoint it cosigned for the origin, verified under the log key and the
    witness key; None when it answers that it never cosigned one (404)."""
    timestamp: int | None = None
    """When the witness cosigned it (the cosignature's time, seconds since the epoch)."""

    @property
    def size(self) -> int:
        return 0 if self.checkpoint is None else self.checkpoint.size


def fetch_view(
    endpoint: WitnessEndpoint,
    origin: str,
    log_vkeys: Sequence[str],
    *,
    client: httpx.Client,
    timeout_s: float = 10.0,
) -> WitnessView:
    """GET ``endpoint``'s monitoring view of ``origin`` and verify it: a log signature under
    one of ``log_vkeys`` and the witness's own cosignature. Raise :class:`WitnessViewError`
    when there is no answer or it does not verify."""
    url = f"{endpoint.url}/{origin_hash(origin)}/checkpoint"
    try:
        response = client.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise WitnessViewError(f"no answer from {url}: {type(exc).__name__}: {exc}") from None
    if response.status_code == 404:
        return WitnessView(witness=endpoint.name, checkpoint=None)
    if response.status_code != 200:
        raise WitnessViewError(f"{url} answered HTTP {response.status_code}")
    note = response.text
    try:
        checkpoint = verify_checkpoint(note, log_vkeys, origin=origin)
        cosigned = cosignatures_in(note, [endpoint.key])
    except VerificationError as exc:
        raise WitnessViewError(f"{url}: the checkpoint served does not verify: {exc}") from None
    if not cosigned:
        raise WitnessViewError(f"{url}: the checkpoint served carries no cosignature of its own")
    return WitnessView(
        witness=endpoint.name,
        checkpoint=checkpoint,
        timestamp=cosigned[0].cosignature.timestamp,
    )


def fetch_origins(
    endpoint: WitnessEndpoint, *, client: httpx.Client, timeout_s: float = 10.0
) -> list[tuple[str, int]]:
    """Every log ``endpoint`` has cosigned, as (origin, size): ``GET <url>/origins``, which
    ``veritrain witness serve`` answers (not part of tlog-witness). Raise
    :class:`WitnessViewError` when there is no such list."""
    url = f"{endpoint.url}/origins"
    try:
        response = client.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise WitnessViewError(f"no answer from {url}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise WitnessViewError(f"{url} answered HTTP {response.status_code}")
    origins: list[tuple[str, int]] = []
    for line in response.text.splitlines():
        origin, _, size = line.rpartition(" ")
        if not origin or not size.isdigit():
            raise WitnessViewError(f"{url}: expected '<origin> <size>' lines, got {line[:80]!r}")
        origins.append((origin, int(size)))
    return origins
