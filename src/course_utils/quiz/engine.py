"""Self-check quizzes: questions as data, graded in Python, rendered static or live.

Content lives in ``data/quizzes/<lesson>.yaml`` (one home, zh + en side by side). An entry
is either a written question or ``generator: NAME`` with ``params``; generators compute
their answers at load time from the course_utils modules (knobs, slo, capacity, diagnose),
so a quiz cannot contradict the direction map, the SLO maths or the decision tree.

Renderers: ``html()`` gives self-contained HTML + inline JS that grades in the browser (no
kernel, no CDN, deterministic ids); ``widget()`` gives ipywidgets for a live kernel;
``show()`` picks. The browser grader mirrors ``grade()`` rule for rule (tests check both).
"""

from __future__ import annotations

import argparse
import functools
import html as _html
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

Lang = Literal["zh", "en"]
LESSONS = ("knobs", "slo-loop")
LANGS: tuple[Lang, ...] = ("zh", "en")
TYPES = ("single", "multiple", "numeric")

PKG_DIR = Path(__file__).resolve().parents[1]  # the course_utils package
QUIZ_DIR = PKG_DIR / "data" / "quizzes"
REPO_ROOT = PKG_DIR.parents[1]  # src/course_utils -> repo root (editable install)
# quiz.js / quiz.css: package data if shipped there, else the book's static dir.
ASSET_DIRS = (QUIZ_DIR / "assets", REPO_ROOT / "book" / "_assets" / "quiz")

# UI strings: Python feedback and the browser grader read the same table.
STRINGS: dict[str, dict[str, str]] = {
    "en": {
        "check": "Check",
        "correct": "Correct.",
        "wrong": "Not quite.",
        "answer": "Answer: {x}.",
        "empty_choice": "No answer yet: pick an option.",
        "empty_number": "No answer yet: enter a number.",
        "bad_number": "Not a number: {x}. Type digits such as 12.5 or 2,048.",
        "unknown_choice": "Unknown choice: {x}.",
        "one_choice": "Pick exactly one option.",
        "hint_single": "Pick one.",
        "hint_multiple": "Select all that apply.",
        "hint_numeric": "Enter a number.",
        "tolerance": "within {x}",
        "number_label": "your answer",
        "sep": " ",
    },
    "zh": {
        "check": "检查答案",
        "correct": "正确。",
        "wrong": "不对。",
        "answer": "答案：{x}。",
        "empty_choice": "还没作答：请选择一个选项。",
        "empty_number": "还没作答：请输入一个数字。",
        "bad_number": "不是数字：{x}。请输入如 12.5 或 2,048 这样的数。",
        "unknown_choice": "没有这个选项：{x}。",
        "one_choice": "只能选一个选项。",
        "hint_single": "单选。",
        "hint_multiple": "多选：选出所有正确项。",
        "hint_numeric": "填一个数。",
        "tolerance": "误差 {x} 以内",
        "number_label": "你的答案",
        "sep": "",
    },
}
CHOICE_IDS = "abcdefghijklmnopqrstuvwxyz"
# Same pattern in quiz.js: optional sign, digits with optional decimals, optional exponent,
# after removing spaces, commas and underscores (thousands separators).
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_SEPARATORS = re.compile(r"[\s,_\u00a0\u3000]")
_CJK = "\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"
_CJK_GAP = re.compile(f"(?<=[{_CJK}])\\s+(?=[{_CJK}])")  # YAML line folds inside Chinese
_SLACK = 1e-9  # relative float slack so tolerance edges are inclusive despite rounding


class QuizError(ValueError):
    """A quiz file, lesson, language or generator that cannot be used (one line)."""


def _bi(value: Any, where: str) -> dict[str, str]:
    """A bilingual field: ``{zh: ..., en: ...}``, both non-empty strings."""
    if not isinstance(value, Mapping) or set(value) != set(LANGS):
        raise QuizError(f"{where}: needs exactly zh and en texts, got {value!r}")
    out = {}
    for lang in LANGS:
        text = value[lang]
        if not isinstance(text, str) or not text.strip():
            raise QuizError(f"{where}: empty {lang} text")
        out[lang] = _CJK_GAP.sub("", " ".join(text.split()))
    return out


@dataclass(frozen=True, eq=False)
class Choice:
    id: str  # "a", "b", ... in display order
    text: dict[str, str]
    correct: bool = False
    key: str = ""  # what the choice stands for in generated questions (knob name, effect, ...)


@dataclass(frozen=True, eq=False)
class Question:
    id: str  # stable within the lesson, e.g. "seed-1", "dir-max-num-seqs-itl"
    type: str  # single | multiple | numeric
    prompt: dict[str, str]
    explain: dict[str, str]
    choices: tuple[Choice, ...] = ()
    answer: float | None = None  # numeric
    abs_tol: float | None = None
    rel_tol: float | None = None
    unit: dict[str, str] | None = None
    seed: int | None = None  # number of the seed's §9 question this one grades
    generator: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def correct_ids(self) -> frozenset[str]:
        return frozenset(c.id for c in self.choices if c.correct)

    def expected(self, lang: Lang = "en") -> str:
        """The right answer as shown after answering."""
        if self.type != "numeric":
            return ", ".join(sorted(self.correct_ids))
        assert self.answer is not None
        unit = f" {self.unit[lang]}" if self.unit else ""
        tol = []
        if self.abs_tol:
            tol.append(f"±{_fmt(self.abs_tol)}")
        if self.rel_tol:
            tol.append(f"±{_fmt(self.rel_tol * 100)}%")
        tail = STRINGS[lang]["tolerance"].format(x=" / ".join(tol)) if tol else ""
        if tail:
            tail = f"（{tail}）" if lang == "zh" else f" ({tail})"
        return f"{_fmt(self.answer)}{unit}{tail}"

    def to_dict(self, lang: Lang | None = None) -> dict[str, Any]:
        """JSON-ready record; with ``lang`` the texts are resolved to that language."""
        def t(v: dict[str, str] | None) -> Any:
            return v if v is None or lang is None else v[lang]
        d: dict[str, Any] = {"id": self.id, "type": self.type, "prompt": t(self.prompt)}
        if self.choices:
            d["choices"] = [{"id": c.id, "text": t(c.text), "correct": c.correct,
                             **({"key": c.key} if c.key else {})} for c in self.choices]
        if self.type == "numeric":
            d.update(answer=self.answer, abs_tol=self.abs_tol, rel_tol=self.rel_tol,
                     unit=t(self.unit))
        d["explain"] = t(self.explain)
        if lang is not None:
            d["expected"] = self.expected(lang)
        if self.seed is not None:
            d["seed"] = self.seed
        if self.generator:
            d["generator"] = self.generator
            d["params"] = self.params
        return d


@dataclass(frozen=True)
class Result:
    """What grading says: ``explanation`` is the full feedback shown after answering."""

    correct: bool
    explanation: str
    error: str | None = None  # set when the answer could not be graded (empty, bad number…)

    @property
    def valid(self) -> bool:
        return self.error is None


# ---------------------------------------------------------------- grading

def parse_number(raw: Any) -> float | None | str:
    """A float, None for "no answer", or an error key ("bad") — quiz.js does the same."""
    if raw is None:
        return None
    if isinstance(raw, bool):
        return "bad"
    if isinstance(raw, int | float):
        return float(raw) if math.isfinite(raw) else "bad"
    s = _SEPARATORS.sub("", str(raw))
    if not s:
        return None
    if not _NUMBER.match(s):
        return "bad"
    x = float(s)
    return x if math.isfinite(x) else "bad"


def within(question: Question, x: float) -> bool:
    """Tolerance check, both edges inclusive; abs and rel tolerances are alternatives."""
    a = question.answer
    assert a is not None
    diff = abs(x - a)
    slack = _SLACK * max(1.0, abs(a))
    if diff <= slack:
        return True
    if question.abs_tol is not None and diff <= question.abs_tol + slack:
        return True
    return question.rel_tol is not None and diff <= question.rel_tol * abs(a) + slack


def _choice_ids(answer: Any) -> list[str]:
    if answer is None:
        return []
    if isinstance(answer, str):
        parts = re.split(r"[\s,;]+", answer)
    elif isinstance(answer, Iterable):
        parts = [str(a) for a in answer]
    else:
        parts = [str(answer)]
    return [p.strip().lower() for p in parts if p and p.strip()]


def grade(question: Question, answer: Any, lang: Lang = "en") -> Result:
    """Grade one answer. Never raises for a bad answer: ``Result.error`` says what is wrong.

    single: a choice id (``"b"`` or ``["b"]``); multiple: ids (``["a", "c"]`` or ``"a,c"``);
    numeric: a number or a string such as ``"2,063,088"``.
    """
    s = STRINGS[_lang(lang)]

    def err(key: str, x: str = "") -> Result:
        msg = s[key].format(x=x)
        return Result(False, msg, error=msg)

    if question.type == "numeric":
        x = parse_number(answer)
        if x is None:
            return err("empty_number")
        if isinstance(x, str):
            return err("bad_number", str(answer).strip())
        ok = within(question, x)
    else:
        ids = _choice_ids(answer)
        if not ids:
            return err("empty_choice")
        known = {c.id for c in question.choices}
        unknown = [i for i in ids if i not in known]
        if unknown:
            return err("unknown_choice", ", ".join(unknown))
        if question.type == "single" and len(set(ids)) != 1:
            return err("one_choice")
        ok = frozenset(ids) == question.correct_ids
    return Result(ok, feedback(question, ok, lang))


def feedback(question: Question, ok: bool, lang: Lang = "en") -> str:
    """Verdict, the answer (always for numeric, when wrong otherwise), then the explanation."""
    s = STRINGS[lang]
    parts = [s["correct"] if ok else s["wrong"]]
    if question.type == "numeric" or not ok:
        parts.append(s["answer"].format(x=question.expected(lang)))
    parts.append(question.explain[lang])
    return s["sep"].join(parts)


# ---------------------------------------------------------------- loading

GeneratorFn = Callable[[Mapping[str, Any]], dict[str, Any]]
GENERATORS: dict[str, GeneratorFn] = {}


def generator(name: str) -> Callable[[GeneratorFn], GeneratorFn]:
    """Register a generator: params -> question fields (prompt, explain, type, choices...)."""
    def deco(fn: GeneratorFn) -> GeneratorFn:
        GENERATORS[name] = fn
        return fn
    return deco


