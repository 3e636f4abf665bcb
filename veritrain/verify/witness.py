"""What this verifier has seen of a log before (trust on first use, like an SSH known_hosts).

The first successful verification of a run remembers its log key and signed size and root
under ``$VERITRAIN_WITNESS_DIR`` (default ``~/.cache/veritrain/witness``). Later ones insist
on the same key and on a tree head that is consistent with the remembered one (RFC 9162
§2.1.4 consistency proof), so a log rewritten and re-signed with a new key, or rolled back to
an older size, is caught even when every byte the server returns is self-consistent.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Sighting:
    origin: str
    vkey: str
    size: int
    root_hash: str


class Witness:
    def __init__(self, directory: Path | None = None) -> None:
        default = Path(os.environ.get("VERITRAIN_WITNESS_DIR") or Path.home() / ".cache" / "veritrain" / "witness")
        self.directory = directory or default

    def _path(self, origin: str) -> Path:
        return self.directory / f"{hashlib.sha256(origin.encode()).hexdigest()[:32]}.json"

    def last_seen(self, origin: str) -> Sighting | None:
        path = self._path(origin)
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        return Sighting(origin=data["origin"], vkey=data["vkey"], size=int(data["size"]), root_hash=data["root_hash"])

    def remember(self, sighting: Sighting) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(sighting.origin)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(sighting.__dict__, sort_keys=True, indent=2) + "\n")
        tmp.replace(path)
