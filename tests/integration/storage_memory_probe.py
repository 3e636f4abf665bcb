"""Run in a fresh process by test_storage_memory.py: put a deterministic stream of SIZE
bytes into the store at URL, read it back in full (verified), and print the peak resident
memory (VmHWM) before and after as JSON. Usage: python storage_memory_probe.py URL SIZE"""

from __future__ import annotations

import hashlib
import json
import sys

from unit.storage.payloads import deterministic_chunks

from storage import open_store


def peak_rss_kib() -> int:
    """The process's high-water mark of resident memory (Linux /proc/self/status VmHWM)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def main(url: str, size: int) -> None:
    with open_store(url) as store:
        # Warm up first, so imports, clients and connection pools are in the baseline.
        store.read_bytes(store.put_bytes(b"warm-up"), max_size=64)
        baseline = peak_rss_kib()
        digest = store.put(deterministic_chunks(size, seed=42))
        after_put = peak_rss_kib()
        hasher = hashlib.sha256()
        with store.open(digest) as reader:
            for chunk in reader:
                hasher.update(chunk)
        after_read = peak_rss_kib()
        stored_size = store.size(digest)
    print(
        json.dumps(
            {
                "digest": digest,
                "read_digest": hasher.hexdigest(),
                "size": stored_size,
                "baseline_kib": baseline,
                "after_put_kib": after_put,
                "after_read_kib": after_read,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
