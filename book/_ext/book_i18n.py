"""Per-page language for the theme's own labels (the build's Sphinx `language` is "en").

zh pages render the templates with a Chinese gettext (the zh_CN catalogs that Sphinx,
pydata-sphinx-theme and sphinx-book-theme ship, then OVERRIDES), and their body and inline
scripts get the Chinese of strings that other extensions bake in (myst-nb's "Show code cell
source", sphinx-togglebutton's "Click to show").
"""

from __future__ import annotations

import gettext
import re
from functools import cache
from pathlib import Path
from typing import Any

# Checked first; also fixes the catalogs' odd choices (pydata's "下一条", book theme's "列印").
OVERRIDES_ZH = {
    "next": "下一页",
    "previous": "上一页",
    "next page": "下一页",
    "previous page": "上一页",
    "Next": "下一页",
    "Previous": "上一页",
    "Contents": "本页目录",
    "On this page": "本页目录",
    "Search": "搜索",
    "Search...": "搜索…",
    "Print to PDF": "打印为 PDF",
    "Download this page": "下载本页",
    "Download source file": "下载源文件",
    "Download notebook file": "下载 notebook 文件",
    "Toggle primary sidebar": "显示/隐藏章节列表",
    "Toggle secondary sidebar": "显示/隐藏本页目录",
    "Site navigation": "章节列表",
    "Fullscreen mode": "全屏",
    "By": "作者：",
    "Copyright": "版权所有",
    "Back to top": "回到顶部",
    "Skip to main content": "跳到正文",
    "Light": "浅色",
    "Dark": "深色",
    "System Settings": "跟随系统",
    "Color mode": "配色",
    "Search the docs ...": "搜索本书…",
    "Search Results": "搜索结果",
    "Search finished, found ${resultCount} page(s) matching the search query.":
        "搜索完成，找到 ${resultCount} 个匹配的页面。",
}
SEARCH_PLACEHOLDER = {"zh": "搜索…", "en": "Search…"}
# (English as baked in by myst-nb / sphinx-togglebutton, Chinese)
BODY_ZH = [
    ("Show code cell source", "显示代码"),
    ("Hide code cell source", "隐藏代码"),
    ("Show code cell outputs", "显示输出"),
    ("Hide code cell outputs", "隐藏输出"),
    ("Show code cell output", "显示输出"),
    ("Hide code cell output", "隐藏输出"),
    ("Show code cell content", "显示单元内容"),
    ("Hide code cell content", "隐藏单元内容"),
]
SCRIPT_ZH = {"Click to show": "点击显示", "Click to hide": "点击隐藏"}
# Attribute values and footer text that templates and the HTML writer hard-code in English
HTML_ZH = [
    ('"Toggle primary sidebar"', '"显示/隐藏章节列表"'),
    ('"Toggle secondary sidebar"', '"显示/隐藏本页目录"'),
    ('"Link to this heading"', '"链接到本节"'),
    ('"Link to this code"', '"链接到本段代码"'),
    ('"Link to this table"', '"链接到本表"'),
    ('"Link to this image"', '"链接到本图"'),
    ('"Link to this equation"', '"链接到本公式"'),
    ('"Link to this definition"', '"链接到本定义"'),
    ('"Download this page"', '"下载本页"'),
    ('"Close fullscreen"', '"退出全屏"'),
    ('aria-label="Main"', 'aria-label="章节"'),
    ('aria-label="Page"', 'aria-label="本页"'),
    ('aria-label="Section Navigation"', 'aria-label="章节导航"'),
]
_COPYRIGHT_RE = re.compile(r"©\s*Copyright\s+([^<]*?)\.(\s*<)")
_FIG_RE = re.compile(r'(<span class="caption-number">)Fig\. ([\d.]+)( </span>)')
_NAV_RE = re.compile(r'(<nav class="bd-links bd-docs-nav"[^>]*>)(.*?)(</nav>)', re.DOTALL)
_CAPTION_RE = re.compile(r'(?=<p aria-level="2" class="caption")')
_BODY_RE = re.compile(r">(" + "|".join(re.escape(e) for e, _ in BODY_ZH) + r")<")


