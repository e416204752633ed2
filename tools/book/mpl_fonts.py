"""Make matplotlib see the CJK font used by the book (run by `make book` after the font install).

matplotlib caches the system font list; a font installed after the cache was written stays
invisible until the cache is rebuilt. This clears the cache only when needed, then fails if
"Noto Sans CJK SC" is still not found (fonts-noto-cjk missing).
"""

from __future__ import annotations

import sys
from pathlib import Path

FONT = "Noto Sans CJK SC"


def find() -> str | None:
    from matplotlib import font_manager as fm

    try:
        return fm.findfont(FONT, fallback_to_default=False)
    except ValueError:
        return None


def main() -> int:
    import matplotlib
    from matplotlib import font_manager as fm

    path = find()
    if path is None:
        for cache in Path(matplotlib.get_cachedir()).glob("fontlist-*.json"):
            cache.unlink()
        fm.fontManager = fm._load_fontmanager(try_read_cache=False)
        path = find()
    if path is None:
        print(f"mpl_fonts: matplotlib cannot find {FONT!r}: install fonts-noto-cjk",
              file=sys.stderr)
        return 1
    print(f"mpl_fonts: {FONT} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
