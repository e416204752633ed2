"""The package's shape: one import direction (core <- lab, core <- quiz), small modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "src" / "course_utils"


def _imports(path: Path) -> set[str]:
    """Every course_utils module a file imports, at the top or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            mods = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        else:
            continue
        out |= {m for m in mods if m.startswith("course_utils")}
    return out


def _layer(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ("core", "lab", "quiz") else None


@pytest.mark.parametrize(("layer", "forbidden"), [("core", {"lab", "quiz"}), ("quiz", {"lab"})])
def test_import_direction(layer: str, forbidden: set[str]) -> None:
    bad = {f"{p.relative_to(PKG)} imports {m}"
           for p in (PKG / layer).rglob("*.py") for m in _imports(p) if _layer(m) in forbidden}
    assert not bad, sorted(bad)


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("def f():\n    from course_utils.lab import server\n")
    assert {_layer(m) for m in _imports(f)} == {"lab"}


def test_every_module_lives_in_a_layer() -> None:
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert top == ["__init__.py", "__main__.py"]
