"""The public HTTP API as a run's source (``--api URL``): only the read-only endpoints of
DESIGN.md §7, so an auditor needs nothing but the URL.

Nothing it returns is trusted, and nothing it returns may crash its caller: an answer that
is not the JSON shape the API documents (docs/web.md) is a :class:`SourceError` naming the
endpoint and what was wrong, which a verifier reports as a failed check.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx

from storage.errors import ObjectNotFoundError, StorageError
from veritrain.errors import SourceError
from veritrain.sources.base import SMALL_OBJECT_LIMIT, MetricRow

PAGE = 1000
PROOF_REQUESTS_IN_FLIGHT = 8
_HASH = re.compile(r"[0-9a-f]{64}")
T = TypeVar("T")


class ApiSource:
    def __init__(
        self, base_url: str, *, timeout: float = 60.0, client: httpx.Client | None = None
    ) -> None:
        self._base = base_url.rstrip("/")
        self._client = client or httpx.Client(timeout=timeout, follow_redirects=True)
        self.description = self._base

    def _get(self, path: str, **params: Any) -> httpx.Response:
        url = f"{self._base}/api/v1{path}"
        try:
            response = self._client.get(url, params=params or None)
        except httpx.HTTPError as exc:
            raise SourceError(f"cannot reach {url}: {exc}") from None
        if response.status_code >= 400:
            raise SourceError(f"{url} answered {response.status_code}: {_detail(response)}")
        return response

    def _json(self, path: str, read: Callable[[Any], T], **params: Any) -> T:
        """GET ``path`` and read its JSON with ``read``; any malformation is a SourceError."""
        response = self._get(path, **params)
        try:
            return read(response.json())
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SourceError(f"{response.url} answered malformed JSON: {exc!r}") from None

    def latest_run_id(self) -> str:
        runs = self._json("/runs", lambda d: [_str(r["run_id"]) for r in _list(d["runs"])])
        if not runs:
            raise SourceError(f"{self._base} lists no runs")
        return runs[0]

    def entry_bodies(self, run_id: str) -> list[bytes]:
        bodies: list[bytes] = []
        start: int | None = 0
        while start is not None:
            page_bodies, start = self._json(
                f"/runs/{run_id}/entries", _entry_page, start=start, limit=PAGE
            )
            if start is not None and start <= len(bodies):
                raise SourceError(
                    f"{self._base}: the entry pages do not advance (next_start {start})"
                )
            bodies.extend(page_bodies)
        return bodies

    def tree_head(self, run_id: str) -> str:
        return self._get(f"/runs/{run_id}/log/checkpoint").text

    def inclusion_proofs(self, run_id: str, size: int) -> Iterator[list[bytes]]:
        # One request per entry (the API serves single proofs), a few in flight at a time.
        def fetch(index: int) -> list[bytes]:
            return self._json(
                f"/runs/{run_id}/log/proof/inclusion", _hashes, index=index, size=size
            )

        with ThreadPoolExecutor(max_workers=PROOF_REQUESTS_IN_FLIGHT) as pool:
            yield from pool.map(fetch, range(size))

    def consistency_proof(self, run_id: str, old: int, new: int) -> list[bytes]:
        return self._json(f"/runs/{run_id}/log/proof/consistency", _hashes, old=old, new=new)

    def metrics(self, run_id: str) -> list[MetricRow]:
        return self._json(f"/runs/{run_id}/metrics", _metric_rows)

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
        if response.status_code >= 400 or "content-length" not in response.headers:
            raise StorageError(
                f"HEAD {url} answered {response.status_code} without a Content-Length"
            )
        try:
            return int(response.headers["content-length"])
        except ValueError:
            raise StorageError(
                f"HEAD {url} answered Content-Length {response.headers['content-length']!r}"
            ) from None

    def read_range(self, digest: str, start: int, end: int) -> bytes:
        """One ``Range: bytes=start-(end-1)`` request (RFC 9110 §14.2): the API answers 206 with
        those bytes (or 302 to a presigned S3 URL, which honours it too)."""
        url = f"{self._base}/api/v1/objects/{digest}"
        try:
            response = self._client.get(url, headers={"Range": f"bytes={start}-{end - 1}"})
        except httpx.HTTPError as exc:
            raise StorageError(
                f"downloading bytes {start}-{end - 1} of {url} failed: {exc}"
            ) from None
        if response.status_code == 404:
            raise ObjectNotFoundError(f"object {digest} is not stored (GET {url}: 404)")
        if response.status_code != 206 or len(response.content) != end - start:
            raise StorageError(
                f"GET {url} with Range bytes={start}-{end - 1}: "
                f"expected 206 with {end - start} bytes, "
                f"got {response.status_code} with {len(response.content)}"
            )
        return response.content

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ApiSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else response.text[:200]


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected an array, got {type(value).__name__}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _entry_page(document: Any) -> tuple[list[bytes], int | None]:
    bodies = [_str(entry["body"]).encode() for entry in _list(document["entries"])]
    following = document["next_start"]
    return bodies, None if following is None else _int(following)


def _hashes(document: Any) -> list[bytes]:
    hashes = _list(document["hashes"])
    for item in hashes:
        if not isinstance(item, str) or not _HASH.fullmatch(item):
            raise ValueError(f"expected proof hashes as 64 lowercase hex digits, got {item!r}")
    return [bytes.fromhex(h) for h in hashes]


def _metric_rows(document: Any) -> list[MetricRow]:
    rows: list[MetricRow] = []
    for series in _list(document["series"]):
        key = _str(series["key"])
        steps, values = _list(series["steps"]), _list(series["values"])
        if len(steps) != len(values):
            raise ValueError(f"metric {key!r}: {len(steps)} steps but {len(values)} values")
        rows.extend(
            MetricRow(step=_int(step), key=key, value=value)
            for step, value in zip(steps, values, strict=True)
        )
    return rows
