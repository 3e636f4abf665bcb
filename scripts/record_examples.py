"""Refresh the example payloads of docs/records.md and tests/unit/records/examples.json from a
recorded run, so both show what the recorder writes today.

    VERITRAIN_DATA_DIR=DIR python scripts/record_examples.py RUN_ID [--step T] [--api URL]

Run it after `veritrain demo` (which records under VERITRAIN_DATA_DIR) whenever a record format
changes. Both shorten long lists to their first items (still valid records:
tests/unit/records/test_records.py and test_records_docs.py read them back)."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from records.outer_step import OuterStep
from veritrain.sources import open_source
from veritrain.sources.recorded_run import RecordedRun

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "records.md"
EXAMPLES = ROOT / "tests" / "unit" / "records" / "examples.json"
KINDS = ("run.genesis", "data.manifest", "outer_step", "run.final")
PAGE_LIST_ITEMS = 4
"""The examples keep at most this many items of a list (a demo manifest lists hundreds of
sources)."""


def payloads(run: RecordedRun, step: int) -> dict[str, dict[str, Any]]:
    """One payload of each kind; the outer step is ``step`` (a middle step shows the exchanges
    applied under the one-step delay)."""
    chosen: dict[str, dict[str, Any]] = {}
    for entry in run.entries:
        if entry.record is None:
            raise SystemExit(f"entry {entry.index} does not read as a record: {entry.problem}")
        if isinstance(entry.record, OuterStep) and entry.record.step != step:
            continue
        if entry.kind in KINDS:
            chosen[entry.kind] = entry.record.to_payload()
    missing = [k for k in KINDS if k not in chosen]
    if missing:
        raise SystemExit(f"run {run.run_id!r} has no {missing} (is it finished, with step {step}?)")
    return chosen


def shortened(value: Any) -> Any:
    if isinstance(value, list):
        return [shortened(v) for v in value[:PAGE_LIST_ITEMS]]
    if isinstance(value, dict):
        return {k: shortened(v) for k, v in value.items()}
    return value


def _replacement(block: str) -> Callable[[re.Match[str]], str]:
    return lambda m: m.group(1) + block + m.group(3)


def refresh_page(text: str, examples: dict[str, dict[str, Any]]) -> str:
    for kind, payload in examples.items():
        block = json.dumps(shortened(payload), indent=2, sort_keys=True)
        pattern = rf"(<!-- record: {re.escape(kind)} -->\n```json\n)(.*?)(\n```)"
        text, count = re.subn(pattern, _replacement(block), text, flags=re.S)
        if count != 1:
            raise SystemExit(f"{DOC} has {count} example blocks of {kind}, expected 1")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_id")
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--api", default=None)
    args = parser.parse_args()
    with open_source(args.api) as source:
        examples = payloads(RecordedRun.load(source, args.run_id), args.step)
    EXAMPLES.write_text(json.dumps(shortened(examples), indent=1, sort_keys=True) + "\n")
    DOC.write_text(refresh_page(DOC.read_text(), examples))
    print(f"refreshed {EXAMPLES.relative_to(ROOT)} and {DOC.relative_to(ROOT)} from {args.run_id}")


if __name__ == "__main__":
    main()
