"""The book's pages as the build executed them: each page's notebook with the outputs from
the build's execution cache (_build/.jupyter_cache, `make book`), found by its code cells.

Tests that read what a page printed take it from here instead of executing the page again;
`make test` builds the book first. A page whose code changed since the build has no match:
that is an error that says to build again, never a skip.
"""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "_build" / ".jupyter_cache"


def built_notebook(page: Path) -> nbformat.NotebookNode:
    """`page` (book/<lang>/<name>.md) with the outputs the book build stored for its code."""
    from jupyter_cache import get_cache

    nb = jupytext.read(page)
    nb.metadata.pop("translation", None)
    if not (CACHE / "global.db").is_file():
        raise RuntimeError(f"error: {CACHE} missing → fix: run `make book` first")
    try:
        _, merged = get_cache(str(CACHE)).merge_match_into_notebook(nb)
    except KeyError:
        raise RuntimeError(f"error: no executed copy of {page} in {CACHE} (its code changed "
                           "since the last build) → fix: run `make book`") from None
    return merged
