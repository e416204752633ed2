"""The static quizzes work in the built book: headless Chromium answers questions.

Uses the book's browser harness (tests/book/browser_harness.py: loopback HTTP server over
``_build/html`` + tools/web/browser.mjs, playwright-core + Debian chromium; no kernel, no
network). On the zh and en page of each lesson: one question answered right, one wrong, one
left empty; the feedback text must be exactly what ``quiz.grade`` says in the page's
language. ``QUIZ_BOOK_HTML=/path`` serves another copy of the site (e.g. a patched one).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from course_utils import quiz
from tests.book.browser_harness import SITE, run_plan, serve_site

ROOT_DIR = Path(os.environ.get("QUIZ_BOOK_HTML", SITE))


def _plain(text: str) -> str:
    """What the browser shows for a quiz text: `code` spans lose their backticks."""
    return re.sub(r"`([^`]+)`", r"\1", text)


def _pick(qs: list[quiz.Question]) -> tuple[quiz.Question, quiz.Question, quiz.Question]:
    """A choice question to answer right, a numeric one to answer wrong, one to leave empty."""
    choice = next(q for q in qs if q.type == "single")
    numeric = next((q for q in qs if q.type == "numeric"), None)
    wrong = numeric or next(q for q in qs if q.type == "multiple")
    empty = next(q for q in qs if q not in (choice, wrong))
    return choice, wrong, empty


def _sel(q: quiz.Question, inner: str = "") -> str:
    return f'li.cu-q[data-qid="{q.id}"] {inner}'.strip()


def _feedback_eval(q: quiz.Question) -> str:
    box = _sel(q, ".cu-q-feedback")
    return (f"(() => {{ const b = document.querySelector('{box}'); return b ? "
            f"{{text: b.textContent, hidden: b.hidden, cls: b.className, "
            f"result: b.closest('li').getAttribute('data-result')}} : null; }})()")


def _plan(base: str, lesson: str, lang: str) -> tuple[dict[str, Any], dict[str, Any]]:
    qs = quiz.load(lesson)
    right, wrong, empty = _pick(qs)
    right_id = sorted(right.correct_ids)[0]
    if wrong.type == "numeric":
        assert wrong.answer is not None
        bad_value = wrong.answer * 3 + 7
        wrong_answer: Any = repr(bad_value)
        wrong_steps = [{"fill": _sel(wrong, "input"), "value": wrong_answer}]
    else:
        miss = next(c.id for c in wrong.choices if not c.correct)
        wrong_answer = [miss]
        wrong_steps = [{"click": _sel(wrong, f'input[value="{miss}"]')}]
    steps = [
        {"eval": "document.querySelectorAll('.cu-quiz[data-cu-ready=\"1\"]').length",
         "as": "ready"},
        {"eval": "document.querySelectorAll('li.cu-q').length", "as": "count"},
        {"eval": "[...document.querySelectorAll('li.cu-q')].map(e => e.id)", "as": "ids"},
        {"click": _sel(right, f'input[value="{right_id}"]')},
        {"click": _sel(right, "button.cu-q-check")},
        {"eval": _feedback_eval(right), "as": "right"},
        *wrong_steps,
        {"click": _sel(wrong, "button.cu-q-check")},
        {"eval": _feedback_eval(wrong), "as": "wrong"},
        {"click": _sel(empty, "button.cu-q-check")},
        {"eval": _feedback_eval(empty), "as": "empty"},
    ]
    page = {"name": f"quiz-{lang}-{lesson}", "path": f"book/{lang}/{lesson}.html",
            "steps": steps}
    want = {
        "count": len(qs), "ids": [quiz.dom_id(lesson, lang, n) for n in range(1, len(qs) + 1)],
        "right": quiz.grade(right, [right_id], lang),
        "wrong": quiz.grade(wrong, wrong_answer, lang),
        "empty": quiz.grade(empty, None, lang),
    }
    return page, want


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    with serve_site(ROOT_DIR) as base:
        plans = {(lesson, lang): _plan(base, lesson, lang)
                 for lesson in quiz.LESSONS for lang in quiz.LANGS}
        doc = run_plan(base, [page for page, _ in plans.values()], timeout_ms=10000)
    by_name = {p["name"]: p for p in doc["pages"]}
    return {"doc": doc, "pages": {key: (by_name[page["name"]], want)
                                  for key, (page, want) in plans.items()}}


def test_no_request_leaves_loopback(results: dict[str, Any]) -> None:
    assert results["doc"]["external_requests"] == []


@pytest.mark.parametrize("lang", quiz.LANGS)
@pytest.mark.parametrize("lesson", quiz.LESSONS)
def test_quiz_grades_in_the_built_page(results: dict[str, Any], lesson: str, lang: str) -> None:
    page, want = results["pages"][(lesson, lang)]
    assert page.get("error") is None and page["status"] == 200, page
    assert page["page_errors"] == [], page
    ev = page["evals"]
    assert ev.get("ready") == 1, f"no working quiz on {page['path']}: {page['step_errors']}"
    assert page["step_errors"] == [], page
    assert ev["count"] == want["count"] and ev["ids"] == want["ids"]
    right, wrong, empty = ev["right"], ev["wrong"], ev["empty"]
    assert right["result"] == "correct" and "cu-ok" in right["cls"] and not right["hidden"]
    assert right["text"] == _plain(want["right"].explanation)
    assert right["text"].startswith(quiz.STRINGS[lang]["correct"])
    assert wrong["result"] == "wrong" and "cu-bad" in wrong["cls"]
    assert wrong["text"] == _plain(want["wrong"].explanation)
    assert wrong["text"].startswith(quiz.STRINGS[lang]["wrong"])
    assert empty["result"] == "error" and "cu-err" in empty["cls"]
    assert empty["text"] == want["empty"].error
