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
- Reading order: Previous/Next stay inside the page's language (the toc holds both trees).
- Theme labels in the page's language (book_i18n.py); book.js (sidebar toggles) and
  diagrams.mjs (diagram size policy, enlarge view) on every page.
- `# NBVAL_*` marker lines are dropped from the rendered code cells; `**bold**` that
  CommonMark left literal next to CJK punctuation becomes bold.
- Per page, only what it uses: MathJax where the page itself has math, sphinx-design where
  it has a design component, the icon font trimmed to the icons used (book_assets.py); the
  theme's icon script and the search index on every page are left out (templates/).
- Search: Chinese split into character pairs, a Chinese search page for zh pages
  (book_search.py). The rendered HTML is post-processed per language: chapter list in the
  page's language first (the zh list starts with its home page), and on zh pages the English
  that templates and the HTML writer hard-code (book_i18n.py).
- Getting the code: config `course_repo_url` (one value; default: `git remote get-url origin`,
  else empty) and a source archive `_downloads/vllm-tuning-labs.zip` (`git archive HEAD`).
  Pages use the MyST substitutions {{ course_repo_url }}, {{ course_get_code }} (a shell line
  that leaves the code in ./vllm-tuning-labs) and {{ course_archive_link }}; the same
  `{{ name }}` forms are replaced inside code blocks, which MyST leaves alone.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import book_assets
import book_i18n
import book_search
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
LANGS = {"zh": ("en", "English", "zh-CN"), "en": ("zh", "中文", "en")}
PAGE_RE = re.compile(r"^book/(zh|en)/(.+)$")
MERMAID_HTML_RE = re.compile(r'^\s*<pre class="mermaid"[^>]*>(.*?)</pre>\s*$', re.DOTALL)
NBVAL_LINE_RE = re.compile(r"^[ \t]*#[ \t]*NBVAL_[A-Z_]+[ \t]*$\n?", re.MULTILINE)
ARCHIVE = "vllm-tuning-labs"
ARCHIVE_REL = f"_downloads/{ARCHIVE}.zip"
SUBST_RE = re.compile(r"\{\{\s*(course_repo_url|course_get_code|course_archive_link)\s*\}\}")


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


def strip_nbval(app: Sphinx, doctree: nodes.document) -> None:
    """Drop `# NBVAL_*` comment lines (test markers) from rendered code-cell sources."""
    for block in list(doctree.findall(nodes.literal_block)):
        text = block.astext()
        if "NBVAL_" not in text:
            continue
        new = NBVAL_LINE_RE.sub("", text)
        if new != text:
            block.children = [nodes.Text(new)]
            block.rawsource = new


STRONG_RE = re.compile(r"\*\*(?=\S)([^*\n]+?)(?<=\S)\*\*")


def cjk_strong(app: Sphinx, doctree: nodes.document) -> None:
    """`**...**` left as literal text (CommonMark's flanking rules fail next to CJK
    punctuation, e.g. `同一个**（质量、吞吐、延迟）三元组**`) becomes bold."""
    for text in list(doctree.findall(nodes.Text)):
        parent = text.parent
        if parent is None or "**" not in text or isinstance(
                parent, (nodes.literal, nodes.literal_block, nodes.raw, nodes.comment)):
            continue
        value = str(text)
        parts: list[nodes.Node] = []
        pos = 0
        for m in STRONG_RE.finditer(value):
            if m.start() > pos:
                parts.append(nodes.Text(value[pos:m.start()]))
            parts.append(nodes.strong(m.group(1), m.group(1)))
            pos = m.end()
        if not parts:
            continue
        if pos < len(value):
            parts.append(nodes.Text(value[pos:]))
        idx = parent.index(text)
        parent.remove(text)
        for i, node in enumerate(parts):
            parent.insert(idx + i, node)


def page_lang(docname: str) -> str | None:
    m = PAGE_RE.match(docname)
    return m.group(1) if m else None


def git_remote_url() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "remote", "get-url", "origin"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def repo_url(app: Sphinx) -> str:
    return (app.config.course_repo_url or "").strip() or git_remote_url()


