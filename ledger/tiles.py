"""C2SP tlog-tiles (https://c2sp.org/tlog-tiles): which hashes and entries each tile holds,
and how tiles are named. Pure: no database, no HTTP (``web/routes/tiles.py`` serves them).

A tile is 256 consecutive Merkle tree hashes at one tile level L: hash i of tile N is
MTH(D[(N·256 + i)·256^L : (N·256 + i + 1)·256^L]), the perfect subtree at Merkle level 8·L
and index N·256 + i -- exactly the node ``(8·L, N·256 + i)`` the ledger stores for every
complete perfect subtree (``ledger/subtrees.py``), so tiles are read, never recomputed.
The rightmost tiles of a tree of size s are partial: tile level L holds floor(s / 256^L)
hashes in all, so its last tile has that many mod 256 (never 0: empty tiles do not exist).

Paths, relative to the log's prefix::

    tile/<L>/<N>[.p/<W>]         L in 0..63, no leading zeroes; W in 1..255 for partial tiles
    tile/entries/<N>[.p/<W>]     entry bundles: the level-0 leaves' entries themselves

N is written in zero-padded 3-digit path elements, all but the last prefixed by ``x``:
1234067 is ``x001/x234/067``, 5 is ``005``. Only that shortest spelling is accepted, so
each tile has one URL (one cache entry).

An entry bundle is the entries of one level-0 tile, each as a big-endian uint16 length then
its bytes; here the bytes are the entries' canonical bodies, whose RFC 6962 leaf hashes are
the level-0 tile's hashes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ledger.errors import InvalidRequestError, LedgerError, TileNotFoundError
from ledger.subtrees import Node

TILE_HEIGHT = 8
"""Merkle levels spanned by one tile level."""
TILE_WIDTH = 1 << TILE_HEIGHT
"""Hashes in a full tile (256)."""
MAX_LEVEL = 63
"""tlog-tiles: L is between 0 and 63."""
MAX_ENTRY_BYTES = 0xFFFF
"""An entry in a bundle is prefixed by a uint16 length."""
ENTRIES = "entries"

_LEVEL = re.compile(r"0|[1-9][0-9]?")
_WIDTH = re.compile(r"[1-9][0-9]{0,2}")
_ELEMENT = re.compile(r"[0-9]{3}")
_MAX_ELEMENTS = 7
"""7 elements hold indices below 10^21, beyond any 64-bit tree."""


@dataclass(frozen=True)
class Tile:
    """One tile (``level`` = tile level) or, with ``level`` None, one entry bundle."""

    level: int | None
    index: int
    width: int = TILE_WIDTH
    """Hashes (or entries) it holds: 256 for a full tile, 1..255 for a partial one."""

    def __post_init__(self) -> None:
        if self.level is not None and not 0 <= self.level <= MAX_LEVEL:
            raise InvalidRequestError(f"expected a tile level in 0..{MAX_LEVEL}, got {self.level}")
        if self.index < 0:
            raise InvalidRequestError(f"expected a tile index >= 0, got {self.index}")
        if not 1 <= self.width <= TILE_WIDTH:
            raise InvalidRequestError(f"expected a tile width in 1..{TILE_WIDTH}, got {self.width}")

    @property
    def is_partial(self) -> bool:
        return self.width < TILE_WIDTH

    @property
    def merkle_level(self) -> int:
        """The Merkle level of the hashes in this tile (entry bundles: the leaves, 0)."""
        return TILE_HEIGHT * (self.level or 0)

    def nodes(self) -> list[Node]:
        """The stored perfect subtrees ``(merkle level, index)`` whose hashes it holds."""
        first = self.index * TILE_WIDTH
        return [(self.merkle_level, first + i) for i in range(self.width)]

    def entry_range(self) -> tuple[int, int]:
        """For an entry bundle (or a level-0 tile): the entries [start, end) it holds."""
        if self.level not in (None, 0):
            raise ValueError(f"tile level {self.level} holds subtree hashes, not entries")
        start = self.index * TILE_WIDTH
        return start, start + self.width

    def path(self) -> str:
        """The tile's path under the log prefix, e.g. ``tile/1/x001/234.p/17``."""
        level = ENTRIES if self.level is None else str(self.level)
        suffix = f".p/{self.width}" if self.is_partial else ""
        return f"tile/{level}/{encode_index(self.index)}{suffix}"


