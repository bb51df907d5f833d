"""The library's sub-packages layer without cycles (docs/architecture.md, What may import what)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LIBRARY = ROOT / "watermark"
TOP = {"base", "timeline", "timeutil", "windowspec", "storage", "progress", "processing_time"}
#: What each part may import of the library, besides itself and the top-level modules.
ALLOWED = {
    "top": set(),
    "strategies": set(),
    "streams": set(),
    "partitions": {"strategies"},
    "evaluation": {"strategies", "partitions"},
    "tuning": {"strategies", "partitions", "evaluation"},
    "config": {"strategies", "partitions", "evaluation"},
    "cli": {"strategies", "partitions", "evaluation", "tuning", "streams", "config"},
    "main": {"cli"},
}


def part_of(module: str) -> str:
    """The part a dotted module of the library belongs to (``watermark.partitions.idle`` -> partitions)."""
    names = module.split(".")[1:]
    if not names or names[0] in TOP or names[0] == "__init__":
        return "top"
    return {"__main__": "main"}.get(names[0], names[0])


def imports_of(path: Path) -> set[str]:
    """The library's modules ``path`` imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "watermark":
            if node.module == "watermark":
                found.update(f"watermark.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "watermark")
    return found


def test_each_part_of_the_library_imports_only_the_parts_below_it():
    wrong = []
    for path in sorted(LIBRARY.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mine = part_of(module)
        for imported in imports_of(path):
            other = part_of(imported)
            if other not in {mine, "top"} and other not in ALLOWED[mine]:
                wrong.append(f"{module} ({mine}) imports {imported} ({other})")
    assert not wrong, "\n".join(wrong)


def test_the_parts_are_the_packages_of_the_library():
    packages = {p.parent.name for p in LIBRARY.glob("*/__init__.py")}
    assert packages == set(ALLOWED) - {"top", "config", "main"}
    assert {p.stem for p in LIBRARY.glob("*.py")} - {"__init__", "__main__", "config"} == TOP
