"""How much a reader reads on one page: visible words (en) or Chinese characters (zh) in the
built page's article, outside collapsed blocks (dropdown admonitions, <details> such as a
hidden cell input, anything marked hidden), code-cell outputs included.

The limits are a table (page kind x language); a page is listed with its kind in PAGES.
Run as a script to print the counts: python tests/book/test_page_length.py [_build/html]
"""

from __future__ import annotations

import html.parser
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "_build" / "html"

# (kind, lang) -> most visible words (en) or Chinese characters (zh) on one page
LIMITS: dict[tuple[str, str], int] = {
    ("lesson", "en"): 5500,
    ("lesson", "zh"): 5500,
    ("lab", "en"): 4000,
    ("lab", "zh"): 3500,
}
# page name (book/<lang>/<name>.md) -> kind
PAGES: dict[str, str] = {
    "knobs": "lesson",
    "slo-loop": "lesson",
    "lab-knob-sweep": "lab",
    "lab-slo-loop": "lab",
    "lab-scale-out": "lab",
}
LANGS = ("en", "zh")

ZH_CHAR = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# void elements never get an end tag, so they must not open a skipped region
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}
# elements that end a word: text on either side of them is never one word (inline ones such as
# the <span>s of highlighted code are joined as written)
BLOCK = {"p", "div", "li", "td", "th", "tr", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "br",
         "table", "dt", "dd", "summary", "section", "blockquote", "ul", "ol", "figcaption"}


def _collapsed(tag: str, attrs: dict[str, str | None]) -> bool:
    classes = (attrs.get("class") or "").split()
    return (
        tag in ("details", "script", "style", "template", "noscript")
        or "hidden" in attrs
        or "dropdown" in classes
        or "toggle-hidden" in classes
        or "headerlink" in classes
    )


class _Visible(html.parser.HTMLParser):
    """Text inside <article> (the page body without navigation), skipping collapsed subtrees."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0  # open elements inside <article>
        self.skip_at: int | None = None  # depth at which a collapsed subtree opened
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in BLOCK:
            self.parts.append(" ")
        if tag in VOID:
            return
        if self.depth == 0:
            if tag == "article":
                self.depth = 1
            return
        self.depth += 1
        if self.skip_at is None and _collapsed(tag, dict(attrs)):
            self.skip_at = self.depth

    def handle_endtag(self, tag: str) -> None:
        if tag in BLOCK:
            self.parts.append(" ")
        if self.depth == 0 or tag in VOID:
            return
        if self.skip_at == self.depth:
            self.skip_at = None
        self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth and self.skip_at is None:
            self.parts.append(data)


def visible_text(page_html: str) -> str:
    parser = _Visible()
    parser.feed(page_html)
    parser.close()
    return "".join(parser.parts)


def measure(text: str, lang: str) -> int:
    """en: words as whitespace separates them (code and symbols included); zh: Chinese
    characters."""
    return len(ZH_CHAR.findall(text)) if lang == "zh" else len(text.split())


def page_counts(site: Path) -> dict[tuple[str, str], int]:
    return {
        (lang, name): measure(visible_text((site / "book" / lang / f"{name}.html").read_text(
            "utf-8")), lang)
        for lang in LANGS for name in PAGES
    }


# ---- the counter itself (no build needed) ----------------------------------------------------

SAMPLE = """<html><body><nav>menu words here</nav><article class="bd-article">
<h1>Title one<a class="headerlink" href="#t">#</a></h1>
<p>Two words. 中文字</p>
<div class="admonition dropdown"><p class="admonition-title">Answer</p><p>hidden 隐藏</p></div>
<div class="cell tag_hide-input"><details class="hide above-input"><summary>Show</summary>
<pre>code in details</pre></details><pre><span>print</span><span>(x)</span></pre>
<div class="cell_output"><pre>output 0.26.0 shown</pre></div>
</div><img src="x.png" alt="alt"><br><p hidden>not shown</p><p>last max_num_seqs</p>
</article><footer>footer words</footer></body></html>"""


def test_counter_reads_the_article_and_skips_what_is_collapsed() -> None:
    text = visible_text(SAMPLE)
    assert text.split() == ["Title", "one", "Two", "words.", "中文字", "print(x)", "output",
                            "0.26.0", "shown", "last", "max_num_seqs"]
    assert measure(text, "en") == 11
    assert measure(text, "zh") == 3


def test_counter_counts_a_page_over_the_limit() -> None:
    big = "<article>" + "<p>" + "word " * 5501 + "</p></article>"
    assert measure(visible_text(big), "en") > LIMITS[("lesson", "en")]
    assert measure(visible_text("<article><p>" + "字" * 3501 + "</p></article>"), "zh") > LIMITS[
        ("lab", "zh")]


# ---- the built pages -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"{SITE} is not built: run `make book` (make test does it first)")
    return SITE


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", sorted(PAGES))
def test_page_is_within_its_reading_limit(site: Path, lang: str, name: str) -> None:
    page = site / "book" / lang / f"{name}.html"
    n = measure(visible_text(page.read_text("utf-8")), lang)
    limit = LIMITS[(PAGES[name], lang)]
    unit = "Chinese characters" if lang == "zh" else "words"
    assert n > 0, f"{page}: no visible text found"
    assert n <= limit, f"{lang}/{name}: {n} visible {unit}, limit {limit}"


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else SITE
    for (lang, name), n in page_counts(root).items():
        print(f"{lang}/{name:12} {n:6}  (limit {LIMITS[(PAGES[name], lang)]})")
