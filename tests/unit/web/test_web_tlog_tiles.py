"""Each run's log served as C2SP tlog-tiles, read by a client written from the spec text
(unit/web/c2sp_tile_client.py): it rebuilds the signed root from the tiles and checks every
entry bundle against the level-0 hashes -- at sizes that are not multiples of 256."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from unit.ledger.witness_helpers import SmallLog, small_log
from unit.web.c2sp_tile_client import TileClient, mth, tile_path

from ledger.db import upgrade
from web.app import create_app
from web.settings import AppSettings


@dataclass
class TiledRun:
    log: SmallLog
    api: TestClient

    def client(self) -> TileClient:
        prefix = f"/api/v1/runs/{self.log.run_id}/tlog/"

        def get(path: str) -> bytes:
            response = self.api.get(prefix + path)
            assert response.status_code == 200, (path, response.status_code, response.text)
            return response.content

        return TileClient(get, self.log.vkey)

    def get(self, path: str, **headers: str):  # type: ignore[no-untyped-def]
        return self.api.get(f"/api/v1/runs/{self.log.run_id}/tlog/{path}", headers=headers)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TiledRun]:
    root = tmp_path_factory.mktemp("tiles")
    url = f"sqlite:///{root / 'ledger.db'}"
    upgrade(url)
    # Recorded straight through ledger.service.Ledger: 300 entries, genesis included.
    log = small_log(url, run_id="tiled", entries=300)
    with TestClient(
        create_app(AppSettings(database_url=url, store_url=f"file://{root / 'objects'}"))
    ) as api:
        yield TiledRun(log=log, api=api)


def test_the_root_is_rebuilt_from_the_tiles_and_every_bundle_matches_the_level_0_hashes(
    run: TiledRun,
) -> None:
    client = run.client()
    checkpoint = client.checkpoint()
    assert (checkpoint.origin, checkpoint.size) == (run.log.origin, 300)

    # From the fewest tiles: 300 = 256 + 32 + 8 + 4; the 256 comes from the level-1 tile.
    assert client.root_from_tiles(checkpoint.size) == checkpoint.root
    assert client.fetched == ["tile/1/000.p/1", "tile/0/001.p/44"]
    # From every leaf hash, and the level-1 hash is the MTH of the full level-0 tile.
    assert mth(client.leaf_hashes(checkpoint.size)) == checkpoint.root
    assert client.check_upper_tiles(checkpoint.size) == 1
    entries = client.entries(checkpoint.size)
    assert len(entries) == 300
    assert [e for e in entries[:2]] == [run.log.ledger.entry("tiled", i).body for i in range(2)]


def test_a_growing_log_stays_readable_past_a_tile_boundary(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    log = small_log(url, run_id="growing", entries=1)
    with TestClient(
        create_app(AppSettings(database_url=url, store_url=f"file://{tmp_path / 'o'}"))
    ) as api:
        tiled = TiledRun(log=log, api=api)
        for target in (1, 255, 256, 257, 513):
            log.grow(target - log.ledger.get_run("growing").size)
            client = tiled.client()
            checkpoint = client.checkpoint()
            assert checkpoint.size == target
            assert client.root_from_tiles(target) == checkpoint.root, target
            assert mth(client.leaf_hashes(target)) == checkpoint.root
            assert len(client.entries(target)) == target
        # At 513: two full level-0 tiles, a partial of width 1, and a level-1 partial of 2.
        assert client.check_upper_tiles(513) == 2
        assert "tile/1/000.p/2" in client.fetched


def test_partial_tiles_of_earlier_checkpoints_are_served_and_agree(run: TiledRun) -> None:
    # A checkpoint of size 266 existed; its partial level-0 tile is the first 10 hashes of 300's.
    early = run.get("tile/0/001.p/10")
    late = run.get("tile/0/001.p/44")
    assert early.status_code == late.status_code == 200
    assert early.content == late.content[: 10 * 32]
    bundle = run.get("tile/entries/001.p/10")
    assert bundle.status_code == 200


def test_full_tiles_are_immutable_and_partial_ones_short_lived(run: TiledRun) -> None:
    full = run.get("tile/0/000")
    assert full.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert full.headers["content-type"] == "application/octet-stream"
    assert len(full.content) == 8192
    assert run.get("tile/0/001.p/44").headers["cache-control"] == "public, max-age=5"
    assert (
        run.get("tile/entries/000").headers["cache-control"]
        == "public, max-age=31536000, immutable"
    )
    checkpoint = run.get("checkpoint")
    assert checkpoint.headers["content-type"] == "text/plain; charset=utf-8"
    assert checkpoint.headers["cache-control"] == "public, max-age=5"


def test_entry_bundles_are_gzipped_for_clients_that_accept_it(run: TiledRun) -> None:
    plain = run.get("tile/entries/000", **{"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers
    assert plain.headers["vary"] == "Accept-Encoding"
    url = "/api/v1/runs/tiled/tlog/tile/entries/000"
    with run.api.stream("GET", url, headers={"Accept-Encoding": "gzip"}) as response:
        wire = b"".join(response.iter_raw())  # the bytes as sent, before httpx decodes them
        assert response.headers["content-encoding"] == "gzip"
    assert gzip.decompress(wire) == plain.content
    assert len(wire) < len(plain.content) / 2


@pytest.mark.parametrize(
    "path",
    [
        "tile/0/002",  # beyond the log
        "tile/0/001",  # not full yet
        "tile/0/001.p/45",  # wider than the log's partial tile
        "tile/1/000",  # level 1 is not full
        "tile/2/000.p/1",  # the log has no level-2 hash yet
        "tile/entries/001.p/45",
        "tile/0/x000/001.p/44",  # not the shortest spelling of index 1
        "tile/0/1.p/44",  # not 3 digits
        "tile/0/000.p/256",  # a partial width is 1..255
        "tile/0/000.p/0",
        "tile/0/000.p/08",
        "tile/64/000",  # levels are 0..63
        "tile/01/000",
        "tile/x/000",
        "tile/0/001/.p/44",
    ],
)
def test_tiles_the_log_does_not_have_are_404(run: TiledRun, path: str) -> None:
    assert run.get(path).status_code == 404


def test_the_client_path_encoding_is_the_specs_example() -> None:
    assert tile_path(0, 1234067, 256) == "tile/0/x001/x234/067"
    assert tile_path("entries", 5, 17) == "tile/entries/005.p/17"


def test_an_unknown_run_is_404(run: TiledRun) -> None:
    assert run.api.get("/api/v1/runs/nope/tlog/checkpoint").status_code == 404
    assert run.api.get("/api/v1/runs/nope/tlog/tile/0/000.p/1").status_code == 404