def substitutions(app: Sphinx) -> dict[str, str]:
    """The getting-the-code values pages use (see the module docstring)."""
    url = repo_url(app)
    link = f"../../{ARCHIVE_REL}"
    return {
        "course_repo_url": url or link,
        "course_get_code": (f"git clone {url} {ARCHIVE}" if url else f"unzip -q {ARCHIVE}.zip"),
        "course_archive_link": f'<a href="{link}" download>{ARCHIVE}.zip</a>',
    }


def config_inited(app: Sphinx, config: Any) -> None:
    # templates/: the theme without its icon script and without the search index on every page
    config.templates_path = [str(Path(__file__).parent / "templates"),
                             *(config.templates_path or [])]
    subs = dict(getattr(config, "myst_substitutions", None) or {})
    for key, value in substitutions(app).items():
        subs.setdefault(key, value)
    config.myst_substitutions = subs


def substitute_code(app: Sphinx, doctree: nodes.document) -> None:
    """`{{ course_* }}` inside code blocks (MyST substitutes only prose)."""
    subs = substitutions(app)
    for block in list(doctree.findall(nodes.literal_block)):
        text = block.astext()
        if "{{" not in text:
            continue
        new = SUBST_RE.sub(lambda m: re.sub(r"<[^>]+>", "", subs[m.group(1)])
                           if m.group(1) == "course_archive_link" else subs[m.group(1)], text)
        if new != text:
            block.children = [nodes.Text(new)]
            block.rawsource = new


