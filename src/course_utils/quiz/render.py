"""Quiz renderers: the static HTML grader (no kernel, no network), ipywidgets for a live
kernel, ``show()`` for a notebook cell, and the text/JSON views behind the CLI. The browser
grader (quiz.js) mirrors ``engine.grade`` rule for rule (tests check both)."""

from __future__ import annotations

import argparse
import functools
import html as _html
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from course_utils.quiz.engine import (
    ASSET_DIRS,
    LANGS,
    LESSONS,
    STRINGS,
    Lang,
    Question,
    QuizError,
    grade,
    load,
    pick_lang,
    title,
)

# ---------------------------------------------------------------- renderers: static


def _asset(name: str) -> str:
    for d in ASSET_DIRS:
        f = d / name
        if f.exists():
            return f.read_text(encoding="utf-8")
    raise QuizError(f"quiz asset {name} not found in {', '.join(map(str, ASSET_DIRS))}")


def _inline(text: str) -> str:
    """Escape, then `code` -> <code>code</code> (the only markup quiz texts use)."""
    esc = _html.escape(text, quote=False)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", esc)


def dom_id(lesson: str, lang: str, n: int) -> str:
    """Stable DOM id of the n-th question (1-based), e.g. ``q-knobs-zh-3``."""
    return f"q-{lesson}-{lang}-{n}"


def html(lesson: str, lang: Lang = "en", *, questions: Sequence[Question] | None = None) -> str:
    """Self-contained quiz (markup, CSS, answer data, JS grader): grades with no kernel."""
    lang = pick_lang(lang)
    qs = list(questions) if questions is not None else load(lesson)
    s = STRINGS[lang]
    root = f"quiz-{lesson}-{lang}"
    out = [
        f'<div class="cu-quiz" id="{root}" data-lesson="{lesson}" data-lang="{lang}" '
        f'lang="{"zh-CN" if lang == "zh" else "en"}">',
        f"<style>{_asset('quiz.css')}</style>",
        '<ol class="cu-quiz-list">',
    ]
    data: dict[str, Any] = {"strings": s, "questions": {}}
    for n, q in enumerate(qs, 1):
        qd = dom_id(lesson, lang, n)
        hint = s[f"hint_{q.type}"]
        out.append(f'<li class="cu-q" id="{qd}" data-qid="{q.id}" data-type="{q.type}">')
        out.append(
            f'<p class="cu-q-prompt">{_inline(q.prompt[lang])} '
            f'<span class="cu-q-hint">{_html.escape(hint)}</span></p>'
        )
        if q.type == "numeric":
            unit = f'<span class="cu-q-unit">{_html.escape(q.unit[lang])}</span>' if q.unit else ""
            out.append(
                f'<p class="cu-q-num"><input type="text" inputmode="decimal" '
                f'autocomplete="off" id="{qd}-input" name="{qd}" '
                f'aria-label="{_html.escape(s["number_label"])}"> {unit}</p>'
            )
        else:
            kind = "radio" if q.type == "single" else "checkbox"
            out.append('<ul class="cu-q-choices">')
            for c in q.choices:
                out.append(
                    f'<li><label><input type="{kind}" name="{qd}" value="{c.id}"> '
                    f'<span class="cu-q-cid">{c.id})</span> {_inline(c.text[lang])}'
                    "</label></li>"
                )
            out.append("</ul>")
        out.append(f'<button type="button" class="cu-q-check">{_html.escape(s["check"])}</button>')
        out.append('<div class="cu-q-feedback" role="status" aria-live="polite" hidden></div>')
        out.append("</li>")
        rec: dict[str, Any] = {
            "type": q.type,
            "explain": q.explain[lang],
            "expected": q.expected(lang),
        }
        if q.type == "numeric":
            rec.update(answer=q.answer, abs_tol=q.abs_tol, rel_tol=q.rel_tol)
        else:
            rec["choices"] = [c.id for c in q.choices]
            rec["correct"] = sorted(q.correct_ids)
        data["questions"][qd] = rec
    payload = json.dumps(data, ensure_ascii=False, sort_keys=True).replace("</", "<\\/")
    out += [
        "</ol>",
        f'<script type="application/json" class="cu-quiz-data">{payload}</script>',
        f"<script>{_asset('quiz.js')}</script>",
        "</div>",
    ]
    return "\n".join(out)


# ---------------------------------------------------------------- renderers: live


