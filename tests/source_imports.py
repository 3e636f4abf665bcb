"""Every absolute import a Python file makes, read from its source with ``ast`` (imports inside
functions too), for the tests that hold the packages' dependency rules
(tests/unit/test_layering.py, tests/unit/trainer/test_trainer_layout.py)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SourceImport:
    line: int
    module: str
    """The dotted module named: ``import a.b`` and ``from a.b import c`` both name ``a.b``."""
    names: tuple[str, ...] = ()
    """What a ``from`` import takes from it (``c``; each may itself be a module ``a.b.c``)."""


def source_imports(path: Path) -> list[SourceImport]:
    found: list[SourceImport] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [SourceImport(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = tuple(alias.name for alias in node.names)
            found.append(SourceImport(node.lineno, node.module, names))
    return found