def write_archive(app: Sphinx, exception: Exception | None) -> None:
    """_downloads/vllm-tuning-labs.zip: the committed tree (`git archive HEAD`), offline;
    and /favicon.ico."""
    if exception is not None or app.builder.format != "html":
        return
    ico = REPO / "book" / "_assets" / "favicon.ico"
    if ico.is_file():  # browsers ask the site root for it (the root redirect page too)
        (Path(app.outdir) / "favicon.ico").write_bytes(ico.read_bytes())
    out = Path(app.outdir) / ARCHIVE_REL
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(["git", "-C", str(REPO), "archive", "--format=zip",
                               f"--prefix={ARCHIVE}/", "-o", str(out), "HEAD"],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("source archive not written (%s): the AutoDL page links to it", exc)
        return
    if proc.returncode != 0:
        logger.warning("source archive not written: git archive: %s", proc.stderr.strip()[:200])


def same_language_neighbours(app: Sphinx, pagename: str, lang: str, context: dict) -> None:
    """Previous/Next inside the page's language: skip over the other tree's pages."""
    rel = app.env.collect_relations()
    for key, idx in (("prev", 1), ("next", 2)):
        doc = (rel.get(pagename) or [None, None, None])[idx]
        seen = set()
        while doc is not None and page_lang(doc) != lang and doc not in seen:
            seen.add(doc)
            doc = (rel.get(doc) or [None, None, None])[idx]
        if doc is None or page_lang(doc) != lang:
            context[key] = None
            continue
        if context.get(key) and context[key].get("link") == context["pathto"](doc):
            continue
        title = app.env.titles[doc].astext() if doc in app.env.titles else doc
        context[key] = {"link": context["pathto"](doc), "title": html.escape(title)}


def check_pairs(app: Sphinx, env: Any) -> None:
    for doc in sorted(env.found_docs):
        pair = counterpart(doc)
        if pair and pair[1] not in env.found_docs:
            logger.warning("page %s has no counterpart %s (language switch)", doc, pair[1],
                           location=doc)


def page_context(app: Sphinx, pagename: str, templatename: str, context: dict,
                 doctree: nodes.document | None) -> None:
    search_lang = book_search.search_page_context(app, pagename, context)
    if search_lang is not None:
        context["language"] = LANGS[search_lang][2]
        book_i18n.apply(context, search_lang)
        finish_page(app, pagename, context, search_lang)
        return
    pair = counterpart(pagename)
    if pair is None or "body" not in context:
        return
    lang, other, label, html_lang = pair
    context["language"] = html_lang
    same_language_neighbours(app, pagename, lang, context)
    book_i18n.apply(context, lang)
    drop_unused_mathjax(app, pagename, context)
    book_assets.drop_unused_design(context)
    if other in app.env.found_docs:
        href = context["pathto"](other)
        other_lang = LANGS[other.split("/")[1]][2]
        switch = (
            f'<div class="lang-switch" role="navigation" '
            f'aria-label="{"语言" if lang == "zh" else "Language"}">'
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
    finish_page(app, pagename, context, lang)


def finish_page(app: Sphinx, pagename: str, context: dict, lang: str) -> None:
    """Search field target, chapter-list order and the templates' English, per language."""
    book_search.search_target(context, lang)
    home = "book/zh/index"
    title = app.env.titles[home].astext() if home in app.env.titles else "首页"
    nav_home = (html.escape(context["pathto"](home)), html.escape(title), pagename == home)
    captions = caption_langs(app)

    def post(page: str) -> str:
        page = book_i18n.order_nav(page, lang, captions, nav_home)
        return book_i18n.localize_html(page, lang)

    context["book_post_render"] = post


def caption_langs(app: Sphinx) -> dict[str, str]:
    """{lang: toc part caption}, read from the toc (a part's first chapter names its tree)."""
    site_map = (getattr(app.env, "external_site_map", None)
                or getattr(app.config, "external_site_map", None))
    out: dict[str, str] = {}
    for sub in (site_map.root.subtrees if site_map is not None else []):
        lang = next((page_lang(f) for f in sub.files() if page_lang(f)), None)
        if lang and sub.caption:
            out[lang] = html.escape(sub.caption)
    return out


def drop_unused_mathjax(app: Sphinx, pagename: str, context: dict) -> None:
    """MathJax only where the page itself has math (the root page would get it for the
    equations of any page in its toctree)."""
    if app.env.get_domain("math").data["has_equations"].get(pagename):  # type: ignore[attr-defined]
        return
    scripts = context.get("script_files")
    if isinstance(scripts, list):
        scripts[:] = [  # in place: handlers after this one still add to the same list
            js for js in scripts
            if "mathjax" not in str(getattr(js, "filename", js) or "").lower()
            and "MathJax" not in (getattr(js, "attributes", {}) or {}).get("body", "")]


def wrap_render(app: Sphinx) -> None:
    """Let page_context post-process the rendered HTML (`book_post_render` in the context)."""
    templates = getattr(app.builder, "templates", None)
    if templates is None or getattr(templates, "_book_wrapped", False):
        return
    render = templates.render

    def render_post(template: str, ctx: dict) -> str:
        out = render(template, ctx)
        post = ctx.get("book_post_render")
        return post(out) if post else out

    templates.render = render_post
    templates._book_wrapped = True


def has_widgets(app: Sphinx, pagename: str) -> bool:
    """True when myst-nb will load the ipywidgets JS on this page (widget state embedded)."""
    from myst_nb.sphinx_ import NbMetadataCollector

    files = NbMetadataCollector.get_js_files(app.env, pagename)
    return any("embed-amd" in (uri or "") for uri, _ in files.values())


def setup(app: Sphinx) -> dict[str, Any]:
    os.environ.setdefault("MATPLOTLIBRC", str(REPO / "tools" / "book" / "matplotlibrc"))
    app.add_config_value("course_repo_url", "", "html", types=[str])
    app.connect("config-inited", config_inited)
    app.add_js_file("book.js", priority=900)
    app.add_js_file("diagrams.mjs", type="module", priority=900)
    app.connect("doctree-read", mermaid_from_outputs)
    app.connect("doctree-read", strip_nbval)
    app.connect("doctree-read", substitute_code)
    app.connect("doctree-read", cjk_strong)
    app.connect("build-finished", write_archive)
    app.connect("env-check-consistency", check_pairs)
    app.connect("html-page-context", page_context)
    app.connect("builder-inited", wrap_render)
    book_search.setup(app)
    book_assets.setup(app)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
