"""Which local object files this server has seen hash to their digests, as they are now.

A local store's object is a plain file someone with access to the disk could overwrite. A
whole download is verified as it streams (web/object_stream.py); a *ranged* download cannot be
verified from its own bytes, so before the first range of a file is served the whole file is
hashed once and its identity (inode, size, modification time) remembered: a later change to
the file changes that identity and the file is hashed again before any range is served.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

CAPACITY = 4096
"""How many verified files are remembered (least recently used forgotten first)."""

_Identity = tuple[int, int, int, int]


def file_identity(path: Path) -> _Identity:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


class VerifiedFiles:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._seen: OrderedDict[str, _Identity] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def holds(self, digest: str, path: Path) -> bool:
        """True when ``path`` is unchanged since it last hashed to ``digest``."""
        with self._lock:
            known = self._seen.get(digest)
            if known is None:
                return False
            self._seen.move_to_end(digest)
        return known == file_identity(path)

    def remember(self, digest: str, identity: _Identity) -> None:
        """``digest``'s file had ``identity`` when (before) it was hashed."""
        with self._lock:
            self._seen[digest] = identity
            self._seen.move_to_end(digest)
            while len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
