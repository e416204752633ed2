"""Sphinx extension for the bilingual book (loaded via `sphinx.local_extensions` in _config.yml).

What it does:
- Language switch: every page `book/<lang>/<name>` gets a link to `book/<other>/<name>` at the top
  of its body (a build error if the counterpart page is missing), and `<html lang>` per page.
- Mermaid from code cells: a cell output of HTML `<pre class="mermaid">...</pre>` (and nothing
  else) becomes a real sphinxcontrib-mermaid node, so the page gets the local Mermaid ESM loader
  exactly like a ```{mermaid} directive. (`IPython.display.Markdown("```{mermaid}...")` is NOT
  parsed as a directive by myst-nb, so cells must emit the HTML form.)
- ipywidgets (pages with embedded widget state): maps the widget manager's AMD module ids onto
  the vendored dir so its icon fonts load from the site (they 404 otherwise).
- matplotlib in the executed notebooks: points MATPLOTLIBRC at tools/book/matplotlibrc
  (CJK font first) unless the caller already set it; the kernels inherit the environment.
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
LANGS = {"zh": ("en", "English", "zh-CN"), "en": ("zh", "中文", "en")}
PAGE_RE = re.compile(r"^book/(zh|en)/(.+)$")
MERMAID_HTML_RE = re.compile(r'^\s*<pre class="mermaid"[^>]*>(.*?)</pre>\s*$', re.DOTALL)


def counterpart(docname: str) -> tuple[str, str, str, str] | None:
    """(lang, other docname, other label, html lang) for a book page, else None."""
    m = PAGE_RE.match(docname)
    if not m:
        return None
    lang, rest = m.groups()
    other, label, html_lang = LANGS[lang]
    return lang, f"book/{other}/{rest}", label, html_lang


def mermaid_from_outputs(app: Sphinx, doctree: nodes.document) -> None:
    """Replace raw-HTML `<pre class="mermaid">` outputs by sphinxcontrib-mermaid nodes."""
    from sphinxcontrib.mermaid import mermaid

    for raw in list(doctree.findall(nodes.raw)):
        if "html" not in raw.get("format", "").split():
            continue
        m = MERMAID_HTML_RE.match(raw.astext())
        if not m:
            continue
        node = mermaid()
        node["code"] = html.unescape(m.group(1)).strip("\n")
        node["options"] = {}
        node.source, node.line = raw.source, raw.line
        raw.replace_self(node)


def check_pairs(app: Sphinx, env: Any) -> None:
    for doc in sorted(env.found_docs):
        pair = counterpart(doc)
        if pair and pair[1] not in env.found_docs:
            logger.warning("page %s has no counterpart %s (language switch)", doc, pair[1],
                           location=doc)


def page_context(app: Sphinx, pagename: str, templatename: str, context: dict,
                 doctree: nodes.document | None) -> None:
    pair = counterpart(pagename)
    if pair is None or "body" not in context:
        return
    lang, other, label, html_lang = pair
    context["language"] = html_lang
    if other in app.env.found_docs:
        href = context["pathto"](other)
        other_lang = LANGS[other.split("/")[1]][2]
        switch = (
            f'<div class="lang-switch" role="navigation" aria-label="language">'
            f'<a class="lang-switch-link" href="{html.escape(href)}" hreflang="{other_lang}" '
            f'lang="{other_lang}">{label} →</a></div>\n'
        )
        context["body"] = switch + context["body"]
    if has_widgets(app, pagename):
        # The widget manager derives its font/chunk URLs from its AMD module URI: map the
        # module ids onto the vendored dir (a `require` object before require.js = its config).
        assets = context["pathto"]("_static/vendor/jupyter-widgets", resource=True)
        paths = {"@jupyter-widgets/html-manager/dist": assets, "@jupyter-widgets": assets}
        app.add_js_file(
            None,
            body=f"var require = {{paths: {json.dumps(paths)}}};\n"
            "window.__jupyter_widgets_assets_path__ = "
            f"new URL({json.dumps(assets + '/')}, document.baseURI).href;",
            priority=100,
        )


def has_widgets(app: Sphinx, pagename: str) -> bool:
    """True when myst-nb will load the ipywidgets JS on this page (widget state embedded)."""
    from myst_nb.sphinx_ import NbMetadataCollector

    files = NbMetadataCollector.get_js_files(app.env, pagename)
    return any("embed-amd" in (uri or "") for uri, _ in files.values())


def setup(app: Sphinx) -> dict[str, Any]:
    os.environ.setdefault("MATPLOTLIBRC", str(REPO / "tools" / "book" / "matplotlibrc"))
    app.connect("doctree-read", mermaid_from_outputs)
    app.connect("env-check-consistency", check_pairs)
    app.connect("html-page-context", page_context)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
