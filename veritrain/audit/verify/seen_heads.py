"""What this verifier has seen of a run before (trust on first use, like an SSH known_hosts).

The first successful verification of a run from a source remembers the run's log origin,
log key, signed size and root, and whether it had finished, under
``$VERITRAIN_WITNESS_DIR`` (default ``~/.cache/veritrain/witness``), keyed by the run id and
the source (an API URL, or a database and store). Later verifications of the same run from
the same source insist on the same origin and key, on a tree head at least as large and
consistent with the remembered one (RFC 9162 §2.1.4 consistency proof), and on a ``run.final``
if the run was seen finished -- so a log rewritten under a new origin prefix or key, rolled
back, or forked is caught even when every byte the source returns is self-consistent.

This protects a *returning* verifier only; a first-time verifier is protected by witnesses
(C2SP tlog-witness cosignatures) and by pinning the log key (``--vkey``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from veritrain.errors import VeritrainError


@dataclass(frozen=True)
class Sighting:
    run_id: str
    source: str
    """Where the run was read from (the source's description)."""
    origin: str
    vkey: str
    size: int
    root_hash: str
    finished: bool


class SeenHeads:
    def __init__(self, directory: Path | None = None) -> None:
        default = Path(
            os.environ.get("VERITRAIN_WITNESS_DIR")
            or Path.home() / ".cache" / "veritrain" / "witness"
        )
        self.directory = directory or default

    def _path(self, run_id: str, source: str) -> Path:
        key = hashlib.sha256(f"{run_id}\n{source}".encode()).hexdigest()[:32]
        return self.directory / f"{key}.json"

    def last_seen(self, run_id: str, source: str) -> Sighting | None:
        path = self._path(run_id, source)
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
            return Sighting(
                run_id=str(data["run_id"]),
                source=str(data["source"]),
                origin=str(data["origin"]),
                vkey=str(data["vkey"]),
                size=int(data["size"]),
                root_hash=str(data["root_hash"]),
                finished=bool(data["finished"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise VeritrainError(
                f"the record of heads seen before at {path} is "
                f"unreadable ({exc!r}); remove it to start afresh"
            ) from None

    def remember(self, sighting: Sighting) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(sighting.run_id, sighting.source)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(sighting), sort_keys=True, indent=2) + "\n")
        tmp.replace(path)
