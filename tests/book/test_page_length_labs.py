"""How much a reader reads on a lab page: visible words (en) or Chinese characters (zh) in the
built page's article, outside collapsed blocks (dropdowns, <details> such as a hidden cell
output, anything marked hidden), code and cell outputs included.

Lab pages: at most 4,000 words (en) and 3,500 Chinese characters (zh). The lessons have their
own limits (the same counting); this file holds the lab pages'.
Print the counts: python tests/book/test_page_length_labs.py [_build/html]
"""

from __future__ import annotations

import html.parser
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "_build" / "html"
LIMITS = {"en": 4000, "zh": 3500}
LABS = ("lab-knob-sweep", "lab-slo-loop", "lab-scale-out")
EN_WORD = re.compile(r"[A-Za-z0-9_]+(?:['’.\-][A-Za-z0-9_]+)*")
ZH_CHAR = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}
SKIP_TAGS = ("details", "script", "style", "template", "noscript")
SKIP_CLASSES = {"dropdown", "toggle-hidden", "headerlink"}


class _Visible(html.parser.HTMLParser):
    """Text inside <article>, skipping collapsed subtrees."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.skip_at: int | None = None
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID:
            return
        if self.depth == 0:
            self.depth = 1 if tag == "article" else 0
            return
        self.depth += 1
        a = dict(attrs)
        hidden = (tag in SKIP_TAGS or "hidden" in a
                  or SKIP_CLASSES & set((a.get("class") or "").split()))
        if self.skip_at is None and hidden:
            self.skip_at = self.depth

    def handle_endtag(self, tag: str) -> None:
        if self.depth == 0 or tag in VOID:
            return
        if self.skip_at == self.depth:
            self.skip_at = None
        self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth and self.skip_at is None:
            self.parts.append(data)


def visible_count(page_html: str, lang: str) -> int:
    parser = _Visible()
    parser.feed(page_html)
    parser.close()
    text = " ".join(parser.parts)
    return len((ZH_CHAR if lang == "zh" else EN_WORD).findall(text))


def test_counter_skips_dropdowns_and_hidden_outputs() -> None:
    page = ('<nav>menu</nav><article><h1>Lab one<a class="headerlink">#</a></h1><p>two words 中文</p>'
            '<div class="admonition dropdown"><p>answer text 答案</p></div>'
            '<details class="hide below-input"><pre>long table 表格</pre></details>'
            '<br><p>last</p></article><footer>footer</footer>')
    assert visible_count(page, "en") == 5  # Lab one two words last
    assert visible_count(page, "zh") == 2
    big = "<article><p>" + "word " * (LIMITS["en"] + 1) + "</p></article>"
    assert visible_count(big, "en") > LIMITS["en"]


@pytest.fixture(scope="module")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"{SITE} is not built: run `make book` (make test does it first)")
    return SITE


@pytest.mark.parametrize("lang", sorted(LIMITS))
@pytest.mark.parametrize("name", LABS)
def test_lab_page_is_within_its_reading_limit(site: Path, lang: str, name: str) -> None:
    n = visible_count((site / "book" / lang / f"{name}.html").read_text("utf-8"), lang)
    assert 500 < n <= LIMITS[lang], f"{lang}/{name}: {n} visible, limit {LIMITS[lang]}"


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else SITE
    for lang in sorted(LIMITS):
        for name in LABS:
            html_text = (root / "book" / lang / f"{name}.html").read_text("utf-8")
            print(f"{lang}/{name:15} {visible_count(html_text, lang):6}  (limit {LIMITS[lang]})")
