"""The tests use what they test through its public names: no test module imports a private name
(one leading underscore) from another module, a ``conftest`` (pytest imports each one itself,
and several exist), or another test module (a helper shared by tests lives in a helper module
of its own, e.g. tests/e2e/tampering.py)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_test_module(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def import_faults(source: str) -> list[str]:
    """Each import in ``source`` that reaches past a public name, as ``line: what``."""
    faults = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if _is_test_module(node.module):
                faults.append(f"{node.lineno}: from {node.module} import ...")
            faults.extend(
                f"{node.lineno}: from {node.module} import {alias.name}"
                for alias in node.names
                if _is_private(alias.name)
            )
        elif isinstance(node, ast.Import):
            faults.extend(
                f"{node.lineno}: import {alias.name}"
                for alias in node.names
                if _is_test_module(alias.name) or any(map(_is_private, alias.name.split(".")))
            )
    return faults


def test_the_check_names_each_kind_of_reach() -> None:
    source = (
        "from e2e.test_verify_api import run\n"
        "from unit.web.conftest import settings_for\n"
        "from trainer.runtime.pipeline_judge import PipelineJudge, _PipelineProbe\n"
        "import conftest\n"
        "from __future__ import annotations\n"
        "from torch.ops import aten\n"
    )
    assert import_faults(source) == [
        "1: from e2e.test_verify_api import ...",
        "2: from unit.web.conftest import ...",
        "3: from trainer.runtime.pipeline_judge import _PipelineProbe",
        "4: import conftest",
    ]


def test_no_test_imports_a_private_name_a_conftest_or_another_test_module() -> None:
    faults = [
        f"{path.relative_to(TESTS)}:{fault}"
        for path in sorted(TESTS.rglob("*.py"))
        for fault in import_faults(path.read_text())
    ]
    assert faults == []
