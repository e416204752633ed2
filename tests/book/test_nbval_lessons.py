"""nbval over every book page that has code cells.

Each page (book/<lang>/<name>.md, a jupytext md:myst notebook) is written as .ipynb, with the
outputs the book build stored for it (tests/book/built.py), in a temp dir laid out like the repo
(book/<lang>/, with labs/, src/, ... linked in, so relative paths behave as in the build), then
re-run by `pytest --nbval`, which compares every output with the built one. Cells whose output is not reproducible (random ids, timestamps) must
start with `# NBVAL_IGNORE_OUTPUT`; `# NBVAL_SKIP` skips a cell. PNG images are not compared.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.book.built import built_notebook
from tests.tooling import BOOK_MATPLOTLIBRC

REPO = Path(__file__).resolve().parents[2]
BOOK = REPO / "book"
LESSONS = ("knobs", "slo-loop")
CODE_CELL = re.compile(r"^```\{code-cell\}", re.MULTILINE)
ENV = {**os.environ, "MATPLOTLIBRC": str(BOOK_MATPLOTLIBRC),
       "PYTHONHASHSEED": "0"}


def pages_with_code() -> list[Path]:
    return sorted(p for p in BOOK.glob("*/*.md") if CODE_CELL.search(p.read_text("utf-8")))


def test_every_lesson_has_code_cells() -> None:
    found = {f"{p.parent.name}/{p.stem}" for p in pages_with_code()}
    for lang in ("zh", "en"):
        for lesson in LESSONS:
            assert f"{lang}/{lesson}" in found


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nbval")
    for entry in REPO.iterdir():
        if entry.name not in ("book", "_build", ".git") and not entry.name.startswith("."):
            (root / entry.name).symlink_to(entry)
    return root


@pytest.mark.parametrize("page", pages_with_code(),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_nbval(page: Path, workdir: Path) -> None:
    out = workdir / "book" / page.parent.name / f"{page.stem}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(built_notebook(page), out)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(workdir), "-o", "addopts=", str(out)],
        capture_output=True, text=True, cwd=workdir, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
