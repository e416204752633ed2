"""The built book (`make book` -> _build/html) and the page sources it comes from.

`make test` builds the book first (target `book`); these tests only read the result.
"""

from __future__ import annotations

import html.parser
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.tooling import BOOK_MATPLOTLIBRC

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "_build" / "html"
BOOK = REPO / "book"
LANGS = ("zh", "en")
PAGE_NAMES = ("index", "knobs", "slo-loop", "glossary", "lab-knob-sweep", "lab-slo-loop",
              "lab-scale-out", "autodl")
LESSONS = ("knobs", "slo-loop")
VENDORED = (
    "_static/vendor/mermaid/mermaid.esm.min.mjs",
    "_static/vendor/mathjax/tex-mml-chtml.js",
    "_static/vendor/requirejs/require.js",
    "_static/vendor/jupyter-widgets/embed-amd.js",
)

sys.path.insert(0, str(BOOK / "_ext"))


@pytest.fixture(scope="module")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"{SITE} is not built: run `make book` (make test does it first)")
    return SITE


def built_pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


# ---- external resources ---------------------------------------------------------------------

class _ResourceScanner(html.parser.HTMLParser):
    """Collects <script src>, <link href> (and <img src>, <iframe src>) URLs of one page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        attr = {"script": "src", "link": "href", "img": "src", "iframe": "src"}.get(tag)
        if attr and a.get(attr):
            self.urls.append((tag, a[attr] or ""))


def external_resources(page_html: str) -> list[tuple[str, str]]:
    """(tag, url) for every script/link/img/iframe that would be fetched from another host."""
    scanner = _ResourceScanner()
    scanner.feed(page_html)
    return [(tag, url) for tag, url in scanner.urls
            if urlsplit(url).scheme not in ("", "data") or url.startswith("//")]


def test_external_resource_scanner_catches_cdn_tags() -> None:
    page = ('<script src="https://cdn.jsdelivr.net/npm/mermaid.js"></script>'
            '<link rel="stylesheet" href="//fonts.example/x.css">'
            '<script src="../../_static/vendor/x.js"></script>'
            '<link href="../genindex.html" rel="index">')
    assert external_resources(page) == [
        ("script", "https://cdn.jsdelivr.net/npm/mermaid.js"),
        ("link", "//fonts.example/x.css"),
    ]


def test_no_script_or_link_points_outside_the_site(site: Path) -> None:
    bad = {}
    for page in built_pages(site):
        ext = external_resources(page.read_text(encoding="utf-8"))
        if ext:
            bad[str(page.relative_to(site))] = ext
    assert bad == {}


def test_grep_finds_no_cdn_script_or_link(site: Path) -> None:
    # the acceptance check, literally: grep for <script src= / <link href= to another host
    proc = subprocess.run(
        ["grep", "-rEn", "--include=*.html",
         r"<(script[^>]* src|link[^>]* href)=\"(https?:)?//", str(site)],
        capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout[:2000]  # grep: 1 = no match


def test_vendored_js_is_served_by_the_site(site: Path) -> None:
    for rel in VENDORED:
        assert (site / rel).is_file(), rel
    chunks = list((site / "_static/vendor/mermaid/chunks/mermaid.esm.min").glob("*.mjs"))
    assert len(chunks) > 20


def test_pages_load_mermaid_from_the_site(site: Path) -> None:
    with_mermaid = [p for p in built_pages(site) if 'class="mermaid"' in p.read_text("utf-8")]
    assert len(with_mermaid) >= 6
    for page in with_mermaid:
        text = page.read_text("utf-8")
        m = re.search(r'import mermaid from "([^"]+)"', text)
        assert m, f"{page}: no mermaid loader"
        assert (page.parent / m.group(1)).resolve() == (
            site / VENDORED[0]).resolve(), m.group(1)


# ---- pages and the language switch ----------------------------------------------------------

@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", PAGE_NAMES)
def test_every_page_is_built_with_a_working_language_switch(site: Path, lang: str,
                                                            name: str) -> None:
    page = site / "book" / lang / f"{name}.html"
    assert page.is_file()
    text = page.read_text("utf-8")
    hrefs = re.findall(r'class="lang-switch-link" href="([^"]+)"', text)
    other = "en" if lang == "zh" else "zh"
    assert hrefs == [f"../{other}/{name}.html"]
    assert (page.parent / hrefs[0]).resolve().is_file()
    assert f'<html lang="{"zh-CN" if lang == "zh" else "en"}"' in text


def test_root_index_points_into_the_book(site: Path) -> None:
    assert "book/zh/index.html" in (site / "index.html").read_text("utf-8")


# ---- lesson structure (seed sections 1-9) ---------------------------------------------------

def h2_section_numbers(markdown: str) -> list[int]:
    """Numbers of `## N · Title` headings outside fenced blocks, in order."""
    numbers, fence = [], None
    for line in markdown.splitlines():
        m = re.match(r"^\s*(`{3,}|~{3,}|:{3,})", line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark.startswith(fence[0]) and len(mark) >= len(fence):
                fence = None
            continue
        if fence is None:
            h = re.match(r"^## (\d+) · \S", line)
            if h:
                numbers.append(int(h.group(1)))
    return numbers


def test_section_scanner_ignores_code_and_subsections() -> None:
    text = "## 1 · A\n```python\n## 2 · not a heading\n```\n### 2 · sub\n## 2 · B\n"
    assert h2_section_numbers(text) == [1, 2]


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_has_seed_sections_1_to_9_once_in_order(lang: str, lesson: str) -> None:
    source = (BOOK / lang / f"{lesson}.md").read_text("utf-8")
    assert h2_section_numbers(source) == list(range(1, 10))


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_built_lesson_shows_sections_1_to_9(site: Path, lang: str, lesson: str) -> None:
    text = (site / "book" / lang / f"{lesson}.html").read_text("utf-8")
    h2 = re.findall(r"<h2>(\d+) · ", text)
    assert [int(n) for n in h2] == list(range(1, 10))


# ---- mermaid from a code cell (book/_ext/book_ext.py) ---------------------------------------

def test_cell_output_mermaid_html_becomes_a_mermaid_node() -> None:
    from book_ext import mermaid_from_outputs
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document
    from sphinxcontrib.mermaid import mermaid

    doc = new_document("t", get_default_settings(Parser))
    box = nodes.container()
    box += nodes.raw("", '<pre class="mermaid">\nflowchart TB\n  A --&gt; B\n</pre>\n',
                     format="html")
    box += nodes.raw("", "<pre>not a diagram</pre>", format="html")
    doc += box
    mermaid_from_outputs(None, doc)  # type: ignore[arg-type]
    found = list(doc.findall(mermaid))
    assert len(found) == 1
    assert found[0]["code"] == "flowchart TB\n  A --> B"
    assert len(list(doc.findall(nodes.raw))) == 1


# ---- matplotlib renders Chinese in the build ------------------------------------------------

def test_matplotlib_with_book_rc_draws_chinese_without_missing_glyphs() -> None:
    code = (
        "import warnings, matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "from matplotlib import font_manager as fm\n"
        "assert matplotlib.rcParams['font.sans-serif'][0] == 'Noto Sans CJK SC'\n"
        "print(fm.findfont(fm.FontProperties(family=['sans-serif'])))\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    fig, ax = plt.subplots()\n"
        "    ax.set_title('示意图：延迟随负载的变化')\n"
        "    fig.canvas.draw()\n"
        "print('|'.join(str(x.message) for x in w))\n"
    )
    env = {**os.environ, "MATPLOTLIBRC": str(BOOK_MATPLOTLIBRC)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    font_path, warnings_text = proc.stdout.splitlines()[-2:]
    assert "NotoSansCJK" in font_path
    assert "missing from font" not in warnings_text


def test_build_extension_points_kernels_at_the_book_matplotlibrc() -> None:
    text = (BOOK / "_ext" / "book_ext.py").read_text("utf-8")
    assert 'os.environ.setdefault("MATPLOTLIBRC"' in text
    assert (BOOK_MATPLOTLIBRC).is_file()


# ---- reader fixes in book_ext.py (markers, CJK bold, getting the code) -----------------------

def _doc_with(*children: object) -> object:
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    doc = new_document("t", get_default_settings(Parser))
    for c in children:
        doc += c
    return doc


def test_nbval_marker_lines_are_dropped_from_code() -> None:
    from book_ext import strip_nbval
    from docutils import nodes

    code = "# NBVAL_IGNORE_OUTPUT\nx = 1\n  # NBVAL_SKIP  \nprint(x)  # NBVAL_X stays\n"
    doc = _doc_with(nodes.literal_block(code, code))
    strip_nbval(None, doc)  # type: ignore[arg-type]
    assert next(iter(doc.findall(nodes.literal_block))).astext() == (
        "x = 1\nprint(x)  # NBVAL_X stays\n")


def test_literal_double_stars_next_to_cjk_become_bold() -> None:
    from book_ext import cjk_strong
    from docutils import nodes

    para = nodes.paragraph("", "", nodes.Text("测同一个**（质量、吞吐、延迟）三元组**：准确率"))
    code = nodes.literal_block("a**b**c", "a**b**c")
    doc = _doc_with(para, code)
    cjk_strong(None, doc)  # type: ignore[arg-type]
    strong = list(doc.findall(nodes.strong))
    assert [s.astext() for s in strong] == ["（质量、吞吐、延迟）三元组"]
    assert para.astext() == "测同一个（质量、吞吐、延迟）三元组：准确率"
    assert code.astext() == "a**b**c"


def test_getting_the_code_substitutions_and_archive(site: Path) -> None:
    import zipfile

    from book_ext import ARCHIVE_REL, substitutions

    class _Cfg:
        course_repo_url = "https://example.org/vllm-tuning-labs.git"

    class _App:
        config = _Cfg()

    subs = substitutions(_App())  # type: ignore[arg-type]
    assert subs["course_get_code"] == (
        "git clone https://example.org/vllm-tuning-labs.git vllm-tuning-labs")
    _Cfg.course_repo_url = ""
    fallback = substitutions(_App())  # type: ignore[arg-type]
    if not fallback["course_repo_url"].startswith("../../"):  # a clone with an origin remote
        assert "git clone" in fallback["course_get_code"]
    else:
        assert fallback["course_get_code"] == "unzip -q vllm-tuning-labs.zip"
    with zipfile.ZipFile(site / ARCHIVE_REL) as zf:
        names = zf.namelist()
    assert "vllm-tuning-labs/pyproject.toml" in names
    assert "vllm-tuning-labs/src/course_utils/core/keep.py" in names
    assert (site / "favicon.ico").stat().st_size > 100


@pytest.mark.parametrize("name", PAGE_NAMES)
def test_no_nbval_marker_in_built_pages(site: Path, name: str) -> None:
    for lang in LANGS:
        assert "NBVAL_" not in (site / "book" / lang / f"{name}.html").read_text("utf-8")


# ---- the site for a Chinese reader and a phone (book_ext, book_i18n, book_search) -----------

ZH_FORBIDDEN = ("Toggle primary sidebar", "Toggle secondary sidebar", "Link to this heading",
                "© Copyright", "Download this page", 'aria-label="Main"', 'aria-label="Page"',
                "Close fullscreen", "Search Results")


def _zh_html_pages(site: Path) -> list[Path]:
    return [*sorted((site / "book" / "zh").glob("*.html")), site / "search-zh.html"]


def test_zh_pages_carry_no_english_theme_text(site: Path) -> None:
    pages = _zh_html_pages(site)
    assert len(pages) >= len(PAGE_NAMES) + 1  # the pages and the Chinese search page
    def shown(page: Path) -> str:  # the page without its scripts (the zh catalog names its keys)
        return re.sub(r"<script\b.*?</script>", "", page.read_text("utf-8"), flags=re.S)

    bad = {p.name: [e for e in ZH_FORBIDDEN if e in shown(p)] for p in pages}
    assert {k: v for k, v in bad.items() if v} == {}
    knobs = (site / "book" / "zh" / "knobs.html").read_text("utf-8")
    assert 'title="链接到本节"' in knobs and "版权所有 © 2026" in knobs


def _nav_captions(text: str) -> list[str]:
    nav = re.search(r'<nav class="bd-links bd-docs-nav".*?</nav>', text, re.S)
    assert nav, "no chapter list"
    return re.findall(r'<span class="caption-text">([^<]+)</span>', nav.group(0))


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", PAGE_NAMES)
def test_chapter_list_starts_with_the_page_language(site: Path, lang: str, name: str) -> None:
    text = (site / "book" / lang / f"{name}.html").read_text("utf-8")
    captions = _nav_captions(text)
    assert captions[0] == ("中文" if lang == "zh" else "English"), captions
    nav = re.search(r'<nav class="bd-links bd-docs-nav".*?</nav>', text, re.S).group(0)
    zh_list = nav.split('<span class="caption-text">中文</span>', 1)[1].split("</ul>", 1)[0]
    home = "index.html" if lang == "zh" else "../zh/index.html"
    first = re.search(r'href="([^"]+)"', zh_list)
    assert first and first.group(1) in (home, "#"), zh_list[:300]  # its own home page first


def test_mathjax_only_on_pages_with_math(site: Path) -> None:
    for page in (site / "book").rglob("*.html"):
        text = page.read_text("utf-8")
        has_math = 'class="math' in text
        assert ("tex-mml-chtml.js" in text) == has_math, page


def test_icon_script_and_search_index_only_where_needed(site: Path) -> None:
    for page in built_pages(site):
        rel = page.relative_to(site).as_posix()
        if rel.startswith("_static/"):
            continue
        text = page.read_text("utf-8")
        assert "fontawesome.js" not in text, rel
        assert ("searchindex.js" in text) == (rel in ("search.html", "search-zh.html")), rel


def test_zh_pages_search_on_the_chinese_search_page(site: Path) -> None:
    zh = (site / "book" / "zh" / "knobs.html").read_text("utf-8")
    en = (site / "book" / "en" / "knobs.html").read_text("utf-8")
    action = r'<form class="bd-search[^>]*action="([^"]+)"'
    assert set(re.findall(action, zh)) == {"../../search-zh.html"}
    assert set(re.findall(action, en)) == {"../../search.html"}
    page = (site / "search-zh.html").read_text("utf-8")
    assert '<html lang="zh-CN"' in page and "搜索结果" in page and "<h1>搜索</h1>" in page


def test_search_index_splits_chinese_into_pairs_and_keeps_english_stemming(site: Path) -> None:
    import json

    from book_search import split_text

    assert split_text("前缀缓存 running") == ["前", "缀", "缓", "存", "前缀", "缀缓", "缓存",
                                           "running"]
    raw = (site / "searchindex.js").read_text("utf-8")
    index = json.loads(raw[raw.index("(") + 1:raw.rindex(")")])
    docs = index["docnames"]
    terms = index["terms"]

    def pages(term: str) -> set[str]:
        out = set()
        for table in (index["terms"], index["titleterms"]):
            hit = table.get(term, [])
            out |= {docs[i] for i in ([hit] if isinstance(hit, int) else hit)}
        return out

    for word in ("调优", "前缀缓存", "拐点"):  # a page matches when it holds every pair
        with_word = {f"book/zh/{name}" for name in PAGE_NAMES
                     if word in (BOOK / "zh" / f"{name}.md").read_text("utf-8")}
        found = set(docs)
        for i in range(len(word) - 1):
            found &= pages(word[i:i + 2])
        assert len(with_word) >= 2 and with_word <= found, (word, with_word - found)
    assert "run" in terms and "running" not in index["terms"]  # English is stemmed


def _img_tags(text: str) -> list[str]:
    return re.findall(r"<img\b[^>]*>", text)


def test_alt_checker_rejects_paths_and_empty_alts() -> None:
    assert _bad_alts('<img alt="../../_images/x.png" src="x.png"><img src="y.png">') == 2
    assert _bad_alts('<img alt="" src="x.png">') == 1
    assert _bad_alts('<img alt="Line chart of latency against load" src="x.png">') == 0
    assert _bad_alts('<img alt="折线图（req/s）" src="x.png">') == 0


def _bad_alts(text: str) -> int:
    bad = 0
    for tag in _img_tags(text):
        alt = re.search(r'\balt="([^"]*)"', tag)
        value = alt.group(1).strip() if alt else ""
        path_like = re.fullmatch(r"[\w.-]*/[\w./-]*|[\w./-]*\.(png|jpe?g|svg|gif)", value, re.A)
        if not value or path_like:
            bad += 1
    return bad


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", PAGE_NAMES)
def test_every_image_has_real_alt_text_and_a_caption(site: Path, lang: str, name: str) -> None:
    text = (site / "book" / lang / f"{name}.html").read_text("utf-8")
    assert _bad_alts(text) == 0
    figures = re.findall(r"<figure\b.*?</figure>", text, re.S)
    assert len(figures) == len(_img_tags(text))
    for fig in figures:
        cap = re.search(r"<figcaption>(.*?)</figcaption>", fig, re.S)
        assert cap and re.sub(r"<[^>]+>", "", cap.group(1)).strip(), fig[:300]