def widget(lesson: str, lang: Lang = "en", *, questions: Sequence[Question] | None = None) -> Any:
    """ipywidgets version (needs a live kernel): one box per question, graded by grade()."""
    import ipywidgets as w

    lang = pick_lang(lang)
    qs = list(questions) if questions is not None else load(lesson)
    s = STRINGS[lang]
    boxes = []
    for n, q in enumerate(qs, 1):
        hint = _html.escape(s["hint_" + q.type])
        prompt = w.HTML(f"<b>{n}.</b> {_inline(q.prompt[lang])} <i>{hint}</i>")
        if q.type == "single":
            inp: Any = w.RadioButtons(
                options=[(f"{c.id}) {c.text[lang]}", c.id) for c in q.choices],
                value=None,
                layout=w.Layout(width="auto"),
            )
            read: Callable[[], Any] = functools.partial(getattr, inp, "value")
        elif q.type == "multiple":
            checks = [
                w.Checkbox(
                    description=f"{c.id}) {c.text[lang]}",
                    value=False,
                    indent=False,
                    layout=w.Layout(width="auto"),
                )
                for c in q.choices
            ]
            inp = w.VBox(checks)
            read = functools.partial(
                lambda cs, ids: [i for cb, i in zip(cs, ids, strict=True) if cb.value],
                checks,
                [c.id for c in q.choices],
            )
        else:
            inp = w.FloatText(
                value=None,
                description=q.unit[lang] if q.unit else "",
                layout=w.Layout(width="320px"),
            )
            read = functools.partial(getattr, inp, "value")
        button = w.Button(description=s["check"])
        out = w.HTML()

        def on_click(
            _: Any, q: Question = q, read: Callable[[], Any] = read, out: Any = out
        ) -> None:
            r = grade(q, read(), lang)
            cls = "cu-err" if r.error else ("cu-ok" if r.correct else "cu-bad")
            out.value = f'<div class="{cls}">{_inline(r.explanation)}</div>'

        button.on_click(on_click)
        boxes.append(w.VBox([prompt, inp, button, out], layout=w.Layout(margin="0 0 1em 0")))
    return w.VBox(boxes)


def live_frontend() -> bool:
    """True when a Jupyter frontend that renders widgets drives this kernel
    (``COURSE_UTILS_QUIZ_LIVE=1/0`` forces it; nbclient, nbval and the book build are not)."""
    force = os.environ.get("COURSE_UTILS_QUIZ_LIVE")
    if force in ("0", "1"):
        return force == "1"
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    if ip is None or not hasattr(ip, "kernel"):
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return bool(os.environ.get("JPY_SESSION_NAME") or "google.colab" in sys.modules)


class _Both:
    """One output carrying the widget view and the static HTML as its fallback."""

    def __init__(self, static: str, box: Any) -> None:
        self.static, self.box = static, box

    def _repr_mimebundle_(self, **_: Any) -> dict[str, Any]:
        bundle = dict(self.box._repr_mimebundle_())
        bundle["text/html"] = self.static
        return bundle


def show(lesson: str, lang: Lang = "en", *, live: bool | None = None) -> None:
    """Display the static quiz; with a live widget frontend the output also carries widgets."""
    from IPython.display import HTML, display

    static = html(lesson, lang)
    if live is None:
        live = live_frontend()
    if live:
        display(_Both(static, widget(lesson, lang)))
    else:
        display(HTML(static))


# ---------------------------------------------------------------- CLI


def as_text(lesson: str, lang: Lang = "en") -> str:
    lines = [f"# {title(lesson, lang)} [{lesson}/{lang}]"]
    for n, q in enumerate(load(lesson), 1):
        tag = f"§9.{q.section}, " if q.section else ""
        lines.append(f"\n{n}. [{q.id}] ({tag}{q.type}) {q.prompt[lang]}")
        for c in q.choices:
            lines.append(f"   {'*' if c.correct else ' '} {c.id}) {c.text[lang]}")
        lines.append(f"   -> {q.expected(lang)}")
        lines.append(f"   {q.explain[lang]}")
    return "\n".join(lines)


def as_json(lesson: str, lang: Lang = "en") -> str:
    doc = {
        "lesson": lesson,
        "lang": lang,
        "title": title(lesson, lang),
        "questions": [q.to_dict(lang) for q in load(lesson)],
    }
    return json.dumps(doc, ensure_ascii=False, indent=2)


def _cli(args: argparse.Namespace) -> int:
    try:
        text = (as_json if args.format == "json" else as_text)(args.lesson, args.lang)
    except QuizError as e:
        print(f"quiz: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0


def add_cli(subparsers: Any) -> None:
    """``quiz --lesson knobs|slo-loop --lang zh|en --format json|text`` (sets ``func``)."""
    p = subparsers.add_parser("quiz", help="print a lesson's self-check questions with answers")
    p.add_argument("--lesson", choices=LESSONS, required=True)
    p.add_argument("--lang", choices=LANGS, default="en")
    p.add_argument("--format", choices=("json", "text"), default="text")
    p.set_defaults(func=_cli)
