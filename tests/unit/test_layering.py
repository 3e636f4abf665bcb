"""The dependency rule of DESIGN.md §1, read from the source: every import of every module of
each package, at any depth (imports inside functions count too), against what the package may
import. A new arrow that points the wrong way fails here, with the file and the import."""

from __future__ import annotations

from pathlib import Path

import pytest
from source_imports import source_imports

ROOT = Path(__file__).resolve().parents[2]
OURS = {"attestation", "records", "storage", "ledger", "trainer", "web", "veritrain", "migrations"}

# DESIGN.md §1: what each package may import of ours (besides itself).
MAY_IMPORT: dict[str, set[str]] = {
    "attestation": set(),
    "storage": set(),
    "records": {"attestation"},
    "ledger": {"attestation", "records"},
    "trainer": {"records", "attestation", "storage"},
    "web": {"ledger", "storage", "attestation", "records"},
}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every absolute import in a file."""
    return [(found.line, found.module) for found in source_imports(path)]


def violations(package: str, allowed: set[str]) -> list[str]:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, module in imports_of(path):
            top = module.split(".")[0]
            if top in OURS and top != package and top not in allowed:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return bad


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_each_package_imports_only_what_the_design_allows(package: str) -> None:
    assert violations(package, MAY_IMPORT[package]) == []


def test_nothing_outside_veritrain_imports_the_composition_root() -> None:
    """migrations/ included: its Alembic environment reads the database URL via ledger/."""
    bad = [v for p in sorted(OURS - {"veritrain"}) for v in violations(p, OURS - {"veritrain"})]
    assert bad == []


def test_the_audit_and_read_wings_never_import_the_write_side() -> None:
    """docs/architecture.md, "veritrain/ in wings": a verifier that imported the writer could
    inherit its mistakes silently; the shared top-level modules import no wing but
    ``witnesses`` (settings reads its one setting from ``witnesses.endpoints``)."""
    bad = []
    veritrain = ROOT / "veritrain"
    for wing in ("audit", "sources", "witnesses"):
        for path in sorted((veritrain / wing).rglob("*.py")):
            bad += [
                f"{path.relative_to(ROOT)}:{line} imports {module}"
                for line, module in imports_of(path)
                if module.startswith("veritrain.record")
            ]
    wings = (
        "veritrain.record",
        "veritrain.audit",
        "veritrain.sources",
        "veritrain.cli",
        "veritrain.bench",
    )
    for path in sorted(veritrain.glob("*.py")):
        if path.name in {"__main__.py", "demo.py"}:  # the entry point and the whole-promise demo
            continue
        bad += [
            f"{path.relative_to(ROOT)}:{line} imports {module}"
            for line, module in imports_of(path)
            if module.startswith(wings)
        ]
    assert bad == []


def test_the_rule_finds_a_wrong_arrow(tmp_path: Path) -> None:
    """The reader itself: an import inside a function is found."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from veritrain.record.genesis import x\n")
    assert imports_of(source) == [(2, "veritrain.record.genesis")]
