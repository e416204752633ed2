"""Tables that code cells print (`display(Markdown(...))` of a pipe table) render as tables.

myst-nb renders a cell's Markdown output as CommonMark unless told otherwise, and CommonMark
has no tables: the rows come out as one paragraph of `| a | b |` text. `_config.yml` sets
`nb_render_markdown_format: gfm` for every page; these tests read the built site.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "_build" / "html"
# a paragraph that starts with a pipe: a Markdown table the renderer did not parse
RAW_PIPE = re.compile(r"<p>\s*\|")
# the generated tables of the lab pages (cells that display a Markdown table)
GENERATED = {"lab-slo-loop": "loopvsgrid", "lab-scale-out": "scaleout.markdown"}


def raw_pipe_tables(page_html: str) -> list[str]:
    return [page_html[m.start():m.start() + 80] for m in RAW_PIPE.finditer(page_html)]


def test_scanner_finds_a_pipe_table_left_as_text() -> None:
    assert raw_pipe_tables("<div><p>| a | b |\n| --- | --- |\n| 1 | 2 |</p></div>")
    assert raw_pipe_tables("<p>\n| a |</p>")
    assert not raw_pipe_tables("<table><tr><td>a</td></tr></table><p>a | b</p>")


def test_config_renders_markdown_outputs_as_gfm() -> None:
    config = yaml.safe_load((REPO / "_config.yml").read_text("utf-8"))
    assert config["sphinx"]["config"]["nb_render_markdown_format"] == "gfm"


@pytest.fixture(scope="module")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"{SITE} is not built: run `make book` (make test does it first)")
    return SITE


def test_no_built_page_shows_a_raw_pipe_table(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10
    bad = {str(p.relative_to(site)): hits[:2] for p in pages
           if (hits := raw_pipe_tables(p.read_text("utf-8")))}
    assert not bad, bad


@pytest.mark.parametrize("lang", ("en", "zh"))
@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_lab_tables_are_html_tables(site: Path, lang: str, name: str) -> None:
    page = (site / "book" / lang / f"{name}.html").read_text("utf-8")
    outputs = re.findall(r'<div class="cell_output docutils container">(.*?)</div>\s*</div>',
                         page, re.DOTALL)
    assert any("<table" in o for o in outputs), f"{lang}/{name}: no table among the cell outputs"
