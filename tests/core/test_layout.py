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


def _private_imports(path: Path) -> set[str]:
    """Names starting with "_" that a file imports from a course_utils module."""
    return {
        f"{node.module}.{a.name}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course_utils")
        for a in node.names
        if a.name.startswith("_") or (a.asname or "").startswith("_")
    }


def test_no_private_name_crosses_a_module() -> None:
    bad = {f"{p.relative_to(PKG)}: {n}" for p in PKG.rglob("*.py") for n in _private_imports(p)}
    assert not bad, sorted(bad)


# vLLM's grid and the loop against it: the book's table and the `grid` verb read it, no other
# product module does.
# Running the grid is GPU-host work (tools/gpu/gridrun.py): the grid module starts nothing.
COMPARISON = {"course_utils.lab.grid"}
RUNNERS = {f"course_utils.lab.{m}" for m in ("server", "bench", "proc", "measure", "sweep",
                                            "tune", "knee", "offline", "preflight")}


def _comparison_importers(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.py")
            if str(p.relative_to(root)) not in ("lab/grid.py", "__main__.py")
            and _imports(p) & COMPARISON}


def _runners(path: Path) -> set[str]:
    return {m for m in _imports(path) if any(m == r or m.startswith(r + ".") for r in RUNNERS)}


def test_no_product_module_imports_the_comparison() -> None:
    assert not _comparison_importers(PKG)


def test_the_grid_module_reads_and_runs_nothing() -> None:
    assert not _runners(PKG / "lab" / "grid.py")


def test_the_checks_see_a_private_name_and_the_comparison(tmp_path: Path) -> None:
    (tmp_path / "lab").mkdir()
    f = tmp_path / "lab" / "tune.py"
    f.write_text("from course_utils.lab.sweep import _x as y\nfrom course_utils.lab import grid\n")
    assert _private_imports(f) == {"course_utils.lab.sweep._x"}
    assert _comparison_importers(tmp_path) == {"lab/tune.py"}
    (tmp_path / "lab" / "grid.py").write_text(f.read_text())
    assert _comparison_importers(tmp_path) == {"lab/tune.py"}  # the grid module may
    assert _runners(tmp_path / "lab" / "grid.py") == {"course_utils.lab.sweep",
                                                      "course_utils.lab.sweep._x"}
