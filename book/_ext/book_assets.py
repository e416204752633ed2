"""What each page loads: only the theme assets it uses.

- Icons: pydata-sphinx-theme's CSS carries rules for all ~1,900 Font Awesome icons and a 156 KB
  solid webfont. After the build, the CSS keeps the rules of the icons the site uses and the
  solid face points to a subset of the font with just those glyphs (fontTools, a matplotlib
  dependency). The theme's icon script (1.5 MB) is left out by templates/static/webpack-macros.html.
- sphinx-design's CSS and JS only on pages that use its components (`sd-` classes).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

THEME_CSS = "_static/styles/pydata-sphinx-theme.css"
SOLID_TTF = "_static/vendor/fontawesome/webfonts/fa-solid-900.ttf"
SOLID_SUBSET = "_static/vendor/fontawesome/webfonts/fa-solid-900.subset.woff"
_ICON_RULE = re.compile(r'(?<=\})((?:\.fa-[a-z0-9-]+:(?:before|after),?)+)\{content:"([^"]*)"\}')
_ICON_CLASS = re.compile(r"\bfa-[a-z0-9-]+")
_SOLID_FACE = re.compile(r"@font-face\{[^}]*font-weight:900;src:url\([^)]*fa-solid-900[^}]*\}")
DESIGN_ASSETS = ("sphinx-design", "design-tabs.js")


def used_icons(outdir: Path) -> set[str]:
    """`fa-*` class names in the built pages and the theme's scripts."""
    used: set[str] = set()
    for pattern in ("**/*.html", "_static/scripts/*.js"):
        for path in outdir.glob(pattern):
            if path.is_file() and "_static/vendor" not in path.as_posix():
                used.update(_ICON_CLASS.findall(path.read_text("utf-8", errors="replace")))
    return used


def slim_icon_css(css: str, used: set[str]) -> tuple[str, set[int]]:
    """The CSS without the rules of unused icons, and the code points the kept rules draw."""
    points: set[int] = set()

    def keep(m: re.Match[str]) -> str:
        names = {s.split(":")[0][1:] for s in m.group(1).split(",") if s}
        if not names & used:
            return ""
        value = m.group(2)
        if value.startswith("\\") and re.fullmatch(r"\\[0-9a-fA-F]+", value):
            points.add(int(value[1:], 16))
        elif len(value) == 1:
            points.add(ord(value))
        return m.group(0)

    return _ICON_RULE.sub(keep, css), points


def subset_font(src: Path, dest: Path, points: set[int]) -> bool:
    try:
        from fontTools import subset
    except ImportError:
        return False
    options = subset.Options()
    options.flavor = "woff"
    options.layout_features = ["*"]
    font = subset.load_font(str(src), options)
    sub = subset.Subsetter(options)
    sub.populate(unicodes=sorted(points))
    sub.subset(font)
    subset.save_font(font, str(dest), options)
    return True


def slim_icons(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    css_path, ttf = out / THEME_CSS, out / SOLID_TTF
    if not css_path.is_file():
        return
    css, points = slim_icon_css(css_path.read_text("utf-8"), used_icons(out))
    if points and ttf.is_file() and subset_font(ttf, out / SOLID_SUBSET, points):
        face = ('@font-face{font-display:block;font-family:Font Awesome\\ 6 Free;'
                'font-style:normal;font-weight:900;src:url(../vendor/fontawesome/webfonts/'
                'fa-solid-900.subset.woff) format("woff")}')
        css = _SOLID_FACE.sub(lambda _m: face, css, count=1)
    else:
        logger.warning("icon font not subset (fontTools missing?): pages load the full font")
    css_path.write_text(css, encoding="utf-8")


def drop_unused_design(context: dict[str, Any]) -> None:
    """sphinx-design's CSS/JS only where the page has a design component."""
    if "sd-" in (context.get("body") or ""):
        return
    for key in ("css_files", "script_files"):
        files = context.get(key)
        if isinstance(files, list):
            # in place: handlers after this one still add to the same list
            files[:] = [f for f in files
                        if not any(d in str(getattr(f, "filename", f) or "") for d in DESIGN_ASSETS)]


def setup(app: Sphinx) -> None:
    app.connect("build-finished", slim_icons)
