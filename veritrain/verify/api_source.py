"""The public HTTP API as a verifier's source (``--api URL``): only the read-only endpoints of
DESIGN.md §7, so an auditor needs nothing but the URL. Nothing it returns is trusted; hashes
arrive as lowercase hex (docs/web.md) and every object is re-hashed by the checks."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from storage.errors import ObjectNotFoundError, StorageError
from veritrain.verify.source import SMALL_OBJECT_LIMIT, MetricRow, SourceError

PAGE = 1000
PROOF_REQUESTS_IN_FLIGHT = 8


class ApiSource:
    def __init__(self, base_url: str, *, timeout: float = 60.0, client: httpx.Client | None = None) -> None:
        self._base = base_url.rstrip("/")
        self._client = client or httpx.Client(timeout=timeout, follow_redirects=True)
        self.description = self._base

    def _get(self, path: str, **params: Any) -> httpx.Response:
        url = f"{self._base}/api/v1{path}"
        try:
            response = self._client.get(url, params=params or None)
        except httpx.HTTPError as exc:
            raise SourceError(f"cannot reach {url}: {exc}") from None
        if response.status_code == 404:
            raise SourceError(f"{url}: {response.json().get('detail', 'not found')}")
        if response.status_code >= 400:
            raise SourceError(f"{url} answered {response.status_code}: {response.text[:200]}")
        return response

    def latest_run_id(self) -> str:
        runs = self._get("/runs").json()["runs"]
        if not runs:
            raise SourceError(f"{self._base} lists no runs")
        return str(runs[0]["run_id"])

    def entry_bodies(self, run_id: str) -> list[bytes]:
        bodies: list[bytes] = []
        start: int | None = 0
        while start is not None:
            page = self._get(f"/runs/{run_id}/entries", start=start, limit=PAGE).json()
            bodies.extend(entry["body"].encode() for entry in page["entries"])
            start = page["next_start"]
        return bodies

    def tree_head(self, run_id: str) -> str:
        return self._get(f"/runs/{run_id}/log/checkpoint").text

    def inclusion_proofs(self, run_id: str, size: int) -> Iterator[list[bytes]]:
        # One request per entry (the API serves single proofs), a few in flight at a time.
        def fetch(index: int) -> list[bytes]:
            proof = self._get(f"/runs/{run_id}/log/proof/inclusion", index=index, size=size).json()
            return [bytes.fromhex(h) for h in proof["hashes"]]

        with ThreadPoolExecutor(max_workers=PROOF_REQUESTS_IN_FLIGHT) as pool:
            yield from pool.map(fetch, range(size))

    def consistency_proof(self, run_id: str, old: int, new: int) -> list[bytes]:
        proof = self._get(f"/runs/{run_id}/log/proof/consistency", old=old, new=new).json()
        return [bytes.fromhex(h) for h in proof["hashes"]]

    def metrics(self, run_id: str) -> list[MetricRow]:
        answer = self._get(f"/runs/{run_id}/metrics").json()
        return [
            MetricRow(step=int(step), key=series["key"], value=float(value))
            for series in answer["series"]
            for step, value in zip(series["steps"], series["values"], strict=True)
        ]

    def read_object(self, digest: str, max_size: int = SMALL_OBJECT_LIMIT) -> bytes:
        data = bytearray()
        for chunk in self.stream_object(digest):
            data.extend(chunk)
            if len(data) > max_size:
                raise StorageError(f"object {digest} is larger than {max_size} bytes")
        return bytes(data)

    def stream_object(self, digest: str) -> Iterator[bytes]:
        url = f"{self._base}/api/v1/objects/{digest}"
        try:
            with self._client.stream("GET", url) as response:
                if response.status_code == 404:
                    raise ObjectNotFoundError(f"object {digest} is not stored (GET {url}: 404)")
                if response.status_code >= 400:
                    raise StorageError(f"GET {url} answered {response.status_code}")
                yield from response.iter_bytes(1 << 20)
        except httpx.HTTPError as exc:
            raise StorageError(f"downloading {url} failed: {exc}") from None

    def object_size(self, digest: str) -> int:
        url = f"{self._base}/api/v1/objects/{digest}"
        try:
            response = self._client.head(url)
        except httpx.HTTPError as exc:
            raise StorageError(f"HEAD {url} failed: {exc}") from None
        if response.status_code == 404:
            raise ObjectNotFoundError(f"object {digest} is not stored")
        return int(response.headers["content-length"])

    def close(self) -> None:
        self._client.close()
