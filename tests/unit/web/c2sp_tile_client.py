"""A tlog-tiles client written from the C2SP texts alone (tlog-tiles, tlog-checkpoint,
signed-note, RFC 6962 §2.1), sharing no code with the server: its own path encoding, its
own Merkle hashing, its own checkpoint and signature parsing. It fetches through a callable,
so a test can point it at any server.

Import it as ``from unit.web.c2sp_tile_client import TileClient``.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

WIDTH = 256  # "Full tiles MUST be exactly 256 hashes wide"
HEIGHT = 8


def leaf(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def mth(hashes: list[bytes]) -> bytes:
    """RFC 6962 §2.1 MTH over already-hashed leaves: split at the largest power of two < n."""
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return node(mth(hashes[:k]), mth(hashes[k:]))


def index_path(n: int) -> str:
    """tlog-tiles: "zero-padded 3-digit path elements. All but the last path element MUST
    begin with an x", e.g. 1234067 -> x001/x234/067."""
    digits = str(n)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*("x" + g for g in groups[:-1]), groups[-1]])


def tile_path(level: int | str, n: int, width: int) -> str:
    suffix = "" if width == WIDTH else f".p/{width}"
    return f"tile/{level}/{index_path(n)}{suffix}"


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes


class TileClient:
    def __init__(self, get: Callable[[str], bytes], vkey: str) -> None:
        self._get = get
        name, key_id_hex, blob = vkey.split("+", 2)
        raw = base64.b64decode(blob)
        assert raw[0] == 0x01, "signed-note: Ed25519 vkeys start with signature type 0x01"
        self._name, self._key_id, self._key = (
            name,
            bytes.fromhex(key_id_hex),
            Ed25519PublicKey.from_public_bytes(raw[1:]),
        )
        self._tiles: dict[str, list[bytes]] = {}
        self.fetched: list[str] = []

    def checkpoint(self) -> Checkpoint:
        """Fetch ``checkpoint`` and verify the log's Ed25519 signature (signed-note): the
        text up to the blank line, signed by the line whose name and key id are the log's."""
        note = self._get("checkpoint").decode()
        text, _, signatures = note.rpartition("\n\n")
        text += "\n"
        for line in signatures.splitlines():
            name, blob = line.removeprefix("\u2014 ").split(" ")
            raw = base64.b64decode(blob)
            if name == self._name and raw[:4] == self._key_id:
                self._key.verify(raw[4:], text.encode())  # raises if it does not verify
                origin, size, root, *_ = text.splitlines()
                return Checkpoint(origin=origin, size=int(size), root=base64.b64decode(root))
        raise AssertionError("no signature by the log key on the checkpoint")

    def tile(self, level: int, n: int, size: int) -> list[bytes]:
        """Tile n of ``level`` as a tree of ``size`` has it: full, or partial with
        floor(size / 256**level) mod 256 hashes when it is the rightmost."""
        total = size // WIDTH**level
        assert n * WIDTH < total, f"the tree of size {size} has no tile {level}/{n}"
        width = min(WIDTH, total - n * WIDTH)
        path = tile_path(level, n, width)
        if path not in self._tiles:
            data = self._get(path)
            self.fetched.append(path)
            assert len(data) == 32 * width, f"{path}: expected {32 * width} bytes, got {len(data)}"
            self._tiles[path] = [data[i : i + 32] for i in range(0, len(data), 32)]
        return self._tiles[path]

    def hash_at(self, level: int, index: int, size: int) -> bytes:
        """MTH(D[index·256**level : (index+1)·256**level]): slot index % 256 of tile
        index // 256."""
        return self.tile(level, index // WIDTH, size)[index % WIDTH]

    def subtree(self, height: int, index: int, size: int) -> bytes:
        """MTH of the perfect subtree of 2**height leaves starting at leaf index·2**height,
        from the tile level at or below it ("the Merkle Tree levels between those expressed
        by the tile hashes are reconstructed by hashing")."""
        level, rest = divmod(height, HEIGHT)
        first = index << rest
        return mth([self.hash_at(level, first + i, size) for i in range(1 << rest)])

    def root_from_tiles(self, size: int) -> bytes:
        """The root of a tree of ``size`` from the fewest tile hashes: one perfect subtree per
        set bit of ``size``, largest first, folded right to left (RFC 6962 splits off the
        largest power of two on the left)."""
        parts: list[bytes] = []
        start = 0
        for height in range(size.bit_length() - 1, -1, -1):
            if size >> height & 1:
                parts.append(self.subtree(height, start >> height, size))
                start += 1 << height
        root = parts[-1]
        for left in reversed(parts[:-1]):
            root = node(left, root)
        return root

    def leaf_hashes(self, size: int) -> list[bytes]:
        return [h for n in range(-(-size // WIDTH)) for h in self.tile(0, n, size)]

    def check_upper_tiles(self, size: int) -> int:
        """Every hash of every tile above level 0 is the MTH of the full tile below it;
        return how many hashes were checked."""
        checked = 0
        level = 1
        while size // WIDTH**level:
            total = size // WIDTH**level
            for index in range(total):
                below = self.tile(level - 1, index, size)
                assert len(below) == WIDTH, "a hash above level 0 covers a full tile below"
                assert self.hash_at(level, index, size) == mth(below), f"tile {level}: hash {index}"
                checked += 1
            level += 1
        return checked

    def entries(self, size: int) -> list[bytes]:
        """Every entry, from the entry bundles, each checked against its level-0 tile hash
        (bundles: "sequences of big-endian uint16 length-prefixed log entries")."""
        found: list[bytes] = []
        for n in range(-(-size // WIDTH)):
            hashes = self.tile(0, n, size)
            data = self._get(tile_path("entries", n, len(hashes)))
            bundle: list[bytes] = []
            offset = 0
            while offset < len(data):
                length = int.from_bytes(data[offset : offset + 2], "big")
                bundle.append(data[offset + 2 : offset + 2 + length])
                offset += 2 + length
            assert offset == len(data), f"bundle {n}: trailing bytes"
            assert [leaf(e) for e in bundle] == hashes, (
                f"bundle {n} does not match level-0 tile {n}"
            )
            found.extend(bundle)
        return found