def encode_index(index: int) -> str:
    """tlog-tiles index encoding: 1234067 -> ``x001/x234/067``."""
    if index < 0:
        raise ValueError(f"expected an index >= 0, got {index}")
    elements = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        elements.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(elements))


def parse_tile_path(path: str) -> Tile:
    """Parse the part of a tile URL after ``tile/``, e.g. ``0/x001/234.p/8`` or
    ``entries/005``; raise :class:`TileNotFoundError` for anything that is not a tile name
    (a URL that names no resource is a 404, not a bad request)."""
    parts = path.split("/")
    head, rest = parts[0], parts[1:]
    level: int | None
    if head == ENTRIES:
        level = None
    elif _LEVEL.fullmatch(head) and int(head) <= MAX_LEVEL:
        level = int(head)
    else:
        raise TileNotFoundError(f"no tile {path!r}: expected a level 0..{MAX_LEVEL} or 'entries'")
    width = TILE_WIDTH
    if len(rest) >= 2 and rest[-2].endswith(".p"):
        if not _WIDTH.fullmatch(rest[-1]) or int(rest[-1]) >= TILE_WIDTH:
            raise TileNotFoundError(f"no tile {path!r}: expected a partial width 1..255")
        width = int(rest[-1])
        rest = [*rest[:-2], rest[-2][: -len(".p")]]
    return Tile(level=level, index=_parse_index(rest, path), width=width)


def hashes_at_level(size: int, level: int) -> int:
    """How many tile hashes tile level ``level`` has in a tree of ``size`` entries."""
    return size >> (TILE_HEIGHT * level)


def available_width(tile: Tile, size: int) -> int:
    """How many hashes (entries) of ``tile``'s position a tree of ``size`` holds: 256 for a
    full tile, 1..255 for the last partial one, 0 when the tree does not reach it."""
    total = hashes_at_level(size, tile.level or 0)
    return max(0, min(TILE_WIDTH, total - tile.index * TILE_WIDTH))


def check_available(tile: Tile, size: int) -> None:
    """Raise :class:`TileNotFoundError` unless a checkpoint of at most ``size`` entries needs
    ``tile``: a full tile once its 256 hashes exist, a partial tile of width W once the tree
    covered W hashes of it (its full tile may exist by then; tlog-tiles lets a log keep
    serving the partial one)."""
    have = available_width(tile, size)
    if tile.width > have:
        kind = "entry bundle" if tile.level is None else "tile"
        raise TileNotFoundError(
            f"no {kind} {tile.path()} in a log of {size} entries: it holds {have} of its hashes"
        )


def entry_bundle(bodies: Sequence[bytes]) -> bytes:
    """tlog-tiles entry bundle: each entry as a big-endian uint16 length and its bytes."""
    out = bytearray()
    for body in bodies:
        if len(body) > MAX_ENTRY_BYTES:
            raise LedgerError(
                f"an entry of {len(body)} bytes cannot be framed in a tlog-tiles bundle "
                f"(at most {MAX_ENTRY_BYTES})"
            )
        out += len(body).to_bytes(2, "big") + body
    return bytes(out)


def _parse_index(elements: list[str], path: str) -> int:
    if not 1 <= len(elements) <= _MAX_ELEMENTS:
        raise TileNotFoundError(
            f"no tile {path!r}: expected an index of 1 to {_MAX_ELEMENTS} elements"
        )
    *upper, last = elements
    if not _ELEMENT.fullmatch(last) or any(
        not (e.startswith("x") and _ELEMENT.fullmatch(e[1:])) for e in upper
    ):
        raise TileNotFoundError(
            f"no tile {path!r}: expected an index like 'x001/x234/067' (3-digit elements, "
            "all but the last starting with 'x')"
        )
    if upper and upper[0] == "x000":
        raise TileNotFoundError(f"no tile {path!r}: the index has a leading 'x000' element")
    index = 0
    for element in [*(e[1:] for e in upper), last]:
        index = index * 1000 + int(element)
    return index
