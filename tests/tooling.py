"""Import a script of tools/ (not part of the package) as a module, for its tests; the paths
of tools/ that several test modules read."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
# the book's matplotlib settings (CJK font first), as book/_ext/book_ext.py sets them
BOOK_MATPLOTLIBRC = ROOT / "tools" / "book" / "matplotlibrc"


def tool(rel: str) -> ModuleType:
    """``tool("gpu/capacity_probe.py")``: tools/gpu/capacity_probe.py, imported once."""
    name = "tools_" + rel.removesuffix(".py").replace("/", "_")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / rel)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]