def _lang(lang: str) -> Lang:
    if lang not in LANGS:
        raise QuizError(f"language must be zh or en, not {lang!r}")
    return lang  # type: ignore[return-value]


def quiz_path(lesson: str) -> Path:
    if lesson not in LESSONS:
        raise QuizError(f"unknown lesson {lesson!r}; known: {', '.join(LESSONS)}")
    return QUIZ_DIR / f"{lesson}.yaml"


def _choices(raw: Any, where: str) -> tuple[Choice, ...]:
    if not isinstance(raw, Sequence) or len(raw) < 2:
        raise QuizError(f"{where}: needs at least two choices")
    if len(raw) > len(CHOICE_IDS):
        raise QuizError(f"{where}: too many choices")
    out = []
    for i, c in enumerate(raw):
        if not isinstance(c, Mapping):
            raise QuizError(f"{where}: choice {i + 1} is not a mapping")
        out.append(Choice(id=CHOICE_IDS[i], text=_bi(c.get("text"), f"{where} choice {i + 1}"),
                          correct=bool(c.get("correct", False)), key=str(c.get("key", ""))))
    return tuple(out)


def _tol(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise QuizError(f"{where}: tolerance must be a number >= 0, got {value!r}")
    return float(value)


def _build(fields: Mapping[str, Any], where: str) -> Question:
    qtype = fields.get("type")
    if qtype not in TYPES:
        raise QuizError(f"{where}: type must be one of {', '.join(TYPES)}, got {qtype!r}")
    qid = fields.get("id")
    if not isinstance(qid, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", qid):
        raise QuizError(f"{where}: id must be lower-case letters, digits and dashes, got {qid!r}")
    q: dict[str, Any] = dict(
        id=qid, type=qtype, prompt=_bi(fields.get("prompt"), f"{where} prompt"),
        explain=_bi(fields.get("explain"), f"{where} explain"), seed=fields.get("seed"),
        generator=fields.get("generator"), params=dict(fields.get("params") or {}))
    if qtype == "numeric":
        answer = fields.get("answer")
        if isinstance(answer, bool) or not isinstance(answer, int | float):
            raise QuizError(f"{where}: numeric answer must be a number, got {answer!r}")
        tol = fields.get("tolerance") or {}
        q.update(answer=float(answer), abs_tol=_tol(tol.get("abs"), where),
                 rel_tol=_tol(tol.get("rel"), where),
                 unit=_bi(fields["unit"], f"{where} unit") if fields.get("unit") else None)
    else:
        q["choices"] = _choices(fields.get("choices"), where)
        n = sum(c.correct for c in q["choices"])
        if qtype == "single" and n != 1:
            raise QuizError(f"{where}: a single-choice question needs exactly one correct choice")
        if qtype == "multiple" and n < 1:
            raise QuizError(f"{where}: a multiple-choice question needs a correct choice")
    if q["seed"] is not None and not isinstance(q["seed"], int):
        raise QuizError(f"{where}: seed must be the §9 question number")
    return Question(**q)


def expand(entry: Mapping[str, Any], where: str = "entry") -> Question:
    """One YAML entry -> Question; ``generator`` entries are computed now.

    A generator entry may replace the generated ``prompt``, put a written ``intro`` before
    it, and add a written ``explain`` after the generated one; ``id`` and ``seed`` come from
    the entry.
    """
    if "generator" not in entry:
        return _build(entry, where)
    name = entry["generator"]
    if name not in GENERATORS:
        raise QuizError(f"{where}: unknown generator {name!r}; known: {', '.join(GENERATORS)}")
    params = dict(entry.get("params") or {})
    try:
        gen = GENERATORS[name](params)
    except QuizError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise QuizError(f"{where}: generator {name} failed: {e}") from e
    fields = {**gen, "id": entry.get("id"), "seed": entry.get("seed"), "generator": name,
              "params": params}
    if "prompt" in entry:
        fields["prompt"] = entry["prompt"]
    elif "intro" in entry:
        intro = _bi(entry["intro"], f"{where} intro")
        fields["prompt"] = {lg: _end(intro[lg], lg) + STRINGS[lg]["sep"] + gen["prompt"][lg]
                            for lg in LANGS}
    if "explain" in entry:
        extra = _bi(entry["explain"], f"{where} explain")
        fields["explain"] = {lg: _end(gen["explain"][lg], lg) + STRINGS[lg]["sep"] + extra[lg]
                             for lg in LANGS}
    return _build(fields, where)


def _end(text: str, lang: str) -> str:
    """``text`` ending in a sentence stop, so a written explanation can follow it."""
    text = text.rstrip()
    return text if text[-1:] in ".。!?！？)）" else text + ("。" if lang == "zh" else ".")


def load(lesson: str, path: str | Path | None = None) -> list[Question]:
    """All questions of a lesson, generators expanded, in file order."""
    return list(_load(lesson, str(path) if path else None))


@functools.lru_cache(maxsize=8)
def _load(lesson: str, path: str | None) -> tuple[Question, ...]:
    p = Path(path) if path else quiz_path(lesson)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise QuizError(f"{p}: no such quiz file") from None
    except yaml.YAMLError as e:
        raise QuizError(f"{p}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, Mapping) or doc.get("lesson") != lesson:
        raise QuizError(f"{p}: top level must have lesson: {lesson}")
    entries = doc.get("questions")
    if not isinstance(entries, list) or not entries:
        raise QuizError(f"{p}: no questions")
    out = [expand(e, f"{p.name} #{i + 1} ({e.get('id', '?') if isinstance(e, Mapping) else e})")
           for i, e in enumerate(entries)]
    ids = [q.id for q in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise QuizError(f"{p}: duplicate ids {', '.join(dup)}")
    return tuple(out)


def title(lesson: str, lang: Lang = "en") -> str:
    doc = yaml.safe_load(quiz_path(lesson).read_text(encoding="utf-8"))
    return _bi(doc["title"], f"{lesson} title")[lang]


# ---------------------------------------------------------------- data resolution

def resolve_path(p: str | Path) -> Path:
    """A data path from YAML: absolute, relative to the repo root, or to the package data.

    A glob (``labs/results/h200-*/metrics.jsonl``) picks the last match in sorted order, so
    the newest recorded run wins once it lands.
    """
    text = str(p)
    bases = [Path("/")] if Path(text).is_absolute() else [REPO_ROOT, PKG_DIR / "data"]
    for base in bases:
        rel = text.lstrip("/") if base == Path("/") else text
        if any(ch in rel for ch in "*?["):
            hits = sorted(base.glob(rel))
            if hits:
                return hits[-1]
        elif (base / rel).exists():
            return base / rel
    raise QuizError(f"data file {text!r} not found (looked in the repo and package data)")


# ---------------------------------------------------------------- formatting helpers

def _fmt(x: float) -> str:
    """Readable number: thousands separators, no trailing zeros."""
    x = float(x)
    if x.is_integer():
        return f"{int(x):,}"
    return f"{x:.4g}" if abs(x) < 1 else f"{x:,.2f}".rstrip("0").rstrip(".")


def _opts(items: Sequence[tuple[dict[str, str], bool, str]]) -> list[dict[str, Any]]:
    return [{"text": text, "correct": ok, "key": key} for text, ok, key in items]


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
    """Self-contained quiz: markup, inline CSS, answer data and inline JS grader.

    Works in the built book (no kernel, no network) and in a trusted Jupyter output.
    Deterministic: the same inputs give the same bytes.
    """
    lang = _lang(lang)
    qs = list(questions) if questions is not None else load(lesson)
    s = STRINGS[lang]
    root = f"quiz-{lesson}-{lang}"
    out = [f'<div class="cu-quiz" id="{root}" data-lesson="{lesson}" data-lang="{lang}" '
           f'lang="{"zh-CN" if lang == "zh" else "en"}">',
           f"<style>{_asset('quiz.css')}</style>", '<ol class="cu-quiz-list">']
    data: dict[str, Any] = {"strings": s, "questions": {}}
    for n, q in enumerate(qs, 1):
        qd = dom_id(lesson, lang, n)
        hint = s[f"hint_{q.type}"]
        out.append(f'<li class="cu-q" id="{qd}" data-qid="{q.id}" data-type="{q.type}">')
        out.append(f'<p class="cu-q-prompt">{_inline(q.prompt[lang])} '
                   f'<span class="cu-q-hint">{_html.escape(hint)}</span></p>')
        if q.type == "numeric":
            unit = f'<span class="cu-q-unit">{_html.escape(q.unit[lang])}</span>' if q.unit else ""
            out.append(f'<p class="cu-q-num"><input type="text" inputmode="decimal" '
                       f'autocomplete="off" id="{qd}-input" name="{qd}" '
                       f'aria-label="{_html.escape(s["number_label"])}"> {unit}</p>')
        else:
            kind = "radio" if q.type == "single" else "checkbox"
            out.append('<ul class="cu-q-choices">')
            for c in q.choices:
                out.append(f'<li><label><input type="{kind}" name="{qd}" value="{c.id}"> '
                           f'<span class="cu-q-cid">{c.id})</span> {_inline(c.text[lang])}'
                           "</label></li>")
            out.append("</ul>")
        out.append(f'<button type="button" class="cu-q-check">{_html.escape(s["check"])}</button>')
        out.append('<div class="cu-q-feedback" role="status" aria-live="polite" hidden></div>')
        out.append("</li>")
        rec: dict[str, Any] = {"type": q.type, "explain": q.explain[lang],
                               "expected": q.expected(lang)}
        if q.type == "numeric":
            rec.update(answer=q.answer, abs_tol=q.abs_tol, rel_tol=q.rel_tol)
        else:
            rec["choices"] = [c.id for c in q.choices]
            rec["correct"] = sorted(q.correct_ids)
        data["questions"][qd] = rec
    payload = json.dumps(data, ensure_ascii=False, sort_keys=True).replace("</", "<\\/")
    out += ["</ol>", f'<script type="application/json" class="cu-quiz-data">{payload}</script>',
            f"<script>{_asset('quiz.js')}</script>", "</div>"]
    return "\n".join(out)


# ---------------------------------------------------------------- renderers: live

def widget(lesson: str, lang: Lang = "en", *, questions: Sequence[Question] | None = None) -> Any:
    """ipywidgets version (needs a live kernel): one box per question, graded by grade()."""
    import ipywidgets as w

    lang = _lang(lang)
    qs = list(questions) if questions is not None else load(lesson)
    s = STRINGS[lang]
    boxes = []
    for n, q in enumerate(qs, 1):
        hint = _html.escape(s["hint_" + q.type])
        prompt = w.HTML(f"<b>{n}.</b> {_inline(q.prompt[lang])} <i>{hint}</i>")
        if q.type == "single":
            inp: Any = w.RadioButtons(options=[(f"{c.id}) {c.text[lang]}", c.id)
                                               for c in q.choices], value=None,
                                      layout=w.Layout(width="auto"))
            read: Callable[[], Any] = functools.partial(getattr, inp, "value")
        elif q.type == "multiple":
            checks = [w.Checkbox(description=f"{c.id}) {c.text[lang]}", value=False, indent=False,
                                 layout=w.Layout(width="auto")) for c in q.choices]
            inp = w.VBox(checks)
            read = functools.partial(
                lambda cs, ids: [i for cb, i in zip(cs, ids, strict=True) if cb.value],
                checks, [c.id for c in q.choices])
        else:
            inp = w.FloatText(value=None, description=q.unit[lang] if q.unit else "",
                              layout=w.Layout(width="320px"))
            read = functools.partial(getattr, inp, "value")
        button = w.Button(description=s["check"])
        out = w.HTML()

        def on_click(_: Any, q: Question = q, read: Callable[[], Any] = read,
                     out: Any = out) -> None:
            r = grade(q, read(), lang)
            cls = "cu-err" if r.error else ("cu-ok" if r.correct else "cu-bad")
            out.value = f'<div class="{cls}">{_inline(r.explanation)}</div>'

        button.on_click(on_click)
        boxes.append(w.VBox([prompt, inp, button, out],
                            layout=w.Layout(margin="0 0 1em 0")))
    return w.VBox(boxes)


def live_frontend() -> bool:
    """True when a Jupyter frontend that renders widgets is driving this kernel.

    ``COURSE_UTILS_QUIZ_LIVE=1/0`` forces it (the book build should export 0). Otherwise:
    an IPython kernel, ipywidgets importable, and a frontend marker: ``JPY_SESSION_NAME``
    (set by jupyter_server for kernels of notebook sessions, never by nbclient, so not under
    myst-nb, nbval or papermill) or Colab. Elsewhere (VS Code, nbconvert) the static HTML
    is shown, and it grades there too.
    """
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
    """Display the quiz in a notebook cell.

    Always the static HTML (what the built book shows and grades). When a live widget
    frontend is present (``live_frontend()``, or ``live=True``), the same output also
    carries the ipywidgets view, which such a frontend renders in preference to the HTML.
    """
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
        tag = f"§9.{q.seed}, " if q.seed else ""
        lines.append(f"\n{n}. [{q.id}] ({tag}{q.type}) {q.prompt[lang]}")
        for c in q.choices:
            lines.append(f"   {'*' if c.correct else ' '} {c.id}) {c.text[lang]}")
        lines.append(f"   -> {q.expected(lang)}")
        lines.append(f"   {q.explain[lang]}")
    return "\n".join(lines)


def as_json(lesson: str, lang: Lang = "en") -> str:
    doc = {"lesson": lesson, "lang": lang, "title": title(lesson, lang),
           "questions": [q.to_dict(lang) for q in load(lesson)]}
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


# ---------------------------------------------------------------- generators
# Each returns question fields (type, prompt, explain, choices | answer+tolerance+unit).
# Answers are computed here from course_utils, never written in the YAML.

AXES: dict[str, dict[str, str]] = {
    "throughput": {"en": "throughput", "zh": "吞吐"},
    "ttft": {"en": "TTFT", "zh": "TTFT"},
    "itl": {"en": "ITL/TPOT", "zh": "ITL/TPOT"},
}
CONSTRAINTS: dict[str, dict[str, str]] = {
    "queue": {"en": "queue (requests waiting)", "zh": "队列（请求在排队）"},
    "prefill": {"en": "prefill (TTFT)", "zh": "prefill（TTFT）"},
    "decode": {"en": "decode (TPOT/ITL)", "zh": "decode（TPOT/ITL）"},
    "kv": {"en": "KV cache capacity", "zh": "KV cache 容量"},
    "none": {"en": "nothing binds: the SLO holds", "zh": "没有约束在卡：SLO 已满足"},
}
NO_KNOB = {"en": "no engine knob: add replicas / route load (or stop tuning)",
           "zh": "没有引擎旋钮可拧：加副本 / 分流（或停止调参）"}


def _bilist(items: Iterable[str], lang: str) -> str:
    return ("、" if lang == "zh" else ", ").join(items)


def _knob_text(k: Any, move: bool = True) -> dict[str, str]:
    """Choice text: the flag and the map's move, or (move=False) the flag and its label,
    for questions where the right direction depends on the constraint."""
    if move:
        return {lg: f"`{k.flag}` — {k.move[lg]}" for lg in LANGS}
    return {"en": f"`{k.flag}` ({k.label['en']})", "zh": f"`{k.flag}`（{k.label['zh']}）"}


def _knob_choices(names: Sequence[str] | None, correct: set[str],
                  move: bool = True) -> list[dict[str, Any]]:
    from course_utils.core import knobs

    ks = [knobs.get(n) for n in names] if names else list(knobs.KNOBS.values())
    return _opts([(_knob_text(k, move), k.name in correct, k.name) for k in ks])


def slo_text(s: Any, lang: str) -> str:
    """``p99 TTFT ≤ 300 ms, p99 TPOT ≤ 50 ms`` (+ the rate) for an slo.SLO."""
    pct = _fmt(s.percentile)
    parts = [f"p{pct} {k.upper()} ≤ {_fmt(v)} ms" for k, v in s.targets().items()]
    text = ("，" if lang == "zh" else ", ").join(parts)
    return text + (f" @ {_fmt(s.rate)} req/s" if s.rate else "")


@generator("knob_direction")
def _g_knob_direction(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: knob, axis (throughput|ttft|itl). Answer: the Effect in knobs.KNOBS."""
    from course_utils.core import knobs

    k = knobs.get(p["knob"])
    axis = p["axis"]
    if axis not in AXES:
        raise QuizError(f"axis must be one of {', '.join(AXES)}, got {axis!r}")
    eff = getattr(k, axis)
    order = ("better", "worse", "neutral", "depends")
    return {
        "type": "single",
        "prompt": {
            "en": f"Direction map: {k.label['en']} (`{k.flag}`), move: {k.move['en']}. "
                  f"Which way does {AXES[axis]['en']} go?",
            "zh": f"方向地图：{k.label['zh']}（`{k.flag}`），动作：{k.move['zh']}。"
                  f"{AXES[axis]['zh']} 会怎样？"},
        "choices": _opts([(knobs.EFFECT_WORD[e], e == eff, e) for e in order]),
        "explain": {
            "en": f"{AXES[axis]['en']}: {knobs.EFFECT_WORD[eff]['en']}. Trade: {k.trade['en']}. "
                  f"{k.note.get('en', '')}".strip(),
            "zh": f"{AXES[axis]['zh']}：{knobs.EFFECT_WORD[eff]['zh']}。代价：{k.trade['zh']}。"
                  f"{k.note.get('zh', '')}"},
    }


@generator("knob_recommend")
def _g_knob_recommend(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: goal (throughput|ttft|itl|capacity), knobs (optional subset, in order)."""
    from course_utils.core import knobs

    goal = p["goal"]
    good = [k.name for k in knobs.recommend(goal)]
    choices = _knob_choices(p.get("knobs"), set(good))
    shown = [c["key"] for c in choices if c["correct"]]
    if not shown:
        raise QuizError(f"none of the listed knobs helps {goal}")
    gname = {**AXES, "capacity": {"en": "KV capacity", "zh": "KV 容量"}}[goal]
    flags = [f"`{knobs.get(n).flag}`" for n in shown]
    return {
        "type": "multiple",
        "prompt": {"en": f"Which knobs push {gname['en']} the right way, moved as the direction "
                         "map says?",
                   "zh": f"按方向地图的动作去拧，哪些旋钮能把 {gname['zh']} 往好的方向推？"},
        "choices": choices,
        "explain": {
            "en": f"The direction map (knobs.recommend('{goal}')) lists {_bilist(flags, 'en')}. "
                  "Each still has its trade: sweep them one at a time against the eval set.",
            "zh": f"方向地图（knobs.recommend('{goal}')）给出 {_bilist(flags, 'zh')}。"
                  "每个都有代价：对着评测集一次 sweep 一个。"},
    }


@generator("knob_free_wins")
def _g_knob_free_wins(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: knobs (optional subset). Answer: knobs.free_wins()."""
    from course_utils.core import knobs

    wins = knobs.free_wins()
    choices = _knob_choices(p.get("knobs"), {k.name for k in wins})
    trades = {"en": "; ".join(f"`{k.flag}`: {k.trade['en']}" for k in wins),
              "zh": "；".join(f"`{k.flag}`：{k.trade['zh']}" for k in wins)}
    return {
        "type": "multiple",
        "prompt": {"en": "Which knobs help throughput and latency together, trading something "
                         "other than the throughput↔latency curve (the 'free wins')?",
                   "zh": "哪些旋钮同时帮吞吐与延迟、换掉的不是吞吐↔延迟曲线本身（「免费的赢」）？"},
        "choices": choices,
        "explain": {"en": f"The direction map marks these as free wins — {trades['en']}.",
                    "zh": f"方向地图把它们标为免费的赢——{trades['zh']}。"},
    }


@generator("knob_default")
def _g_knob_default(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: knob, gpu_memory_gib (24), entry (serve|llm), gpu_name. Answer: knobs.default."""
    from course_utils.core import knobs

    k = knobs.get(p["knob"])
    gib = float(p.get("gpu_memory_gib", 24.0))
    gpu = p.get("gpu_name", "")
    if "gpu" in p:  # a capacity.GPUS key: its nvidia-smi memory and name
        from course_utils.core import capacity

        g = capacity.get_gpu(p["gpu"])
        gib, gpu = g.memory_gib, g.name
    entry = p.get("entry", "serve")
    value = knobs.default(k.name, gpu_memory_gib=gib, entry=entry, gpu_name=gpu)
    how = {"serve": "`vllm serve`", "llm": "`LLM(...)`"}[entry]
    on = {"en": f"an {gpu} ({_fmt(gib)} GiB)" if gpu else f"a {_fmt(gib)} GiB GPU",
          "zh": f"{gpu}（{_fmt(gib)} GiB）" if gpu else f"{_fmt(gib)} GiB 显卡"}
    src = {"en": f"Declared as `{k.config}` in `{k.source}`.",
           "zh": f"声明在 `{k.source}` 的 `{k.config}`。"}
    if k.name in ("max_num_seqs", "max_num_batched_tokens"):
        src = {"en": f"{src['en']} When unset, `EngineArgs.get_batch_defaults` "
                     "(vllm/engine/arg_utils.py) picks it from GPU memory (>= 70 GiB and not an "
                     "A100 counts as large) and the entry point.",
               "zh": f"{src['zh']}不设时由 `EngineArgs.get_batch_defaults`（vllm/engine/arg_utils.py）"
                     "按显存（>= 70 GiB 且不是 A100 算大卡）与入口决定。"}
    prompt = {"en": f"vLLM 0.26.0, {how} on {on['en']}, `{k.flag}` not set: what value do you "
                    "get?",
              "zh": f"vLLM 0.26.0，{how}，{on['zh']}，不设 `{k.flag}`：实际得到的值是多少？"}
    if isinstance(value, bool):
        words = {True: {"en": "on (True)", "zh": "开（True）"},
                 False: {"en": "off (False)", "zh": "关（False）"}}
        return {"type": "single", "prompt": prompt, "explain": src,
                "choices": _opts([(words[v], v == value, str(v)) for v in (True, False)])}
    if not isinstance(value, int | float):
        raise QuizError(f"default of {k.name} is {value!r}: not a number or a switch")
    return {"type": "numeric", "prompt": prompt, "answer": value, "tolerance": {"abs": 0},
            "explain": src}


@generator("knob_config")
def _g_knob_config(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: knob. Answer: the config dataclass in Knob.config."""
    from course_utils.core import knobs

    def cls(k: Any) -> str:
        return re.match(r"\w+", k.config).group(0)  # type: ignore[union-attr]

    k = knobs.get(p["knob"])
    classes: dict[str, str] = {}
    for other in knobs.KNOBS.values():
        classes.setdefault(cls(other), other.source)
    opts = [({lg: f"`{c}` ({src})" for lg in LANGS}, c == cls(k), c)
            for c, src in sorted(classes.items())]
    return {
        "type": "single",
        "prompt": {"en": f"Which vLLM 0.26.0 config dataclass declares the field behind "
                         f"`{k.flag}` (kwarg `{k.name}`)?",
                   "zh": f"vLLM 0.26.0 里，`{k.flag}`（kwarg `{k.name}`）背后的字段声明在哪个 config "
                         "dataclass 上？"},
        "choices": _opts(opts),
        "explain": {"en": f"`{k.config}` in `{k.source}`. The flag, the `LLM(...)` kwarg and the "
                          "field are three views of one value; the field's declaration is the "
                          "authority on its default.",
                    "zh": f"`{k.source}` 里的 `{k.config}`。flag、`LLM(...)` kwarg 与字段是同一个值的"
                          "三种视图；字段声明才是默认值的权威来源。"},
    }


@generator("knob_constraint")
def _g_knob_constraint(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: constraint, knobs (optional subset). Answer: knobs.for_constraint()."""
    from course_utils.core import knobs

    c = p["constraint"]
    pairs = knobs.for_constraint(c)
    if c not in CONSTRAINTS or not pairs:
        raise QuizError(f"no knob relieves constraint {c!r}")
    moves = {lg: "; ".join(f"`{k.flag}` {m}" for k, m in pairs) for lg in LANGS}
    return {
        "type": "multiple",
        "prompt": {"en": f"The binding constraint is {CONSTRAINTS[c]['en']}. Which knobs relieve "
                         "it?",
                   "zh": f"绑定约束是 {CONSTRAINTS[c]['zh']}。哪些旋钮能缓解它？"},
        "choices": _knob_choices(p.get("knobs"), {k.name for k, _ in pairs}, move=False),
        "explain": {"en": f"knobs.for_constraint('{c}'): {moves['en']}. Turn one, re-measure "
                          "goodput, keep it only if goodput rises inside the SLO.",
                    "zh": f"knobs.for_constraint('{c}')：{moves['zh']}。一次拧一个，重测 goodput，"
                          "只有 SLO 内 goodput 上升才保留。"},
    }


@generator("knob_validate")
def _g_knob_validate(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: values (knob -> value), gpu_memory_gib. Answer: knobs.validate() accepts?"""
    from course_utils.core import knobs

    values = dict(p["values"])
    gib = p.get("gpu_memory_gib")
    argv = " ".join(f"{knobs.get(n).flag} {v}" for n, v in values.items())
    try:
        knobs.validate(values, gpu_memory_gib=gib)
        ok, why = True, None
    except knobs.KnobError as e:
        ok, why = False, str(e)
    on = f" ({_fmt(gib)} GiB GPU)" if gib else ""
    on_zh = f"（{_fmt(gib)} GiB 显卡）" if gib else ""
    opts = [({"en": "It starts: the flags are accepted as given.",
              "zh": "能启动：参数按给定值生效。"}, ok, "starts"),
            ({"en": "Start-up fails with a config error.",
              "zh": "启动失败：配置校验报错。"}, not ok, "rejected"),
            ({"en": "It starts, and vLLM silently lowers one value to fit.",
              "zh": "能启动，vLLM 悄悄把某个值调小以适配。"}, False, "clamped")]
    where = sorted({f"{kk.config.split('.')[0]} ({kk.source})" for kk in knobs.KNOBS.values()
                    if why and kk.name in why})
    explain = ({"en": f"knobs.validate raises: {why}. vLLM checks it in {', '.join(where)} "
                      "while building the engine config, before loading the model.",
                "zh": f"knobs.validate 报错：{why}。vLLM 在构建引擎配置时（加载模型之前）由 "
                      f"{'、'.join(where)} 检查它。"} if why else
               {"en": "knobs.validate accepts it: no cross-knob rule of 0.26.0 is broken.",
                "zh": "knobs.validate 通过：没有违反 0.26.0 的跨旋钮规则。"})
    return {"type": "single",
            "prompt": {"en": f"`vllm serve MODEL {argv}`{on}: what happens?",
                       "zh": f"`vllm serve MODEL {argv}`{on_zh}：会发生什么？"},
            "choices": _opts(opts), "explain": explain}


# vLLM 0.26.0 start-up log lines: vllm/v1/worker/gpu_worker.py ("Available KV cache memory:
# %s GiB"), vllm/v1/core/kv_cache_utils.py ("GPU KV cache size: %s tokens", "Maximum
# concurrency for %s tokens per request: %.2fx").
_LOG_LINES = {
    "kv_memory_gib": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "kv_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "concurrency": re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
}


def startup_facts(text: str) -> dict[str, float]:
    """KV memory, KV tokens and max concurrency from a vLLM 0.26.0 server log (last start)."""
    out: dict[str, float] = {}
    for key, rx in _LOG_LINES.items():
        hits = rx.findall(text)
        if not hits:
            continue
        last = hits[-1]
        if key == "concurrency":
            out["concurrency_len"] = float(last[0].replace(",", ""))
            out["concurrency"] = float(last[1])
        else:
            out[key] = float(last.replace(",", ""))
    return out


def _logged(p: Mapping[str, Any]) -> tuple[dict[str, float], bool]:
    """Start-up facts from ``params.log`` (path/glob or candidates) when found, else from
    the params themselves (``kv_memory_gib``, ``logged_tokens``, ``logged_concurrency``)."""
    if "log" in p:
        try:
            src = _data(p, "log")
        except QuizError:
            src = None
        if isinstance(src, Path):
            facts = startup_facts(src.read_text(encoding="utf-8", errors="replace"))
            if "kv_memory_gib" in facts:
                return facts, True
    facts = {"kv_memory_gib": float(p["kv_memory_gib"])}
    if "logged_tokens" in p:
        facts["kv_tokens"] = float(p["logged_tokens"])
    if "logged_concurrency" in p:
        facts["concurrency"] = float(p["logged_concurrency"])
    return facts, False


def _model(p: Mapping[str, Any]) -> Any:
    from course_utils.core import capacity

    return capacity.load_model(p.get("model", "qwen2.5-7b-instruct"))


def _kv_dtype(p: Mapping[str, Any]) -> str:
    return str(p.get("kv_dtype", "auto"))


def _shape_text(m: Any, kv_dtype: str) -> dict[str, str]:
    b = m.kv_bytes_per_token(kv_dtype) // (2 * m.layers * m.kv_heads * m.head_dim)
    return {"en": f"2 (K and V) × {m.layers} layers × {m.kv_heads} KV heads × head dim "
                  f"{m.head_dim} × {b} byte{'s' if b > 1 else ''} = "
                  f"{_fmt(m.kv_bytes_per_token(kv_dtype))} bytes per token",
            "zh": f"2（K 与 V）× {m.layers} 层 × {m.kv_heads} 个 KV 头 × 头维 {m.head_dim} × "
                  f"{b} 字节 = 每 token {_fmt(m.kv_bytes_per_token(kv_dtype))} 字节"}


@generator("kv_bytes_per_token")
def _g_kv_bytes(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, kv_dtype. Answer: ModelShape.kv_bytes_per_token."""
    m, dt = _model(p), _kv_dtype(p)
    shape = _shape_text(m, dt)
    return {"type": "numeric", "answer": m.kv_bytes_per_token(dt), "tolerance": {"abs": 0},
            "unit": {"en": "bytes", "zh": "字节"},
            "prompt": {"en": f"{m.name} ({m.layers} layers, {m.kv_heads} KV heads, head dim "
                             f"{m.head_dim}), `--kv-cache-dtype {dt}`: how many bytes of KV cache "
                             "does one token take across all layers?",
                       "zh": f"{m.name}（{m.layers} 层、{m.kv_heads} 个 KV 头、头维 {m.head_dim}），"
                             f"`--kv-cache-dtype {dt}`：一个 token 在所有层上占多少字节 KV cache？"},
            "explain": {lg: shape[lg] + ("。" if lg == "zh" else ".") for lg in LANGS}}


@generator("kv_tokens")
def _g_kv_tokens(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, kv_memory_gib | log, kv_dtype, rel_tol, logged_tokens.
    Answer: ModelShape.kv_tokens of the KV memory (read from a recorded server log if
    ``log`` is found)."""
    from course_utils.core import capacity

    m, dt = _model(p), _kv_dtype(p)
    facts, from_log = _logged(p)
    gib = facts["kv_memory_gib"]
    tokens = m.kv_tokens(gib, dt)
    shape = _shape_text(m, dt)
    bs = capacity.BLOCK_SIZE
    logged = {"en": "", "zh": ""}
    if "kv_tokens" in facts:
        src = {"en": "this recorded run's log" if from_log else "the measured log",
               "zh": "这次记录的启动日志" if from_log else "实测日志"}
        logged = {"en": f" vLLM's own line in {src['en']}: `GPU KV cache size: "
                        f"{_fmt(facts['kv_tokens'])} tokens` (the GiB figure it prints is "
                        "rounded).",
                  "zh": f"{src['zh']}里 vLLM 自己的一行：`GPU KV cache size: "
                        f"{_fmt(facts['kv_tokens'])} tokens`（它打印的 GiB 数是四舍五入后的）。"}
    return {"type": "numeric", "answer": tokens, "tolerance": {"rel": p.get("rel_tol", 0.01)},
            "unit": {"en": "tokens", "zh": "token"},
            "prompt": {"en": f"vLLM logs `Available KV cache memory: {_fmt(gib)} GiB` for "
                             f"{m.name} (`--kv-cache-dtype {dt}`). How many tokens of KV cache "
                             "is that?",
                       "zh": f"vLLM 为 {m.name} 打印 `Available KV cache memory: {_fmt(gib)} GiB`"
                             f"（`--kv-cache-dtype {dt}`）。这能装多少 token 的 KV？"},
            "explain": {
                "en": f"{shape['en']}; {_fmt(gib)} GiB ÷ that, rounded down to whole "
                      f"{bs}-token blocks (vllm/v1/core/kv_cache_utils.py) = {_fmt(tokens)} "
                      f"tokens.{logged['en']}",
                "zh": f"{shape['zh']}；{_fmt(gib)} GiB ÷ 它，向下取整到 {bs} token 一个的整块"
                      f"（vllm/v1/core/kv_cache_utils.py）= {_fmt(tokens)} token。{logged['zh']}"}}


@generator("max_concurrency")
def _g_max_concurrency(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, kv_memory_gib | log, max_model_len, kv_dtype, logged_concurrency.
    Answer: ModelShape.max_concurrency."""
    m, dt = _model(p), _kv_dtype(p)
    facts, from_log = _logged(p)
    gib, mml = facts["kv_memory_gib"], int(p["max_model_len"])
    conc = m.max_concurrency(gib, mml, dt)
    blocks = m.kv_blocks(gib, dt)
    logged = {"en": "", "zh": ""}
    if "concurrency" in facts and facts.get("concurrency_len", mml) == mml:
        logged = {"en": f" vLLM logged {facts['concurrency']:.2f}x.",
                  "zh": f"vLLM 日志里是 {facts['concurrency']:.2f}x。"}
    return {"type": "numeric", "answer": round(conc, 2),
            "tolerance": {"rel": p.get("rel_tol", 0.01)},
            "unit": {"en": "requests", "zh": "个请求"},
            "prompt": {"en": f"{m.name}, {_fmt(gib)} GiB of KV cache, `--max-model-len {mml}`: "
                             "what 'Maximum concurrency' does vLLM log at start-up, i.e. how many "
                             "full-length requests fit at once?",
                       "zh": f"{m.name}，KV cache {_fmt(gib)} GiB，`--max-model-len {mml}`："
                             "vLLM 启动日志里的「Maximum concurrency」是多少，即同时能装下几个满长度请求？"},
            "explain": {"en": f"{_fmt(blocks)} blocks ÷ ceil({mml} / 16) blocks per request = "
                              f"{conc:.2f}×. Requests shorter than {mml} tokens fit more."
                              f"{logged['en']}",
                        "zh": f"{_fmt(blocks)} 个 block ÷ 每请求 ceil({mml} / 16) 个 block = "
                              f"{conc:.2f}×。比 {mml} 短的请求能装更多。{logged['zh']}"}}


@generator("kv_binding")
def _g_kv_binding(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: records (a lab 01 results.jsonl, recorded; or inline records), baseline,
    eval_set, max_num_seqs. Answer: keep.kv_check's demand_tokens for the baseline."""
    from course_utils.core import capacity, evalset, keep
    from course_utils.core.records import read_jsonl

    src = _data(p, "records")
    records = (read_jsonl(src) if isinstance(src, Path)
               else [dict(r) for r in src])
    base = p["baseline"]
    bound = evalset.prompt_tokens_bound(evalset.load_items(resolve_path(p["eval_set"])))
    kv = keep.kv_check(records, baseline=base, prompt_tokens_bound=bound,
                            max_num_seqs=p.get("max_num_seqs"))
    if kv is None:
        raise QuizError(f"kv_binding: no baseline {base!r} with a KV size in the records")
    out_tokens, bs = kv["out_tokens"], capacity.BLOCK_SIZE
    share = kv["demand_tokens"] / kv["kv_tokens"]
    verdict = {"en": ("it does not bind: more KV cannot speed this pass up, so a gain from "
                      "raising the knob needs another explanation before you keep it"
                      if not kv["binding"] else
                      "it binds: more KV lets more requests run at once"),
               "zh": ("没有卡住：更多 KV 不可能让这一轮更快，所以调高旋钮带来的提升另有原因，"
                      "保留之前要先查清" if not kv["binding"] else
                      "卡住了：更多 KV 让更多请求同时运行")}
    where = {"en": "", "zh": ""}
    if isinstance(src, Path):
        rel = src.parent.parent.name
        where = {"en": f" (the recorded run {rel})", "zh": f"（记录的运行 {rel}）"}
    at = kv["at_once"]
    return {"type": "numeric", "answer": kv["demand_tokens"],
            "tolerance": {"rel": p.get("rel_tol", 0.05)},
            "unit": {"en": "tokens", "zh": "token"},
            "prompt": {"en": f"Lab 01's speed pass{where['en']}: {kv['load_prompts']} "
                             f"requests submitted at once, each a prompt of at most "
                             f"{kv['prompt_tokens']} tokens plus {out_tokens} generated "
                             f"(`ignore_eos`), at most {at} running at once. The baseline "
                             f"`gpu_memory_utilization={base}` logged `GPU KV cache size: "
                             f"{_fmt(kv['kv_tokens'])} tokens`. How many KV tokens can the "
                             f"pass need at most ({bs}-token blocks)?",
                       "zh": f"实验 01 的速度测试{where['zh']}：一次提交 {kv['load_prompts']} 个请求，"
                             f"每个 prompt 至多 {kv['prompt_tokens']} token，再生成 {out_tokens} "
                             f"个（`ignore_eos`），同时最多运行 {at} 个。基线 "
                             f"`gpu_memory_utilization={base}` 的日志是 `GPU KV cache size: "
                             f"{_fmt(kv['kv_tokens'])} tokens`。这一轮最多需要多少 KV token"
                             f"（按 {bs} token 的 block 取整）？"},
            "explain": {"en": f"{at} x ceil(({kv['prompt_tokens']} + {out_tokens}) / {bs}) x {bs} = "
                              f"{at} x {kv['per_request_tokens']} = {_fmt(kv['demand_tokens'])} "
                              f"tokens, {share:.0%} of the {_fmt(kv['kv_tokens'])} in the pool: "
                              f"{verdict['en']} (course_utils.core.keep.kv_check).",
                        "zh": f"{at} x ceil(({kv['prompt_tokens']} + {out_tokens}) / {bs}) x {bs} = "
                              f"{at} x {kv['per_request_tokens']} = {_fmt(kv['demand_tokens'])} "
                              f"token，只占池子 {_fmt(kv['kv_tokens'])} 的 {share:.0%}："
                              f"{verdict['zh']}（course_utils.core.keep.kv_check）。"}}


@generator("same_batch_spread")
def _g_same_batch_spread(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: run (a recorded lab 01 knobs folder, or inline {value: {tok_s,
    gen_before_full, kv_full_at_s}}), baseline, candidate, min_gain. Answer: the gap before
    the KV cache filled is larger than the effect, so the run cannot judge the knob."""
    from course_utils.core import keep
    from course_utils.core.records import read_jsonl

    src = _data(p, "run")
    base, cand = p["baseline"], p["candidate"]
    where = {"en": "", "zh": ""}
    if isinstance(src, Path):
        recs = read_jsonl(src / "results.jsonl")
        spread = keep.same_batch_gap(src, recs, baseline=base)
        if spread is None:
            raise QuizError(f"same_batch_spread: no engine stats for {base!r} in {src}")
        tok = {r["value"]: r["output_tok_s"] for r in recs if r.get("status") == "ok"}
        pts = {v: {"tok_s": tok[v], "gen_before_full": t["gen_tok_s_before_full"],
                   "kv_full_at_s": t["kv_full_at_s"]} for v, t in spread["timelines"].items()}
        where = {"en": f" (the recorded run {src.parent.name})",
                 "zh": f"（记录的运行 {src.parent.name}）"}
    else:
        pts = {float(k): dict(v) for k, v in src.items()}
    b, c = pts[base], pts[cand]
    overall = c["tok_s"] / b["tok_s"] - 1.0
    gap = c["gen_before_full"] / b["gen_before_full"] - 1.0
    gain = float(p.get("min_gain", 0.05))
    first = min(b["kv_full_at_s"], c["kv_full_at_s"])
    return {
        "type": "single",
        "prompt": {
            "en": f"Lab 01{where['en']}: `gpu_memory_utilization` {base} vs {cand}, with the KV "
                  f"cache binding at both (requests preempted once it filled). Output tok/s over "
                  f"the pass: {_fmt(round(b['tok_s']))} vs {_fmt(round(c['tok_s']))} "
                  f"({overall:+.0%}). vLLM's 10 s stats lines: in the first {first} s, before "
                  f"either cache filled, both ran the same requests at the same lengths and "
                  f"generated {_fmt(round(b['gen_before_full']))} vs "
                  f"{_fmt(round(c['gen_before_full']))} tok/s. What do you conclude?",
            "zh": f"实验 01{where['zh']}：`gpu_memory_utilization` {base} 对 {cand}，两边 KV cache "
                  f"都成了瓶颈（填满后就有请求被抢占）。整轮输出 tok/s：{_fmt(round(b['tok_s']))} 对 "
                  f"{_fmt(round(c['tok_s']))}（{overall:+.0%}）。vLLM 每 10 秒的统计行：前 {first} 秒、"
                  f"两边 cache 都还没满时，跑的是同样的请求、同样的长度，生成速度是 "
                  f"{_fmt(round(b['gen_before_full']))} 对 {_fmt(round(c['gen_before_full']))} tok/s。"
                  "结论是什么？"},
        "choices": _opts([
            ({"en": f"The run cannot judge the knob: before the caches filled, where the knob "
                    f"cannot act, the points already differ by {gap:+.0%}, more than the effect "
                    f"being judged. Measure again (other order, repeats).",
              "zh": f"这次运行判断不了这个旋钮：在旋钮使不上力的那一段（cache 填满之前），两个点已经差了 "
                    f"{gap:+.0%}，比要判断的效应还大。换个顺序、多测几次再说。"}, True, "spread"),
            ({"en": f"Keep {base}: the smaller KV pool is {-overall:.0%} faster.",
              "zh": f"保留 {base}：KV 池小一些反而快 {-overall:.0%}。"}, False, "keep-base"),
            ({"en": f"{cand} preempts more because its pool is larger, which explains the loss.",
              "zh": f"{cand} 的池子更大，抢占更多，这解释了变慢。"}, False, "preempt"),
            ({"en": "The KV cache did not bind, so the knob could not matter.",
              "zh": "KV cache 没成为瓶颈，所以旋钮不可能起作用。"}, False, "no-bind"),
        ]),
        "explain": {
            "en": f"Until a cache fills, every value of a capacity knob runs the same batch, so "
                  f"a {gap:+.0%} gap there is this machine's run-to-run spread, not the knob. "
                  f"It is larger than the {overall:+.0%} over the pass and than the {gain:.0%} "
                  "min_gain, so no verdict on the knob survives it. Lab 01 turns a keep inside "
                  "this spread into recheck (course_utils.core.keep.same_batch_gap).",
            "zh": f"cache 填满之前，容量类旋钮的每个取值跑的都是同一批请求，所以那一段的 {gap:+.0%} 是这台机器"
                  f"单次运行的波动，不是旋钮造成的。它比整轮的 {overall:+.0%}、也比 {gain:.0%} 的 min_gain "
                  "都大，所以关于这个旋钮的任何结论都站不住。实验 01 会把落在这个波动之内的「保留」改判为 "
                  "recheck（course_utils.core.keep.same_batch_gap）。"},
    }


@generator("kv_dtype_gain")
def _g_kv_dtype_gain(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, kv_memory_gib. Answer: kv_tokens(fp8) / kv_tokens(auto)."""
    m = _model(p)
    gib = float(p["kv_memory_gib"])
    base, fp8 = m.kv_tokens(gib, "auto"), m.kv_tokens(gib, "fp8")
    ratio = fp8 / base
    return {"type": "numeric", "answer": round(ratio, 3), "tolerance": {"abs": 0.05},
            "unit": {"en": "×", "zh": "倍"},
            "prompt": {"en": f"{m.name} ({m.dtype}) with {_fmt(gib)} GiB of KV memory: by what "
                             "factor does `--kv-cache-dtype fp8` multiply the KV tokens that fit?",
                       "zh": f"{m.name}（{m.dtype}），KV 显存 {_fmt(gib)} GiB：`--kv-cache-dtype fp8` "
                             "让能装的 KV token 数变成原来的几倍？"},
            "explain": {"en": f"{_fmt(base)} → {_fmt(fp8)} tokens: one byte per value instead of "
                              f"two, so about {ratio:.2f}× — more sequences fit, at some KV "
                              "precision.",
                        "zh": f"{_fmt(base)} → {_fmt(fp8)} token：每个值 1 字节而不是 2 字节，约 "
                              f"{ratio:.2f} 倍——能装更多序列，代价是一点 KV 精度。"}}


@generator("tpot_floor")
def _g_tpot_floor(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, gpu, batch, context_tokens, rel_tol. Answer: capacity.tpot_floor_ms."""
    from course_utils.core import capacity

    m = _model(p)
    g = capacity.get_gpu(p.get("gpu", "rtx4090"))
    batch, ctx = int(p.get("batch", 1)), int(p.get("context_tokens", 0))
    ms = capacity.tpot_floor_ms(m, g, batch=batch, context_tokens=ctx)
    return {"type": "numeric", "answer": round(ms, 2),
            "tolerance": {"rel": p.get("rel_tol", 0.1)}, "unit": {"en": "ms", "zh": "ms"},
            "prompt": {"en": f"Decode roofline: {m.name} (about {m.weight_gib():.2f} GiB of "
                             f"weights) on one {g.name} ({_fmt(g.hbm_gbps)} GB/s), batch {batch}, "
                             f"{ctx} context tokens. What is the TPOT floor if every step reads "
                             "all weights once?",
                       "zh": f"decode 屋顶线：{m.name}（约 {m.weight_gib():.2f} GiB 权重）跑在一张 "
                             f"{g.name}（{_fmt(g.hbm_gbps)} GB/s）上，batch {batch}，上下文 {ctx} token。"
                             "若每步都把全部权重读一遍，TPOT 下限是多少？"},
            "explain": {"en": f"{m.weight_bytes() / 1e9:.2f} GB ÷ {_fmt(g.hbm_gbps)} GB/s ≈ "
                              f"{ms:.2f} ms per token. Quantized weights shrink the bytes, which is "
                              "why quantization speeds up memory-bound decode.",
                        "zh": f"{m.weight_bytes() / 1e9:.2f} GB ÷ {_fmt(g.hbm_gbps)} GB/s ≈ 每 token "
                              f"{ms:.2f} ms。量化缩小权重字节，所以能加速受带宽限制的 decode。"}}


# ---- SLO / goodput

def _slo(p: Mapping[str, Any]) -> Any:
    from course_utils.core import slo

    return slo.SLO.parse(str(p["slo"]))


def _data(p: Mapping[str, Any], key: str) -> Any:
    """``params[key]``: inline data (a mapping), a path/glob, or a list of those tried in
    order (e.g. a recorded ``labs/results/h200-*/`` file, then a package example); the
    older ``{key}_fallback`` form is the last candidate."""
    v = p.get(key)
    cands = list(v) if isinstance(v, list) else [v]
    if f"{key}_fallback" in p:
        cands.append(p[f"{key}_fallback"])
    misses = []
    for c in cands:
        if not isinstance(c, str | Path):
            return c
        try:
            return resolve_path(c)
        except QuizError:
            misses.append(str(c))
    raise QuizError(f"{key}: none of {', '.join(misses)} found (looked in the repo and "
                    "package data)")


def recorded_point(p: Mapping[str, Any]) -> dict[str, Any] | None:
    """A sweep point of a recorded run, found by its knobs rather than its hash.

    ``params.point = {results: "labs/results/h200-*/slo", knobs: {max_num_seqs: 64}}``:
    reads ``points.jsonl`` there (course_utils.lab.sweep records) and returns the last record
    whose knobs include those given, with its ``bench`` and ``series`` files; None when the
    run or the point is not there (the entry's ``series``/``bench`` are used instead).
    """
    spec = p.get("point")
    if not spec:
        return None
    try:
        root = resolve_path(spec["results"])
    except QuizError:
        return None
    want = dict(spec.get("knobs") or {})
    found = None
    index = root / "points.jsonl"
    lines = index.read_text(encoding="utf-8").splitlines() if index.is_file() else []
    for line in lines:
        rec = json.loads(line) if line.strip() else {}
        knobs_ = rec.get("knobs") or {}
        if rec.get("key") and all(knobs_.get(k) == v for k, v in want.items()):
            d = root / "points" / rec["key"]
            if (d / "bench.json").is_file() and (d / "metrics.jsonl").is_file():
                found = {"bench": d / "bench.json", "series": d / "metrics.jsonl",
                         "knobs": knobs_, "workload": rec.get("workload") or {}}
    return found


def _per_request(b: Any) -> Any:
    """Per-request arrays, or None (also when a collector summarised the ITL lists)."""
    return b.per_request() if isinstance(b.raw.get("itls"), list) else None


def _bench(v: Any) -> Any:
    """A BenchResult from a path or a partial dict (missing required keys filled as 0)."""
    from course_utils.core import slo

    if isinstance(v, Mapping):
        raw = {k: 0 for k in slo.REQUIRED_KEYS}
        raw.update(v)
        return slo.BenchResult.from_json(raw)
    return slo.BenchResult.from_json(v)


def requests_bench(p: Mapping[str, Any]) -> Any:
    """A BenchResult built the way vLLM's calculate_metrics would from per-request values.

    params: ttft_ms (list), tpot_ms (list), output_len, duration_s. TPOT of a request is
    ``(latency - ttft) / (output_len - 1)``; its ITLs are that value repeated, and the p99s
    are ``np.percentile`` as in vllm/benchmarks/serve.py.
    """
    import numpy as np

    src = _data(p, "requests")
    if isinstance(src, Path):
        return _bench(src)
    src = src or p
    ttft = [float(x) for x in src["ttft_ms"]]
    tpot = [float(x) for x in src["tpot_ms"]]
    n = int(src.get("output_len", 128))
    if len(ttft) != len(tpot) or not ttft:
        raise QuizError("ttft_ms and tpot_ms need the same, non-zero length")
    dur = float(src["duration_s"])
    raw = {"duration": dur, "completed": len(ttft), "failed": 0,
           "request_throughput": len(ttft) / dur, "output_throughput": len(ttft) * n / dur,
           "total_input_tokens": 0, "total_output_tokens": len(ttft) * n,
           "ttfts": [t / 1000 for t in ttft], "output_lens": [n] * len(ttft),
           "itls": [[t / 1000] * (n - 1) for t in tpot]}
    for pct in (50, 90, 99):
        raw[f"p{pct}_ttft_ms"] = float(np.percentile(ttft, pct))
        raw[f"p{pct}_tpot_ms"] = float(np.percentile(tpot, pct))
    return _bench(raw)


def _requests_text(p: Mapping[str, Any], b: Any) -> dict[str, str]:
    per = _per_request(b)
    rows = "; ".join(f"{t:.0f}/{d:.0f}" for t, d in zip(per["ttft"], per["tpot"], strict=True))
    return {"en": f"A run of {b.completed} requests took {_fmt(b.duration)} s. Per request, "
                  f"TTFT/TPOT in ms: {rows}.",
            "zh": f"一次压测 {b.completed} 个请求，用时 {_fmt(b.duration)} 秒。逐请求 TTFT/TPOT"
                  f"（ms）：{rows}。"}


@generator("request_goodput")
def _g_request_goodput(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: slo, requests (inline ttft_ms/tpot_ms/output_len/duration_s, or a path to a
    --save-detailed result). Answer: slo.request_goodput (vLLM's per-request goodput)."""
    from course_utils.core import slo as slo_mod

    s, b = _slo(p), requests_bench(p)
    g = slo_mod.request_goodput(b, s)
    if g is None:
        raise QuizError("this result has no per-request data")
    good = round(g * float(b.duration))
    intro = _requests_text(p, b)
    targets = " ".join(s.goodput_args())
    return {"type": "numeric", "answer": round(g, 4), "tolerance": {"abs": 0.01},
            "unit": {"en": "req/s", "zh": "req/s"},
            "prompt": {"en": f"{intro['en']} With `--goodput {targets}`, what request goodput "
                             "does `vllm bench serve` report?",
                       "zh": f"{intro['zh']}用 `--goodput {targets}`，`vllm bench serve` 报告的 "
                             "request goodput 是多少？"},
            "explain": {"en": f"vLLM counts a request as good when each of its own values is ≤ "
                              f"its target (a value equal to the target counts): {good} of "
                              f"{b.completed} requests, ÷ {_fmt(b.duration)} s = {g:.2f} req/s "
                              f"(throughput {b.request_throughput:.2f} req/s).",
                        "zh": f"vLLM 逐个请求判断：每项都 ≤ 目标（等于也算）才算好请求：{b.completed} 个里 "
                              f"{good} 个，÷ {_fmt(b.duration)} 秒 = {g:.2f} req/s"
                              f"（吞吐 {b.request_throughput:.2f} req/s）。"}}


@generator("p99_gate")
def _g_p99_gate(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: slo, requests (as request_goodput) or bench (a result). Answer: slo.score."""
    from course_utils.core import slo as slo_mod

    s = _slo(p)
    rec = recorded_point(p)
    if rec:
        b = _bench(rec["bench"])
    else:
        b = requests_bench(p) if "requests" in p or "ttft_ms" in p else _bench(_data(p, "bench"))
    sc = slo_mod.score(b, s)
    keys = [k for k in s.targets() if b.percentile(k, s.percentile) is not None]
    over = {k for k in keys if b.percentile(k, s.percentile) > s.targets()[k]}
    pcts = ", ".join(f"p99 {k.upper()} {b.percentile(k, s.percentile):.1f} ms" for k in keys)
    opts: list[tuple[dict[str, str], bool, str]] = [
        ({"en": f"It passes: the score is the full throughput ({b.request_throughput:.2f} "
                "req/s).",
          "zh": f"通过：得分就是全部吞吐（{b.request_throughput:.2f} req/s）。"},
         sc.meets_slo, "pass")]
    for k in keys:
        opts.append(({"en": f"It fails on {k.upper()} only: score 0.",
                      "zh": f"只在 {k.upper()} 上不达标：得 0 分。"}, over == {k}, f"fail-{k}"))
    if len(keys) > 1:
        opts.append(({"en": "It fails on more than one target: score 0.",
                      "zh": "不止一个目标不达标：得 0 分。"}, len(over) > 1, "fail-several"))
    intro = _requests_text(p, b) if _per_request(b) is not None else {"en": "", "zh": ""}
    return {"type": "single",
            "prompt": {"en": f"{intro['en']} SLO: {slo_text(s, 'en')}. What does the lesson's p99 gate (full "
                             "throughput if every p99 meets its target, else 0) say?".strip(),
                       "zh": f"{intro['zh']}SLO：{slo_text(s, 'zh')}。本课的 p99 门槛（每个 p99 都达标就记全部吞吐，"
                             "否则记 0）怎么判？".strip()},
            "choices": _opts(opts),
            "explain": {"en": f"{pcts}. " + (f"Violations: {'; '.join(sc.violations)}. "
                                              if sc.violations else "")
                              + sc.why_they_differ("en"),
                        "zh": f"{pcts}。" + (f"不达标：{'; '.join(sc.violations)}。"
                                            if sc.violations else "")
                              + sc.why_they_differ("zh")}}


@generator("slo_compare")
def _g_slo_compare(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: slo, configs: [{name, bench fields...}]. Answer: highest slo.gate_goodput."""
    from course_utils.core import slo as slo_mod

    s = _slo(p)
    cfgs = [(c["name"], _bench(c)) for c in p["configs"]]
    scores = [(n, slo_mod.gate_goodput(b, s), b) for n, b in cfgs]
    best = max(g for _, g, _ in scores)
    winners = [n for n, g, _ in scores if g == best]
    tie = len(winners) > 1 or best == 0
    opts = [({lg: n for lg in LANGS}, not tie and n == winners[0], n) for n, _, _ in scores]
    opts.append(({"en": "Neither: they score the same", "zh": "都不是：得分一样"}, tie, "tie"))

    def desc(b: Any, lg: str) -> str:
        tok = f"{_fmt(round(b.output_throughput))} tok/s"
        return f"{tok}, " + ", ".join(
            f"p99 {k.upper()} {_fmt(b.percentile(k))} ms" for k in s.targets()
            if b.percentile(k) is not None)

    lines = {lg: "; ".join(f"{n}: {desc(b, lg)}" for n, _, b in scores) for lg in LANGS}
    verdict = {lg: "; ".join(
        f"{n} " + (f"{'达标' if lg == 'zh' else 'meets it'} → {g:.2f} req/s" if g else
                   f"{'违反' if lg == 'zh' else 'violates it'} → 0")
        for n, g, _ in scores) for lg in LANGS}
    return {"type": "single",
            "prompt": {"en": f"{lines['en']}. SLO: {slo_text(s, 'en')}. Scored by goodput, which config is "
                             "better?",
                       "zh": f"{lines['zh']}。SLO：{slo_text(s, 'zh')}。以 goodput 打分，哪个配置更好？"},
            "choices": _opts(opts),
            "explain": {"en": f"Gate goodput: {verdict['en']}. Raw throughput does not count "
                              "when the SLO fails.",
                        "zh": f"门槛 goodput：{verdict['zh']}。SLO 不达标时裸吞吐不算数。"}}


def recorded_sweep(p: Mapping[str, Any]) -> list[dict[str, Any]]:
    """(value, bench, rate) for every point of one knob in a recorded sweep, baseline
    included; ``params.points`` (inline ``[{value, bench: {...}}]``) when not recorded."""
    knob = p["knob"]
    out: list[dict[str, Any]] = []
    try:
        root = resolve_path(p["results"]) if "results" in p else None
    except QuizError:
        root = None
    index = root / "points.jsonl" if root else None
    if index and index.is_file():
        for line in index.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line) if line.strip() else {}
            value = (rec.get("knobs") or {}).get(knob)
            bench = root / "points" / str(rec.get("key")) / "bench.json"
            if rec.get("knob") in (knob, "baseline") and value is not None and bench.is_file():
                out = [o for o in out if o["value"] != value]  # a re-run replaces a point
                out.append({"value": value, "bench": _bench(bench),
                            "rate": (rec.get("workload") or {}).get("request_rate")})
    if not out:
        out = [{"value": pt["value"], "bench": _bench(pt["bench"]), "rate": p.get("rate")}
               for pt in p.get("points") or []]
    if len(out) < 2:
        raise QuizError(f"sweep of {knob}: fewer than two points")
    return sorted(out, key=lambda o: o["value"])


@generator("sweep_best")
def _g_sweep_best(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: knob, slo, score (gate|request), results (a recorded sweep dir) and/or
    points (inline). Answer: the value with the highest score (slo.gate_goodput or
    slo.request_goodput), or "none" when every point scores 0."""
    from course_utils.core import knobs
    from course_utils.core import slo as slo_mod

    s, how = _slo(p), p.get("score", "gate")
    if how not in ("gate", "request"):
        raise QuizError("score must be gate or request")
    pts = recorded_sweep(p)
    fn = slo_mod.gate_goodput if how == "gate" else slo_mod.request_goodput
    scores = [(pt["value"], float(fn(pt["bench"], s) or 0.0)) for pt in pts]
    best = max(v for _, v in scores)
    winners = [val for val, v in scores if v == best]
    win = winners[0] if best > 0 and len(winners) == 1 else "none"
    flag = knobs.get(p["knob"]).flag
    rate = next((pt["rate"] for pt in pts if pt["rate"]), None)
    at = f" at {_fmt(rate)} req/s" if rate else ""
    at_zh = f"，{_fmt(rate)} req/s" if rate else ""
    vals = ", ".join(str(v) for v, _ in scores)
    name = {"gate": {"en": "the lesson's p99 gate (throughput if every p99 meets the SLO, "
                           "else 0)", "zh": "本课的 p99 门槛（每个 p99 都达标记吞吐，否则记 0）"},
            "request": {"en": "vLLM's per-request goodput", "zh": "vLLM 的逐请求 goodput"}}[how]
    opts = [({lg: f"`{flag} {v}`" for lg in LANGS}, win == v, str(v)) for v, _ in scores]
    opts.append(({"en": "None: every value scores 0", "zh": "都不行：每个值都得 0"},
                 win == "none", "none"))
    listing = "; ".join(f"{v}: {sc:.2f} req/s" for v, sc in scores)
    return {"type": "single",
            "prompt": {"en": f"A recorded sweep of `{flag}` over {vals}{at}, SLO "
                             f"{slo_text(s, 'en')}. Scored by {name['en']}, which value wins?",
                       "zh": f"一次记录下来的 `{flag}` sweep（{vals}{at_zh}），SLO "
                             f"{slo_text(s, 'zh')}。以{name['zh']}打分，哪个值胜出？"},
            "choices": _opts(opts),
            "explain": {"en": f"Scores: {listing}. The gate is all-or-nothing on p99; vLLM "
                              "counts good requests one by one, so the two can pick differently.",
                        "zh": f"得分：{listing}。门槛对 p99 是全有或全无；vLLM 逐个数达标请求，"
                              "所以两种分数可能选出不同的值。"}}


@generator("goodput_args")
def _g_goodput_args(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: slo. Answer: SLO.goodput_args() (ttft/tpot/e2el only, in ms)."""
    from course_utils.core import slo as slo_mod

    s = _slo(p)
    right = " ".join(s.goodput_args())
    t = s.targets()
    cands = [right,
             " ".join(f"{k}:{_fmt(v)}" for k, v in t.items()),
             " ".join(f"p99_{k}_ms:{_fmt(v)}" for k, v in t.items()),
             " ".join(f"{k}:{_fmt(v / 1000)}" for k, v in t.items() if k in
                      slo_mod.VLLM_GOODPUT_KEYS)]
    seen: list[str] = []
    for c in cands:
        if c not in seen:
            seen.append(c)
    dropped = [k for k in t if k not in slo_mod.VLLM_GOODPUT_KEYS]
    note = ({"en": f" `{', '.join(dropped)}` is not a valid key, so it stays your own p99 check.",
             "zh": f"`{', '.join(dropped)}` 不是合法键，只能留作你自己的 p99 检查。"}
            if dropped else {"en": "", "zh": ""})
    return {"type": "single",
            "prompt": {"en": f"SLO: {slo_text(s, 'en')}. What goes after `vllm bench serve --goodput`?",
                       "zh": f"SLO：{slo_text(s, 'zh')}。`vllm bench serve --goodput` 后面写什么？"},
            "choices": _opts([({lg: f"`{c}`" for lg in LANGS}, c == right, c) for c in seen]),
            "explain": {"en": f"`{right}`: KEY:VALUE pairs in milliseconds, keys only "
                              f"{', '.join(slo_mod.VLLM_GOODPUT_KEYS)} (check_goodput_args in "
                              f"vllm/benchmarks/serve.py).{note['en']}",
                        "zh": f"`{right}`：毫秒单位的 KEY:VALUE 对，键只能是 "
                              f"{', '.join(slo_mod.VLLM_GOODPUT_KEYS)}（vllm/benchmarks/serve.py 的 "
                              f"check_goodput_args）。{note['zh']}"}}


# ---- /metrics and the decision tree

def synthetic_series(spec: Mapping[str, Any]) -> list[Any]:
    """Snapshots parsed from Prometheus text built with the real 0.26.0 metric names.

    spec: lists ``waiting``, ``running``, ``kv_usage`` (0..1) and optionally
    ``preemptions`` (cumulative counter), one value per scrape, ``interval_s`` apart.
    """
    from course_utils.core import metrics

    waiting = list(spec["waiting"])
    n = len(waiting)
    running = list(spec.get("running", [0] * n))
    kv = list(spec.get("kv_usage", [0.0] * n))
    pre = list(spec.get("preemptions", [0] * n))
    if not n or not len(running) == len(kv) == len(pre) == n:
        raise QuizError("synthetic series: waiting, running, kv_usage, preemptions need the "
                        "same non-zero length")
    dt = float(spec.get("interval_s", 0.5))
    lab = 'engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"'
    out = []
    for i in range(n):
        text = (f"# TYPE {metrics.WAITING} gauge\n{metrics.WAITING}{{{lab}}} {waiting[i]}\n"
                f"# TYPE {metrics.RUNNING} gauge\n{metrics.RUNNING}{{{lab}}} {running[i]}\n"
                f"# TYPE {metrics.KV_USAGE} gauge\n{metrics.KV_USAGE}{{{lab}}} {kv[i]}\n"
                f"# TYPE {metrics.PREEMPTIONS}_total counter\n"
                f"{metrics.PREEMPTIONS}_total{{{lab}}} {pre[i]}\n")
        out.append(metrics.Snapshot.parse(text, t=i * dt))
    return out


def diagnosis_inputs(p: Mapping[str, Any]) -> dict[str, Any]:
    """Samples, bench result and max_num_seqs a diagnosis question reads (recorded point,
    else ``series``/``bench`` params)."""
    from course_utils.core import metrics

    rec = recorded_point(p)
    if rec:
        src, bsrc = rec["series"], rec["bench"]
        mns = rec["knobs"].get("max_num_seqs", p.get("max_num_seqs"))
    else:
        src, bsrc, mns = _data(p, "series"), _data(p, "bench"), p.get("max_num_seqs")
    samples = metrics.load_series(src) if isinstance(src, Path) else synthetic_series(src)
    return {"samples": samples, "bench": None if bsrc is None else _bench(bsrc),
            "max_num_seqs": mns, "recorded": rec is not None or isinstance(src, Path)}


def _diagnosis(p: Mapping[str, Any]) -> tuple[Any, Any, Any, Any, Any]:
    from course_utils.core import diagnose, metrics

    inp = diagnosis_inputs(p)
    s = _slo(p)
    d = diagnose.diagnose(inp["samples"], inp["bench"], s, max_num_seqs=inp["max_num_seqs"])
    return d, metrics.summarize(inp["samples"]), inp["bench"], s, inp["max_num_seqs"]


def _diag_text(cap: int | None, summary: Any, bench: Any, s: Any) -> dict[str, str]:
    from course_utils.core import metrics

    cap_en = f" (max_num_seqs {cap})" if cap else ""
    cap_zh = f"（max_num_seqs {cap}）" if cap else ""
    pcts = ""
    if bench is not None:
        pcts = ", ".join(f"p99 {k.upper()} {_fmt(round(bench.percentile(k), 1))} ms"
                         for k in ("ttft", "tpot") if bench.percentile(k) is not None)
    pre = _fmt(summary.preemptions)
    return {
        "en": f"Sampled under load: `{metrics.WAITING}` mean {summary.waiting_mean:.1f} (max "
              f"{_fmt(summary.waiting_max)}), `{metrics.RUNNING}` max "
              f"{_fmt(summary.running_max)}{cap_en}, `{metrics.KV_USAGE}` max "
              f"{summary.kv_usage_max:.2f}, preemptions {pre}. Bench: {pcts or 'n/a'}. "
              f"SLO: {slo_text(s, 'en')}.",
        "zh": f"负载期间采样：`{metrics.WAITING}` 均值 {summary.waiting_mean:.1f}（最大 "
              f"{_fmt(summary.waiting_max)}），`{metrics.RUNNING}` 最大 "
              f"{_fmt(summary.running_max)}{cap_zh}，`{metrics.KV_USAGE}` 最大 "
              f"{summary.kv_usage_max:.2f}，抢占 {pre} 次。压测：{pcts or '无'}。SLO：{slo_text(s, 'zh')}。"}


@generator("diagnose_constraint")
def _g_diagnose_constraint(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: series (path/glob of a metrics JSONL, or inline lists), bench (path or dict of
    p99 keys), slo, max_num_seqs. Answer: diagnose.diagnose(...).constraint."""
    d, summary, bench, s, cap = _diagnosis(p)
    intro = _diag_text(cap, summary, bench, s)
    return {"type": "single",
            "prompt": {"en": f"{intro['en']} Which constraint binds?",
                       "zh": f"{intro['zh']}哪个约束在绑定？"},
            "choices": _opts([(CONSTRAINTS[c], c == d.constraint, c) for c in CONSTRAINTS]),
            "explain": {lg: d.why(lg) for lg in LANGS}}


@generator("diagnose_knobs")
def _g_diagnose_knobs(p: Mapping[str, Any]) -> dict[str, Any]:
    """Same params as diagnose_constraint. Answer: Diagnosis.knobs (or 'no engine knob')."""
    d, summary, bench, s, cap = _diagnosis(p)
    intro = _diag_text(cap, summary, bench, s)
    choices = _knob_choices(p.get("knobs"), set(d.knobs), move=False)
    if d.knobs and not any(c["correct"] for c in choices):
        raise QuizError("none of the listed knobs is in the diagnosis")
    choices.append({"text": NO_KNOB, "correct": not d.knobs, "key": "none"})
    return {"type": "multiple",
            "prompt": {"en": f"{intro['en']} Which knobs would you turn next (one at a time)?",
                       "zh": f"{intro['zh']}接下来该拧哪些旋钮（一次一个）？"},
            "choices": choices,
            "explain": {lg: d.why(lg) for lg in LANGS}}


@generator("metric_name")
def _g_metric_name(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: what (kv_usage|waiting|running). Answer: the name in course_utils.core.metrics."""
    from course_utils.core import metrics

    what = p.get("what", "kv_usage")
    table = {"kv_usage": (metrics.KV_USAGE, {"en": "the KV-cache usage gauge (0..1)",
                                             "zh": "KV cache 使用率 gauge（0..1）"}),
             "waiting": (metrics.WAITING, {"en": "the number of waiting requests",
                                           "zh": "排队中的请求数"}),
             "running": (metrics.RUNNING, {"en": "the number of running requests",
                                           "zh": "运行中的请求数"})}
    if what not in table:
        raise QuizError(f"metric_name: what must be one of {', '.join(table)}")
    right, label = table[what]
    cands = [right, "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_ratio",
             metrics.WAITING, metrics.RUNNING, "vllm:num_requests_queued"]
    names: list[str] = []
    for c in cands:
        if c not in names:
            names.append(c)
    names = sorted(names[:5])
    return {"type": "single",
            "prompt": {"en": f"In vLLM 0.26.0's `/metrics`, which name is {label['en']}?",
                       "zh": f"vLLM 0.26.0 的 `/metrics` 里，哪个名字是 {label['zh']}？"},
            "choices": _opts([({lg: f"`{n}`" for lg in LANGS}, n == right, n) for n in names]),
            "explain": {"en": f"`{right}`, declared by PrometheusStatLogger in "
                              "vllm/v1/metrics/loggers.py. Older vLLM called the KV gauge "
                              "`gpu_cache_usage_perc`; check names against your version.",
                        "zh": f"`{right}`，由 vllm/v1/metrics/loggers.py 的 PrometheusStatLogger 声明。"
                              "旧版 vLLM 把 KV gauge 叫 `gpu_cache_usage_perc`；按你的版本核对名字。"}}
