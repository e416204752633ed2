"""Headless Chromium on the built book: Mermaid rendered, CJK font used, language switch
resolves, nothing fetched from outside 127.0.0.1. Screenshots: .artifacts/screenshots/.

The harness (tests/book/browser_harness.py) is reusable by other tests; see its docstring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.book.browser_harness import SCREENSHOTS, run_plan, serve_site

LANGS = ("zh", "en")
PAGES = ("index", "knobs", "slo-loop", "glossary")
CELL_MERMAID_SVGS = "document.querySelectorAll('.cell_output .mermaid svg').length"
BODY_TEXT_LEN = "(document.querySelector('main') || document.body).innerText.length"


def _name(lang: str, page: str) -> str:
    return f"{lang}-{page}"


@pytest.fixture(scope="module")
def browser_run() -> dict[str, Any]:
    specs = [
        {"name": _name(lang, page), "path": f"book/{lang}/{page}.html",
         "checks": ["mermaid", "cjk", "langswitch"],
         "steps": [{"eval": CELL_MERMAID_SVGS, "as": "cell_mermaid_svgs"},
                   {"eval": BODY_TEXT_LEN, "as": "text_len"}]}
        for lang in LANGS for page in PAGES
    ]
    specs.append({"name": "root-redirect", "path": "index.html", "checks": []})
    with serve_site() as base:
        return run_plan(base, specs)


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


@pytest.mark.parametrize("name", [_name(lang, page) for lang in LANGS for page in PAGES])
def test_screenshot_saved(browser_run: dict[str, Any], name: str) -> None:
    shot = Path(_page(browser_run, name)["screenshot"])
    assert shot.parent == SCREENSHOTS
    assert shot.is_file() and shot.stat().st_size > 10_000
