"""The logs a witness cosigns for: their origins and the keys it trusts for each.

C2SP tlog-witness: "Each witness is configured with a list of supported log public keys.
For each log, uniquely identified by its origin line, ..." A veritrain log's key is named by
its origin (C2SP tlog-checkpoint), so a log is given as its C2SP verifier key alone and its
origin is the key's name. Several keys may share an origin (a key rotation).

Keys come from the command line (fixed for the process) and from a *logs file*: one vkey
per line, blank lines and ``#`` comments ignored. The file is re-read whenever its
modification time, size or inode changes, so an operator adds a new run's log without a
restart. Write it atomically (write a temporary file, then rename it over the old one): a
half-written file read mid-write would be refused and the previous list kept.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from attestation.errors import AttestationError
from attestation.keys import PublicKey
from ledger.errors import InvalidRequestError
from ledger.models import NAME_LENGTH

log = logging.getLogger(__name__)


def parse_log_keys(vkeys: Iterable[str], *, source: str = "--log") -> dict[str, tuple[str, ...]]:
    """Log verifier keys by origin (the key's name); raise :class:`InvalidRequestError`
    naming ``source`` for a key that is not an Ed25519 (type 0x01) C2SP vkey."""
    by_origin: dict[str, list[str]] = {}
    for vkey in vkeys:
        try:
            key = PublicKey.from_vkey(vkey)
        except AttestationError as exc:
            raise InvalidRequestError(f"{source}: bad log key {vkey!r}: {exc}") from None
        if len(key.name) > NAME_LENGTH:
            raise InvalidRequestError(
                f"{source}: a log origin is at most {NAME_LENGTH} characters, got {len(key.name)}"
            )
        keys = by_origin.setdefault(key.name, [])
        if key.vkey not in keys:
            keys.append(key.vkey)
    return {origin: tuple(keys) for origin, keys in by_origin.items()}


def read_logs_file(path: Path) -> dict[str, tuple[str, ...]]:
    """Parse a logs file (one vkey per line, ``#`` comments)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"cannot read the logs file {path}: {exc}") from None
    vkeys: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parse_log_keys([line], source=f"{path}:{number}")
        vkeys.append(line)
    return parse_log_keys(vkeys, source=str(path))


class TrustedLogs:
    """The log keys a witness trusts, by origin. Thread-safe: request handlers call
    :meth:`keys_for` concurrently, and the first call after the file changed reloads it."""

    def __init__(self, vkeys: Sequence[str] = (), *, logs_file: Path | None = None) -> None:
        """Raise :class:`InvalidRequestError` for a bad key, or a logs file that cannot be
        read at start (later, a bad file is reported in the log and the last good list kept)."""
        self._fixed = parse_log_keys(vkeys)
        self._file = logs_file
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._from_file: dict[str, tuple[str, ...]] = {}
        if logs_file is not None:
            self._stamp = _stamp(logs_file)
            self._from_file = read_logs_file(logs_file)
        if not self._fixed and logs_file is None:
            raise InvalidRequestError(
                "expected at least one trusted log: give --log or --logs-file"
            )

    def keys_for(self, origin: str) -> tuple[str, ...]:
        """The verifier keys trusted for ``origin`` (empty: the origin is unknown)."""
        self._reload_if_changed()
        return self._fixed.get(origin, ()) + tuple(
            k for k in self._from_file.get(origin, ()) if k not in self._fixed.get(origin, ())
        )

    def origins(self) -> list[str]:
        """Every origin the witness currently cosigns for, sorted."""
        self._reload_if_changed()
        return sorted(set(self._fixed) | set(self._from_file))

    def _reload_if_changed(self) -> None:
        if self._file is None:
            return
        with self._lock:
            stamp = _stamp(self._file)
            if stamp == self._stamp:
                return
            self._stamp = stamp
            if stamp is None:
                log.warning("logs file %s is gone: no log from it is trusted any more", self._file)
                self._from_file = {}
                return
            try:
                self._from_file = read_logs_file(self._file)
            except InvalidRequestError as exc:
                log.error("logs file changed but is not valid; keeping the previous list: %s", exc)
                return
            log.info("logs file %s reloaded: %d origins", self._file, len(self._from_file))


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino
