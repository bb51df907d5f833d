"""The code stays in pieces a contributor can read: no module of the library, the jobs or the tools over 600
lines (a numba-compiled kernel module, ``*_kernel.py``, over 800), no function over 120 lines."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("watermark", "jobs", "tools", "awm")
MODULE_LINES, KERNEL_LINES, FUNCTION_LINES = 600, 800, 120


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_the_packages_hold_modules_to_check():
    assert len(modules()) > 100


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_longer_than_its_limit(package):
    too_long = {}
    for path in modules():
        if path.relative_to(ROOT).parts[0] != package:
            continue
        limit = KERNEL_LINES if path.name.endswith("_kernel.py") else MODULE_LINES
        lines = path.read_text().count("\n")
        if lines > limit:
            too_long[str(path.relative_to(ROOT))] = lines
    assert not too_long, f"modules over {MODULE_LINES} lines (kernels {KERNEL_LINES}): {too_long}"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_longer_than_120_lines(package):
    too_long = {}
    for path in modules():
        if path.relative_to(ROOT).parts[0] != package:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > FUNCTION_LINES:
                    too_long[f"{path.relative_to(ROOT)}:{node.name}"] = length
    assert not too_long, f"functions over {FUNCTION_LINES} lines: {too_long}"
