"""The trainer package keeps rooms a reader can live in (STYLE.md): one concept per module, no
module over 800 lines, and imports between its modules that point one way (no file-level
cycle), so that each of a process's phases can be read, and tested, on its own."""

from __future__ import annotations

from pathlib import Path

from source_imports import source_imports

import trainer

PACKAGE = Path(trainer.__file__).resolve().parent
MAX_LINES = 800


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(path: Path, known: dict[str, Path]) -> set[str]:
    """The trainer modules ``path`` imports (``from a.b import c`` names a.b, or a.b.c when c
    is itself a module)."""
    return {
        candidate
        for found in source_imports(path)
        for candidate in (found.module, *(f"{found.module}.{name}" for name in found.names))
        if candidate in known
    }


def test_no_trainer_module_is_over_800_lines() -> None:
    lengths = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert too_long == {}, f"expected every module at most {MAX_LINES} lines, got {too_long}"


def test_trainer_modules_import_each_other_without_a_cycle() -> None:
    known = modules()
    graph = {name: imports_of(path, known) - {name} for name, path in known.items()}
    # Depth-first search; a module met again while still on the path closes a cycle.
    done: set[str] = set()
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        path.append(name)
        for dependency in sorted(graph[name]):
            cycle = visit(dependency)
            if cycle is not None:
                return cycle
        path.pop()
        done.add(name)
        return None

    cycles = [cycle for name in sorted(graph) if (cycle := visit(name)) is not None]
    assert cycles == [], f"expected no import cycle in trainer/, got {' -> '.join(cycles[0])}"


def test_a_process_phases_live_in_modules_of_their_own() -> None:
    """The worker runs the phases; setup, joining, replica lead/follow and step reporting are
    its collaborators, and none of them imports the worker back."""
    known = modules()
    worker = imports_of(known["trainer.runtime.worker"], known)
    collaborators = {
        "trainer.runtime.process_setup",
        "trainer.runtime.local_stage",
        "trainer.runtime.joining",
        "trainer.runtime.replicas",
        "trainer.runtime.step_reporting",
    }
    assert collaborators <= worker
    for name in collaborators:
        assert "trainer.runtime.worker" not in imports_of(known[name], known), name
