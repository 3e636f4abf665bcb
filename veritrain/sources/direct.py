"""The run as the ledger database and the object store of the settings hold it."""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import make_url

from ledger.db import create_engine, sqlite_file_missing
from ledger.errors import LedgerError, NotFoundError
from ledger.service import Ledger
from storage import ObjectStore, open_store
from storage.errors import StorageError
from veritrain.errors import SourceError
from veritrain.settings import Settings
from veritrain.sources.base import SMALL_OBJECT_LIMIT, MetricRow


class DirectSource:
    """Reads the ledger database and the object store named by the settings."""

    def __init__(self, settings: Settings) -> None:
        if sqlite_file_missing(settings.database_url):
            raise SourceError(
                f"there is no ledger at {settings.database_url}: "
                "run `veritrain demo` or `veritrain train` first, "
                "or point VERITRAIN_DATABASE_URL at the run's database (or use --api URL)"
            )
        self._engine = create_engine(settings.database_url)
        self.ledger = Ledger(self._engine)
        self._store: ObjectStore = open_store(settings.store_url)
        url = make_url(settings.database_url).render_as_string(hide_password=True)
        self.description = f"{url} + {settings.store_url}"

    def latest_run_id(self) -> str:
        runs = sorted(self.ledger.list_runs(), key=lambda r: r.created_at)
        if not runs:
            raise SourceError(
                "the ledger has no runs yet: train one with `veritrain train` or `veritrain demo`"
            )
        return runs[-1].run_id

    def entry_bodies(self, run_id: str) -> list[bytes]:
        bodies: list[bytes] = []
        try:
            while page := self.ledger.entries(run_id, start=len(bodies), limit=1000):
                bodies.extend(e.body for e in page)
        except NotFoundError as exc:
            raise SourceError(str(exc)) from None
        return bodies

    def tree_head(self, run_id: str) -> str:
        try:
            return self.ledger.cosigned_tree_head(run_id).note
        except LedgerError as exc:
            raise SourceError(str(exc)) from None

    def inclusion_proofs(self, run_id: str, size: int) -> Iterator[list[bytes]]:
        try:
            proofs = self.ledger.inclusion_proofs(run_id, size)
        except LedgerError as exc:
            raise SourceError(str(exc)) from None
        for proof in proofs:
            yield list(proof.hashes)

    def consistency_proof(self, run_id: str, old: int, new: int) -> list[bytes]:
        try:
            return list(self.ledger.consistency_proof(run_id, old, new).hashes)
        except LedgerError as exc:
            raise SourceError(str(exc)) from None

    def metrics(self, run_id: str) -> list[MetricRow]:
        return [
            MetricRow(step=m.step, key=m.key, value=m.value) for m in self.ledger.metrics(run_id)
        ]

    def read_object(self, digest: str, max_size: int = SMALL_OBJECT_LIMIT) -> bytes:
        return self._store.read_bytes(digest, max_size)

    def stream_object(self, digest: str) -> Iterator[bytes]:
        with self._store.open(digest) as reader:
            yield from reader

    def object_size(self, digest: str) -> int:
        return self._store.size(digest)

    def read_range(self, digest: str, start: int, end: int) -> bytes:
        with self._store.open(digest, start, end) as reader:
            data = reader.read()
        if len(data) != end - start:
            raise StorageError(
                f"object {digest} has no bytes [{start}, {end}): got {len(data)} bytes"
            )
        return data

    def close(self) -> None:
        self._store.close()
        self._engine.dispose()

    def __enter__(self) -> DirectSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
