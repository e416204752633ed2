"""Headless Chromium on the built book: Mermaid rendered, CJK font used, language switch
resolves, nothing fetched from outside 127.0.0.1. Screenshots: .artifacts/screenshots/.

The reader's acceptance, each page at 1366 px and 390 px (screenshots <lang>-<page>-<width>):
1. at 390 px tapping ☰ shows the chapter list; no document is wider than the viewport;
2. no Mermaid label below 11 px at 1366 px; each diagram fits one screen or can be enlarged;
3. no table or output line widens a page (wide content scrolls in its own box);
4. zh pages: Next/Previous/Contents and lab verdict/plot text in Chinese; Next/Previous never
   cross to the other language;
5. no `<COURSE_REPO_URL>`, `NBVAL_IGNORE_OUTPUT`, `/tmp/` path or literal `**` on any page.

The harness (tests/book/browser_harness.py) is reusable by other tests; see its docstring.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.book.browser_harness import SCREENSHOTS, run_plan, serve_site
from tests.tooling import BOOK_MATPLOTLIBRC

LANGS = ("zh", "en")
PAGES = ("index", "knobs", "slo-loop", "glossary")
ALL_PAGES = ("index", "knobs", "slo-loop", "lab-knob-sweep", "lab-slo-loop", "lab-scale-out",
             "autodl", "glossary")
WIDTHS = {1366: 768, 390: 844}
MIN_LABEL_PX = 11
CJK = re.compile(r"[\u4e00-\u9fff]")
# English that the labs print (keep.verdict / pick_knee / tune) and the theme's own labels
LAB_ENGLISH = re.compile(r"\b(?:KEEP|REVERT|RECHECK|knee between|every valid tested rate|"
                         r"names no engine knob|plateau: no knob|GPU budget:|max_steps \()")
OPEN_PRIMARY = ("(async () => { const b = [...document.querySelectorAll('.primary-toggle')]"
                ".find((e) => e.offsetParent !== null); if (!b) return 'no visible toggle';"
                " b.click(); await new Promise((r) => setTimeout(r, 400));"
                " const d = document.querySelector('#pst-primary-sidebar-modal');"
                " const links = d ? [...d.querySelectorAll('nav a.reference')]"
                ".filter((a) => a.getClientRects().length) : [];"
                " const out = {open: !!(d && d.open), links: links.length};"
                " if (d && d.open) d.close(); return out; })()")  # the screenshot shows the page
ENLARGE = ("(async () => { const b = document.querySelector('.diagram-enlarge');"
           " if (!b) return null; b.click(); await new Promise((r) => setTimeout(r, 300));"
           " const o = document.querySelector('.diagram-overlay');"
           " if (!o) return {open: false}; const svg = o.querySelector('svg');"
           " const s = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;"
           " let min = Infinity; for (const t of svg.querySelectorAll("
           "'text, foreignObject span, foreignObject div, foreignObject p')) {"
           " if (!t.textContent.trim()) continue; const fs = parseFloat(getComputedStyle(t).fontSize);"
           " if (fs) min = Math.min(min, fs * s); }"
           " o.querySelector('[data-act=close]').click();"
           " return {open: true, min_font_px: min,"
           " closed: !document.querySelector('.diagram-overlay')}; })()")
CELL_MERMAID_SVGS = "document.querySelectorAll('.cell_output .mermaid svg').length"
BODY_TEXT_LEN = "(document.querySelector('main') || document.body).innerText.length"


def _name(lang: str, page: str) -> str:
    return f"{lang}-{page}"


@pytest.fixture(scope="module")
def browser_run(book_run: dict[str, Any]) -> dict[str, Any]:
    """The font, Mermaid and language-switch checks: each of PAGES at 1366 px, and the root."""
    pages = [{**p, "name": p["name"].removesuffix("-1366")} for p in book_run["pages"]
             if p["name"] in {_wname(lang, page, 1366) for lang in LANGS for page in PAGES}]
    root = {**_page(book_run, "index.html"), "name": "root-redirect"}
    return {**book_run, "pages": [*pages, root]}


def _page(run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in run["pages"] if p["name"] == name)


def test_no_request_left_loopback(browser_run: dict[str, Any]) -> None:
    assert browser_run["requests"], "no requests recorded at all"
    assert browser_run["external_requests"] == []


def test_no_broken_local_resources(browser_run: dict[str, Any]) -> None:
    assert browser_run["bad_responses"] == []


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", PAGES)
def test_page_loads_cleanly(browser_run: dict[str, Any], lang: str, page: str) -> None:
    res = _page(browser_run, _name(lang, page))
    assert res.get("error") is None
    assert res["status"] == 200
    assert res["page_errors"] == []
    assert res["console_errors"] == []
    assert res["step_errors"] == []
    assert res["html_lang"] == ("zh-CN" if lang == "zh" else "en")
    assert res["evals"]["text_len"] > 200


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", PAGES)
def test_every_mermaid_block_became_svg(browser_run: dict[str, Any], lang: str,
                                         page: str) -> None:
    m = _page(browser_run, _name(lang, page))["mermaid"]
    assert m["blocks"] >= 1, "every one of these pages has at least one diagram"
    assert m["svgs"] == m["blocks"]
    assert m["errors"] == 0


@pytest.mark.parametrize("lang", LANGS)
def test_mermaid_from_a_code_cell_renders(browser_run: dict[str, Any], lang: str) -> None:
    # slo-loop prints the decision tree via course_utils.core.diagnose.mermaid_html()
    res = _page(browser_run, _name(lang, "slo-loop"))
    assert res["evals"]["cell_mermaid_svgs"] >= 1


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", PAGES)
def test_cjk_text_uses_a_cjk_font(browser_run: dict[str, Any], lang: str, page: str) -> None:
    probes = _page(browser_run, _name(lang, page))["cjk"]["probes"]
    # zh pages: headings and paragraphs; en pages: at least the "中文" switch link
    assert len(probes) >= (3 if lang == "zh" else 1)
    for probe in probes:
        assert any(f.startswith("Noto Sans CJK") for f in probe["fonts"]), probe
        # every CJK character was drawn by a CJK font (no .notdef boxes from a Latin font)
        assert probe["cjk_glyphs"] >= probe["cjk_chars"] > 0, probe


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", PAGES)
def test_language_switch_resolves(browser_run: dict[str, Any], lang: str, page: str) -> None:
    switch = _page(browser_run, _name(lang, page))["lang_switch"]
    other = "en" if lang == "zh" else "zh"
    assert switch["href"] is not None
    assert switch["href"].endswith(f"/book/{other}/{page}.html")
    assert switch["status"] == 200


def test_root_redirects_into_the_book(browser_run: dict[str, Any]) -> None:
    res = _page(browser_run, "root-redirect")
    assert res["status"] == 200
    assert res.get("error") is None


# ---- the reader's acceptance: every page at 1366 px and 390 px --------------------------------

def _wname(lang: str, page: str, width: int) -> str:
    return f"{lang}-{page}-{width}"


@pytest.fixture(scope="module")
def reader_run(book_run: dict[str, Any]) -> dict[str, Any]:
    """Every page of ALL_PAGES at each of WIDTHS, with a screenshot."""
    names = {_wname(lang, page, w) for lang in LANGS for page in ALL_PAGES for w in WIDTHS}
    return {**book_run, "pages": [p for p in book_run["pages"] if p["name"] in names]}


def _rpage(run: dict[str, Any], lang: str, page: str, width: int) -> dict[str, Any]:
    res = _page(run, _wname(lang, page, width))
    assert res.get("error") is None, res.get("error")
    return res


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", ALL_PAGES)
def test_phone_menu_opens_the_chapter_list(reader_run: dict[str, Any], lang: str,
                                           page: str) -> None:
    res = _rpage(reader_run, lang, page, 390)
    assert res["step_errors"] == []
    primary = res["evals"]["primary"]
    assert primary != "no visible toggle"
    assert primary["open"] and primary["links"] >= 6, primary


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", ALL_PAGES)
def test_nothing_widens_the_page(reader_run: dict[str, Any], lang: str, page: str,
                                 width: int) -> None:
    lay = _rpage(reader_run, lang, page, width)["layout"]
    assert lay["doc_width"] <= lay["client_width"], lay
    assert lay["sticking_out"] == [], lay


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", ALL_PAGES)
def test_diagram_labels_are_readable_and_diagrams_fit_or_enlarge(
        reader_run: dict[str, Any], lang: str, page: str) -> None:
    for width in WIDTHS:
        for d in _rpage(reader_run, lang, page, width)["diagrams"]:
            assert d["rendered"], d
            if width == 1366:
                assert d["min_font_px"] is not None and d["min_font_px"] >= MIN_LABEL_PX, d
            assert d["fits_height"] or d["enlarge"], d


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", ("index", "knobs", "slo-loop", "glossary"))
def test_enlarged_diagram_is_readable_and_closes(reader_run: dict[str, Any], lang: str,
                                                  page: str, width: int) -> None:
    big = _rpage(reader_run, lang, page, width)["evals"]["enlarge"]
    assert big is not None and big["open"], big
    assert big["min_font_px"] >= MIN_LABEL_PX and big["closed"], big


@pytest.mark.parametrize("page", ALL_PAGES)
def test_zh_diagrams_are_labelled_in_chinese(reader_run: dict[str, Any], page: str) -> None:
    """Every Mermaid diagram on a zh page has Chinese labels (knob names and numbers may stay
    Latin); the en counterpart has none."""
    for d in _rpage(reader_run, "zh", page, 1366)["diagrams"]:
        texts = [x for x in d.get("texts", []) if re.search(r"[A-Za-z]{3,}", x)]
        assert any(CJK.search(x) for x in d.get("texts", [])), d.get("texts")
        latin_only = [x for x in texts if not CJK.search(x) and " " in x.strip()]
        assert len(latin_only) <= len(d.get("texts", [])) // 3, latin_only
    for d in _rpage(reader_run, "en", page, 1366)["diagrams"]:
        assert not any(CJK.search(x) for x in d.get("texts", [])), d.get("texts")


def test_some_pages_have_diagrams(reader_run: dict[str, Any]) -> None:
    n = sum(len(_rpage(reader_run, lang, page, 1366)["diagrams"])
            for lang in LANGS for page in ALL_PAGES)
    assert n >= 10


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", ALL_PAGES)
def test_prev_next_stay_in_the_page_language(reader_run: dict[str, Any], lang: str,
                                             page: str) -> None:
    nav = _rpage(reader_run, lang, page, 1366)["nav"]
    for key in ("prev", "next"):
        if nav[key] is not None:
            assert f"/book/{lang}/" in nav[key]["href"], nav[key]
            if lang == "zh":
                assert CJK.search(nav[key]["text"]), nav[key]
                assert not re.search(r"\b(?:next|previous)\b", nav[key]["text"], re.I)


@pytest.mark.parametrize("lang", LANGS)
def test_each_language_is_one_closed_reading_order(reader_run: dict[str, Any],
                                                   lang: str) -> None:
    linked = {p: _rpage(reader_run, lang, p, 1366)["nav"] for p in ALL_PAGES}
    with_next = [p for p, nav in linked.items() if nav["next"] is not None]
    with_prev = [p for p, nav in linked.items() if nav["prev"] is not None]
    assert len(with_next) == len(ALL_PAGES) - 1 and len(with_prev) == len(ALL_PAGES) - 1


@pytest.mark.parametrize("page", ALL_PAGES)
def test_zh_theme_labels_are_chinese(reader_run: dict[str, Any], page: str) -> None:
    nav = _rpage(reader_run, "zh", page, 1366)["nav"]
    assert nav["search_placeholder"] and CJK.search(nav["search_placeholder"])
    text = nav["main_text"]
    for english in ("Contents", "Click to show", "Show code cell", "Hide code cell"):
        assert english not in text, english
    en = _rpage(reader_run, "en", page, 1366)["nav"]
    assert en["search_placeholder"] and not CJK.search(en["search_placeholder"])


@pytest.mark.parametrize("page", ("lab-knob-sweep", "lab-slo-loop", "lab-scale-out"))
def test_zh_lab_output_and_plots_are_chinese(reader_run: dict[str, Any], page: str) -> None:
    nav = _rpage(reader_run, "zh", page, 1366)["nav"]
    outputs = "\n".join(nav["outputs"])
    assert not LAB_ENGLISH.search(outputs), LAB_ENGLISH.search(outputs).group(0)
    # plot text is checked where it is made (tests/lab/test_plots.py: lang="zh")


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", ALL_PAGES)
def test_no_debris_on_the_page(reader_run: dict[str, Any], lang: str, page: str) -> None:
    nav = _rpage(reader_run, lang, page, 1366)["nav"]
    text = nav["main_text"]
    assert "<COURSE_REPO_URL>" not in text
    assert "NBVAL_" not in text
    tmp = re.search(r".{0,60}(?<![\w.])/tmp/.{0,40}", text)
    assert tmp is None, tmp.group(0)
    prose = text
    for block in nav["code"] + nav["outputs"] + nav.get("pre", []):  # code keeps its **
        prose = prose.replace(block, "")
    stars = re.search(r".{0,30}\*\*.{0,30}", prose)
    assert stars is None, stars.group(0)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", ALL_PAGES)
def test_reader_screenshots_kept(reader_run: dict[str, Any], lang: str, page: str) -> None:
    for width in WIDTHS:
        shot = Path(_rpage(reader_run, lang, page, width)["screenshot"])
        assert shot.parent == SCREENSHOTS and shot.stat().st_size > 10_000


# ---- every page at 390 (and 1366, 375, 360): width, weight, every diagram enlarged -----------

SITE_PAGES = [f"book/{lang}/{page}.html" for lang in LANGS
              for page in (*ALL_PAGES, "field-notes")] + [
    "search.html", "search-zh.html", "genindex.html", "index.html"]
EXTRA_WIDTHS = (1366, 375, 360)
PAGE_BUDGET_BYTES = 1_500_000
MIN_ENLARGED_PX = 12
# Opens every diagram's enlarged view in turn: labels as drawn, shape fills, and whether the
# whole diagram lies inside the view's scrolling area (reachable by panning).
ENLARGE_EVERY = """(async () => {
  const out = [];
  for (const b of [...document.querySelectorAll('.diagram-enlarge')]) {
    const el = b.closest('.diagram-frame').querySelector('.mermaid');
    b.click(); await new Promise((r) => setTimeout(r, 300));
    const o = document.querySelector('.diagram-overlay');
    if (!o) { out.push({open: false}); continue; }
    const body = o.querySelector('.diagram-overlay-body');
    const svg = body.querySelector('svg');
    const sr = svg.getBoundingClientRect(), br = body.getBoundingClientRect();
    const s = sr.width / svg.viewBox.baseVal.width;
    let min = Infinity, labels = 0;
    for (const t of svg.querySelectorAll('text, foreignObject span, foreignObject div, foreignObject p')) {
      if (!t.textContent.trim()) continue;
      const fs = parseFloat(getComputedStyle(t).fontSize);
      if (fs) { min = Math.min(min, fs * s); labels++; }
    }
    const fills = [...svg.querySelectorAll('g.node rect, g.node polygon, g.node circle, g.cluster rect')]
      .map((n) => getComputedStyle(n).fill);
    const left = sr.left - br.left + body.scrollLeft, top = sr.top - br.top + body.scrollTop;
    out.push({open: true, in_cell: !!el.closest('.cell_output'), labels,
      min_font_px: labels ? min : null, shapes: fills.length,
      black: fills.filter((f) => f === 'rgb(0, 0, 0)' || f === 'black').length,
      overlay_width: o.getBoundingClientRect().width, viewport: window.innerWidth,
      reachable: left >= -1 && top >= -1 && left + sr.width <= body.scrollWidth + 1
        && top + sr.height <= body.scrollHeight + 1,
      pans: body.scrollWidth > body.clientWidth || body.scrollHeight > body.clientHeight});
    o.querySelector('[data-act=close]').click();
    await new Promise((r) => setTimeout(r, 100));
  }
  return out;
})()"""
COLUMN_STYLE = ("[...document.querySelectorAll('.cell_output pre.output-columns')].map((p) =>"
                " getComputedStyle(p).whiteSpace)")
QUIZ_CODE_STYLE = ("[...document.querySelectorAll('.cu-quiz code')].map((c) =>"
                   " getComputedStyle(c).whiteSpace)")


def _site_spec(path: str) -> dict[str, Any]:
    """A page at 390 px, its layout again at EXTRA_WIDTHS, its weight, every diagram enlarged."""
    return {"name": path, "path": path, "viewport": {"width": 390, "height": 844},
            "checks": ["diagrams", "layout", "nav", "weight"],
            "layout_widths": list(EXTRA_WIDTHS),
            "steps": [{"eval": ENLARGE_EVERY, "as": "enlarged"},
                      {"eval": COLUMN_STYLE, "as": "columns"},
                      {"eval": QUIZ_CODE_STYLE, "as": "quiz_code"}]}


@pytest.fixture(scope="module")
def site_run(book_run: dict[str, Any]) -> dict[str, Any]:
    """Every page of SITE_PAGES at 390 px (the reader's 390-px loads, by path)."""
    by_path = {}
    for p in book_run["pages"]:
        m = re.fullmatch(r"(zh|en)-(.+)-390", p["name"])
        name = f"book/{m[1]}/{m[2]}.html" if m else p["name"]
        if name in SITE_PAGES:
            by_path[name] = {**p, "name": name}
    assert sorted(by_path) == sorted(SITE_PAGES)
    run = {**book_run, "pages": list(by_path.values())}
    SCREENSHOTS.parent.mkdir(parents=True, exist_ok=True)
    weights = {p["name"]: (p.get("weight") or {}).get("total") for p in run["pages"]}
    (SCREENSHOTS.parent / "page-weights.json").write_text(
        __import__("json").dumps(weights, indent=1), encoding="utf-8")
    return run


def _spage(run: dict[str, Any], path: str) -> dict[str, Any]:
    res = _page(run, path)
    assert res.get("error") is None, res.get("error")
    assert res["step_errors"] == [], res["step_errors"]
    return res


@pytest.mark.parametrize("path", SITE_PAGES)
def test_no_page_scrolls_sideways_at_any_width(site_run: dict[str, Any], path: str) -> None:
    res = _spage(site_run, path)
    layouts = {390: res["layout"], **{int(w): lay for w, lay in res["layouts"].items()}}
    assert sorted(layouts) == sorted((390, *EXTRA_WIDTHS))
    for width, lay in layouts.items():
        assert lay["doc_width"] <= lay["client_width"], (width, lay)
        assert lay["sticking_out"] == [], (width, lay)


@pytest.mark.parametrize("path", SITE_PAGES)
def test_every_enlarged_diagram_is_drawn_and_readable(site_run: dict[str, Any],
                                                     path: str) -> None:
    res = _spage(site_run, path)
    enlarged = res["evals"]["enlarged"]
    assert len(enlarged) == len(res["diagrams"])
    for big in enlarged:
        assert big["open"], big
        assert big["shapes"] > 0 and big["black"] == 0, big  # Mermaid's own styles still apply
        assert big["labels"] > 0 and big["min_font_px"] >= MIN_ENLARGED_PX, big
        assert big["overlay_width"] <= big["viewport"], big
        assert big["reachable"], big  # every part can be panned into the 390 px view


@pytest.mark.parametrize("lang", LANGS)
def test_diagnosis_tree_pans_legibly_on_a_phone(site_run: dict[str, Any], lang: str) -> None:
    trees = [b for b in _spage(site_run, f"book/{lang}/slo-loop.html")["evals"]["enlarged"]
             if b.get("in_cell")]
    assert trees, "slo-loop prints its decision tree from a code cell"
    for tree in trees:
        assert tree["min_font_px"] >= MIN_ENLARGED_PX and tree["reachable"], tree
        assert tree["pans"], tree  # wider than a phone at a legible size: the view scrolls


@pytest.mark.parametrize("path", [p for p in SITE_PAGES if p.startswith("book/")])
def test_page_weight_without_math_is_within_budget(site_run: dict[str, Any], path: str) -> None:
    res = _spage(site_run, path)
    weight = res["weight"]
    urls = [r["url"] for r in weight["resources"]]
    assert not any("fontawesome.js" in u or u.endswith("searchindex.js") for u in urls), urls
    if any("mathjax" in u for u in urls):
        assert path.endswith("glossary.html"), "MathJax loads only where there is math"
        return
    assert weight["total"] <= PAGE_BUDGET_BYTES, weight["resources"][:8]


def _rc_font_px() -> float:
    rc = dict(line.split(":", 1) for line in BOOK_MATPLOTLIBRC.read_text("utf-8").splitlines()
              if ":" in line and not line.lstrip().startswith("#"))
    return float(rc["font.size"]) * float(rc["figure.dpi"]) / 72


@pytest.mark.parametrize("path", [p for p in SITE_PAGES if p.startswith("book/")])
def test_plots_are_captioned_described_and_legible_on_a_phone(site_run: dict[str, Any],
                                                              path: str) -> None:
    images = _spage(site_run, path)["nav"]["images"]
    zh = "/zh/" in path
    for img in images:
        alt = img["alt"].strip()
        assert alt and not re.fullmatch(r"[\w.-]*/[\w./-]*|[\w./-]*\.png", alt, re.A), img
        assert img["caption"], img
        assert ("图 " if zh else "Fig. ") in img["caption"], img["caption"]
        assert bool(CJK.search(img["alt"])) == zh and bool(CJK.search(img["caption"])) == zh
        # tick labels use the book rc's font size (lab.plots sets none smaller)
        shown = _rc_font_px() * img["width"] / img["natural_width"]
        assert shown >= 9, (img["src"], round(shown, 1))


def test_column_outputs_scroll_and_quiz_flags_stay_whole(site_run: dict[str, Any]) -> None:
    for lang in LANGS:
        res = _spage(site_run, f"book/{lang}/slo-loop.html")
        assert len(res["evals"]["columns"]) >= 1 and set(res["evals"]["columns"]) == {"pre"}
        quiz = _spage(site_run, f"book/{lang}/knobs.html")["evals"]["quiz_code"]
        assert quiz and set(quiz) == {"nowrap"}


# ---- search: the Chinese index finds every zh page with the word -------------------------------

ZH_WORDS = ("调优", "吞吐", "延迟", "前缀缓存", "拐点")
SEARCH_RESULTS = """(async () => {
  for (let i = 0; i < 100; i++) {
    const s = document.querySelector('#search-results .search-summary, #search-results p');
    if (s && s.innerText.trim() && !document.querySelector('#search-progress')?.innerText.trim())
      break;
    await new Promise((r) => setTimeout(r, 100));
  }
  await new Promise((r) => setTimeout(r, 400));
  return {summary: document.querySelector('#search-results')?.innerText.split('\\n').slice(0, 2),
          h1: document.querySelector('main h1')?.innerText, lang: document.documentElement.lang,
          links: [...document.querySelectorAll('#search-results ul li > a')].map((a) =>
            new URL(a.getAttribute('href'), location.href).pathname)};
})()"""


def _zh_pages_with(word: str) -> set[str]:
    import html as html_mod

    site = Path(__file__).resolve().parents[2] / "_build" / "html"
    found = set()
    for page in sorted((site / "book" / "zh").glob("*.html")):
        if page.name in ("search.html", "genindex.html"):
            continue
        text = page.read_text("utf-8")
        m = re.search(r"<article.*?</article>", text, re.S)
        body = re.sub(r'<pre class="mermaid".*?</pre>|<script.*?</script>|<style.*?</style>', "",
                      m.group(0) if m else "", flags=re.S)
        # the page's own text (its <title> also carries the site name, which names no page)
        plain = html_mod.unescape(re.sub(r"<[^>]+>", "", body))
        if word in plain:
            found.add(f"/book/zh/{page.name}")
    return found


def _search_specs() -> list[dict[str, Any]]:
    from urllib.parse import quote

    specs = [{"name": f"zh-{w}", "path": f"search-zh.html?q={quote(w)}"} for w in ZH_WORDS]
    specs.append({"name": "en-knee", "path": "search.html?q=knee"})
    return [{**s, "screenshot": False, "steps": [{"eval": SEARCH_RESULTS, "as": "search"}]}
            for s in specs]


@pytest.fixture(scope="module")
def search_run(book_run: dict[str, Any]) -> dict[str, Any]:
    names = {s["name"] for s in _search_specs()}
    return {**book_run, "pages": [p for p in book_run["pages"] if p["name"] in names]}


@pytest.fixture(scope="module")
def book_run() -> dict[str, Any]:
    """One headless Chromium over the whole site; the fixtures above are views of it. Each
    page of ALL_PAGES is loaded twice: at 1366 px (with PAGES' font, Mermaid and language
    checks) and at 390 px (with the site checks), each with a screenshot; the other site
    pages and the searches once, without."""
    specs = []
    for lang in LANGS:
        for page in ALL_PAGES:
            for width, height in WIDTHS.items():
                spec: dict[str, Any] = {
                    "name": _wname(lang, page, width), "path": f"book/{lang}/{page}.html",
                    "viewport": {"width": width, "height": height},
                    "checks": ["diagrams", "layout", "nav"],
                    "steps": [{"eval": ENLARGE, "as": "enlarge"}]}
                if width == 390:
                    site = _site_spec(spec["path"])
                    spec.update(checks=site["checks"], layout_widths=site["layout_widths"])
                    spec["steps"] += [*site["steps"], {"eval": OPEN_PRIMARY, "as": "primary"}]
                elif page in PAGES:
                    spec["checks"] += ["mermaid", "cjk", "langswitch"]
                    spec["steps"] = [{"eval": CELL_MERMAID_SVGS, "as": "cell_mermaid_svgs"},
                                     {"eval": BODY_TEXT_LEN, "as": "text_len"}, *spec["steps"]]
                specs.append(spec)
    covered = {f"book/{lang}/{page}.html" for lang in LANGS for page in ALL_PAGES}
    specs += [{**_site_spec(p), "screenshot": False} for p in SITE_PAGES if p not in covered]
    specs += _search_specs()
    with serve_site() as base:
        return run_plan(base, specs, process_timeout_s=900.0, concurrency=4)


@pytest.mark.parametrize("word", ZH_WORDS)
def test_zh_search_finds_every_page_with_the_word(search_run: dict[str, Any], word: str) -> None:
    res = _page(search_run, f"zh-{word}")
    assert res.get("error") is None and res["step_errors"] == [] and res["page_errors"] == []
    got = res["evals"]["search"]
    assert got["lang"] == "zh-CN" and got["h1"] == "搜索", got
    assert CJK.search(" ".join(got["summary"])), got["summary"]  # the page's own text
    expected = _zh_pages_with(word)
    assert len(expected) >= 2, (word, expected)
    assert set(got["links"]) >= expected, (word, sorted(expected - set(got["links"])))
    assert all(link.startswith("/book/zh/") for link in got["links"]), got["links"]


def test_en_search_lists_english_pages(search_run: dict[str, Any]) -> None:
    got = _page(search_run, "en-knee")["evals"]["search"]
    assert got["links"] and all(link.startswith("/book/en/") for link in got["links"]), got
    assert not CJK.search(" ".join(got["summary"]))
