"""The house's size rules (issue 40): a module over 500 lines says why in its docstring ("Over 500
lines ..."), and no function is over 80 lines. Read from the source, without importing it."""

from __future__ import annotations

import ast
from pathlib import Path

import agentwolf

PACKAGE = Path(agentwolf.__file__).parent
MODULE_LINES, FUNCTION_LINES = 500, 80
REASON = "over 500 lines"


def _modules() -> list[tuple[str, str]]:
    return [(str(p.relative_to(PACKAGE)), p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))]


def test_a_module_over_500_lines_says_why_in_its_docstring():
    unexplained = [
        f"{name}: {len(text.splitlines())} lines"
        for name, text in _modules()
        if len(text.splitlines()) > MODULE_LINES
        and REASON not in (ast.get_docstring(ast.parse(text)) or "").lower()
    ]
    assert unexplained == []


def test_no_function_is_over_80_lines():
    long = [
        f"{name}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
        for name, text in _modules()
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > FUNCTION_LINES
    ]
    assert long == []