@cache
def _catalogs() -> tuple[gettext.NullTranslations, ...]:
    import pydata_sphinx_theme
    import sphinx
    import sphinx_book_theme

    sources = [
        (Path(sphinx.__file__).parent / "locale", "sphinx"),
        (Path(pydata_sphinx_theme.__file__).parent / "locale", "sphinx"),
        (Path(sphinx_book_theme.__file__).parent / "theme" / "sphinx_book_theme" / "static"
         / "locales", "booktheme"),
    ]
    out = []
    for folder, domain in sources:
        try:
            out.append(gettext.translation(domain, str(folder), languages=["zh_CN", "zh"]))
        except OSError:
            continue
    return tuple(out)


def zh_gettext(message: str) -> str:
    """Chinese for a theme label: OVERRIDES_ZH, then the shipped catalogs, else unchanged."""
    if message in OVERRIDES_ZH:
        return OVERRIDES_ZH[message]
    for cat in _catalogs():
        got = cat.gettext(message)
        if got != message:
            return got
    return message


def translate_body(body: str) -> str:
    table = dict(BODY_ZH)
    return _BODY_RE.sub(lambda m: ">" + table[m.group(1)] + "<", body)


def apply(context: dict[str, Any], lang: str) -> None:
    """Localise one page's template context in place (lang "zh" or "en")."""
    context["theme_search_bar_text"] = SEARCH_PLACEHOLDER[lang]
    if lang != "zh":
        return
    context["gettext"] = zh_gettext
    context["_"] = zh_gettext
    context["translate"] = zh_gettext
    if "body" in context:
        context["body"] = translate_body(context["body"])
    scripts = context.get("script_files")
    if isinstance(scripts, list):
        for i, js in enumerate(scripts):
            body = getattr(js, "attributes", {}).get("body") if not isinstance(js, str) else None
            if body and any(e in body for e in SCRIPT_ZH):
                for en, zh in SCRIPT_ZH.items():
                    body = body.replace(f"'{en}'", f"'{zh}'")
                scripts[i] = type(js)(js.filename, priority=js.priority,
                                      **{**js.attributes, "body": body})


def localize_html(page: str, lang: str) -> str:
    """A rendered zh page: the English that templates hard-code becomes Chinese."""
    if lang != "zh":
        return page
    for en, zh in HTML_ZH:
        page = page.replace(en, zh)
    page = _FIG_RE.sub(r"\1图 \2\3", page)
    return _COPYRIGHT_RE.sub(r"版权所有 © \1\2", page)


def order_nav(page: str, lang: str, captions: dict[str, str], home: tuple[str, str, bool]) -> str:
    """The chapter list (sidebar and phone menu): the page's own language first; the zh list
    starts with the zh home page (the root, which the toc cannot list twice).

    captions: {lang: caption text}; home: (href, title, is this page)."""
    m = _NAV_RE.search(page)
    if not m:
        return page
    head, *blocks = _CAPTION_RE.split(m.group(2))
    by_lang: dict[str, str] = {}
    rest: list[str] = []
    for block in blocks:
        key = next((k for k, cap in captions.items()
                    if f'<span class="caption-text">{cap}</span>' in block), None)
        if key is None or key in by_lang:
            rest.append(block)
        else:
            by_lang[key] = block
    zh = by_lang.get("zh")
    if zh is not None and "bd-sidenav" in zh:
        href, title, current = home
        cls = "toctree-l1 current active" if current else "toctree-l1"
        a_cls = "current reference internal" if current else "reference internal"
        item = f'<li class="{cls}"><a class="{a_cls}" href="{href}">{title}</a></li>\n'
        zh = re.sub(r'(<ul class="[^"]*\bnav bd-sidenav[^"]*">\n?)', lambda g: g.group(1) + item,
                    zh, count=1)
        by_lang["zh"] = zh
    order = [lang] + [k for k in by_lang if k != lang]
    body = head + "".join(by_lang[k] for k in order if k in by_lang) + "".join(rest)
    return page[:m.start(2)] + body + page[m.end(2):]
