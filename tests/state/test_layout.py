"""The shape of ``state/`` stays readable: no function over 60 lines, every module says
what it owns in its docstring (issue 17's bar, measured with ``ast`` so it stays true)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

STATE = Path(__file__).resolve().parents[2] / "state"
MAX_LINES = 60
MODULES = sorted(p for p in STATE.glob("*.py") if p.name != "__init__.py")


def function_lengths(path: Path) -> dict[str, int]:
    """name -> lines from ``def`` to its last line, decorators excluded, for every function."""
    tree = ast.parse(path.read_text())
    return {node.name: node.end_lineno - node.lineno + 1 for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_function_over_60_lines(path):
    long = {name: n for name, n in function_lengths(path).items() if n > MAX_LINES}
    assert not long, f"{path.name}: functions over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_docstring_says_what_it_owns(path):
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc and len(doc.split()) >= 8, f"{path.name} has no docstring saying what it owns"


def test_the_measure_counts_a_long_function(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n" + "    x = 1\n" * 70 + "\n\ndef g():\n    return 1\n")
    assert function_lengths(src) == {"f": 71, "g": 2}
