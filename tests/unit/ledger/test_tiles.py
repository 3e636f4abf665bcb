"""The tlog-tiles layout (``ledger.tiles``) against the examples of the C2SP text."""

from __future__ import annotations

import pytest

from ledger.errors import TileNotFoundError
from ledger.tiles import (
    Tile,
    available_width,
    check_available,
    encode_index,
    entry_bundle,
    parse_tile_path,
)


def tiles_of(size: int) -> list[str]:
    """Every tile path a tree of ``size`` has, by the server's rules."""
    paths = []
    level = 0
    while size >> (8 * level):
        count = size >> (8 * level)
        for index in range(-(-count // 256)):
            width = available_width(Tile(level=level, index=index), size)
            paths.append(Tile(level=level, index=index, width=width).path())
        level += 1
    return paths


def test_the_spec_example_of_a_tree_of_70000() -> None:
    # "a tree of size 70,000 will be represented by 273 full level 0 tiles, one partial level
    # 0 tile of width 112, one full level 1 tile, one partial level 1 tile of width 17, and
    # one partial level 2 tile of width 1."
    paths = tiles_of(70_000)
    level0 = [p for p in paths if p.startswith("tile/0/")]
    assert len([p for p in level0 if ".p/" not in p]) == 273
    assert [p for p in level0 if ".p/" in p] == ["tile/0/273.p/112"]
    assert [p for p in paths if p.startswith("tile/1/")] == ["tile/1/000", "tile/1/001.p/17"]
    assert [p for p in paths if p.startswith("tile/2/")] == ["tile/2/000.p/1"]


def test_the_spec_example_of_a_tree_of_256() -> None:
    # "a tree of size 256 will be represented by a full level 0 tile and a partial level 1
    # tile of width 1."
    assert tiles_of(256) == ["tile/0/000", "tile/1/000.p/1"]


@pytest.mark.parametrize(
    ("index", "path"),
    [(0, "000"), (5, "005"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067")],
)
def test_index_encoding(index: int, path: str) -> None:
    assert encode_index(index) == path
    assert parse_tile_path(f"0/{path}") == Tile(level=0, index=index)


def test_paths_round_trip() -> None:
    for tile in (
        Tile(level=None, index=3, width=17),
        Tile(level=63, index=10**9),
        Tile(level=2, index=0, width=1),
    ):
        assert parse_tile_path(tile.path().removeprefix("tile/")) == tile


def test_a_tile_is_available_once_the_tree_covers_it() -> None:
    check_available(Tile(level=0, index=1, width=44), 300)
    check_available(Tile(level=0, index=1, width=10), 300)  # an earlier checkpoint's partial tile
    for tile in (
        Tile(level=0, index=1),
        Tile(level=0, index=1, width=45),
        Tile(level=1, index=0, width=2),
    ):
        with pytest.raises(TileNotFoundError, match="in a log of 300 entries"):
            check_available(tile, 300)


def test_nodes_of_a_tile_are_the_stored_subtrees() -> None:
    assert Tile(level=1, index=2, width=3).nodes() == [(8, 512), (8, 513), (8, 514)]
    assert Tile(level=None, index=1, width=2).entry_range() == (256, 258)


def test_an_entry_bundle_frames_each_entry_with_a_big_endian_uint16_length() -> None:
    assert entry_bundle([b"ab", b"", b"x" * 300]) == b"\x00\x02ab\x00\x00\x01\x2c" + b"x" * 300
