"""Search for a book with an English and a Chinese tree in one Sphinx project.

- Index: one splitter for both trees (registered as Sphinx's "en" search language). Latin
  words are split and stemmed as Sphinx's English search does; a run of Chinese characters
  is indexed as its characters and its overlapping pairs ("前缀缓存" -> 前, 缀, 缓, 存, 前缀,
  缀缓, 缓存). The browser splits a Chinese query the same way (a run of 2+ characters into its
  pairs), and a page matches when it holds every pair, so every page containing the words
  is found, whatever a dictionary segmenter would have cut.
- Pages: `search.html` lists English pages; `search-zh.html` (same template, Chinese labels)
  lists Chinese pages; zh pages' search fields submit to it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sphinx.application import Sphinx
from sphinx.search import languages
from sphinx.search.en import SearchEnglish

ZH_SEARCH = "search-zh"  # at the root: searchtools links results relative to the page
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(r"\w+")

# The browser's query splitter: Latin words as Sphinx splits them, Chinese runs as pairs.
JS_SPLITTER = r"""
var splitQuery = (query) => {
  const out = [];
  for (const part of query.split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)) {
    if (!part) continue;
    for (const piece of part.split(/([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)/u)) {
      if (!piece) continue;
      if (!/^[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+$/u.test(piece)) {
        out.push(piece);
        continue;
      }
      const ch = [...piece];
      if (ch.length === 1) out.push(piece);
      for (let i = 0; i + 1 < ch.length; i++) out.push(ch[i] + ch[i + 1]);
    }
  }
  return out;
};
"""

# Sphinx's search page strings (searchtools.js) on the Chinese search page
SEARCH_ZH = {
    "Search Results": "搜索结果",
    "Searching": "正在搜索",
    "Preparing search...": "正在准备搜索…",
    "Search finished, found ${resultCount} page(s) matching the search query.":
        "搜索完成，找到 ${resultCount} 个页面。",
    "Your search did not match any documents. Please make sure that all words are spelled "
    "correctly and that you've selected enough categories.":
        "没有找到匹配的页面。请检查拼写，或换一个词再试。",
    ", in ": "，位于 ",
}


def cjk_terms(run: str) -> list[str]:
    """Index terms of one run of Chinese characters: each character and each adjacent pair."""
    return list(run) + [run[i:i + 2] for i in range(len(run) - 1)]


def split_text(text: str) -> list[str]:
    """Words of a text: Latin words whole, Chinese runs as characters and pairs."""
    out: list[str] = []
    for word in _WORD.findall(text):
        pos = 0
        for m in _CJK_RUN.finditer(word):
            if m.start() > pos:
                out.append(word[pos:m.start()])
            out.extend(cjk_terms(m.group(0)))
            pos = m.end()
        if pos < len(word):
            out.append(word[pos:])
    return [w for w in out if w]


class SearchBilingual(SearchEnglish):
    """English stemming for Latin words; Chinese runs split into characters and pairs."""

    js_splitter_code = JS_SPLITTER

    def split(self, input: str) -> list[str]:
        return split_text(input)

    def stem(self, word: str) -> str:
        return word if _CJK_RUN.match(word) else super().stem(word)


def results_filter_js(prefix: str) -> str:
    """Keep only the results of one language tree (runs before searchtools' own init)."""
    return (
        "document.addEventListener('DOMContentLoaded', () => {"
        " if (typeof Search === 'undefined') return;"
        " const run = Search._performSearch;"
        " Search._performSearch = (...args) => run(...args)"
        f".filter((r) => String(r[0]).startsWith({json.dumps(prefix)}));"
        " });"
    )


def collect_pages(app: Sphinx) -> Any:
    if app.builder.format == "html" and getattr(app.builder, "search", False):
        yield ZH_SEARCH, {}, "search.html"


def search_page_context(app: Sphinx, pagename: str, context: dict[str, Any]) -> str | None:
    """Set up a search page; returns its language ("zh"/"en"), or None for other pages."""
    if pagename not in ("search", ZH_SEARCH):
        return None
    lang = "zh" if pagename == ZH_SEARCH else "en"
    app.add_js_file(None, body=results_filter_js(f"book/{lang}/"), priority=150)
    if lang == "zh":
        catalog = {"messages": SEARCH_ZH, "plural_expr": "0", "locale": "zh_CN"}
        body = json.dumps(catalog, ensure_ascii=False)
        app.add_js_file(None, body=f"Documentation.addTranslations({body});",
                        priority=210)  # after doctools.js (200)
    return lang


def search_target(context: dict[str, Any], lang: str) -> None:
    """zh pages: the search field submits to the Chinese search page."""
    if lang != "zh":
        return
    pathto = context["pathto"]

    def pathto_zh(name: str, *args: Any, **kwargs: Any) -> str:
        return pathto(ZH_SEARCH if name == "search" else name, *args, **kwargs)

    context["pathto"] = pathto_zh


def setup(app: Sphinx) -> None:
    languages["en"] = SearchBilingual
    app.connect("html-collect-pages", collect_pages)
