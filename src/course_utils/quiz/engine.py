"""Self-check quizzes: questions as data (``data/quizzes/<lesson>.yaml``), graded in
Python; ``generator`` entries compute their answers from ``core`` and the recorded runs."""

from __future__ import annotations

import functools
import hashlib
import importlib
import math
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from course_utils.core.texts import package_texts

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
STRINGS = package_texts("quiz_strings")
CHOICE_IDS = "abcdefghijklmnopqrstuvwxyz"
SHUFFLE_SALT = "cu-quiz-8"  # change it to deal every item's choices anew
# Same pattern in quiz.js: optional sign, digits with optional decimals, optional exponent,
# after removing spaces, commas and underscores (thousands separators).
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_SEPARATORS = re.compile(r"[\s,_\u00a0\u3000]")
_CJK = "\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"
_CJK_GAP = re.compile(f"(?<=[{_CJK}])\\s+(?=[{_CJK}])")  # YAML line folds inside Chinese
_CJK_STOP_GAP = re.compile("(?<=[。，；：？！、）」])\\s+")  # no space after Chinese punctuation
_SLACK = 1e-9  # relative float slack so tolerance edges are inclusive despite rounding


class QuizError(ValueError):
    """A quiz file, lesson, language or generator that cannot be used (one line)."""


def _bi(value: Any, where: str) -> dict[str, str]:
    """A bilingual field: ``{zh: ..., en: ...}``, both non-empty strings."""
    if not isinstance(value, Mapping) or set(value) != set(LANGS):
        raise QuizError(f"{where}: needs exactly zh and en texts, got {value!r}")
    out: dict[str, str] = {}
    for lang in LANGS:
        text = value[lang]
        if not isinstance(text, str) or not text.strip():
            raise QuizError(f"{where}: empty {lang} text")
        out[lang] = _CJK_STOP_GAP.sub("", _CJK_GAP.sub("", " ".join(text.split())))
    return out


@dataclass(frozen=True, eq=False)
class Choice:
    id: str  # "a", "b", ... in display order
    text: dict[str, str]
    correct: bool = False
    key: str = ""  # what the choice stands for in generated questions (knob name, effect, ...)


@dataclass(frozen=True, eq=False)
class Question:
    id: str  # stable within the lesson, e.g. "s9-1", "dir-max-num-seqs-itl"
    type: str  # single | multiple | numeric
    prompt: dict[str, str]
    explain: dict[str, str]
    choices: tuple[Choice, ...] = ()
    answer: float | None = None  # numeric
    abs_tol: float | None = None
    rel_tol: float | None = None
    unit: dict[str, str] | None = None
    section: int | None = None  # number of the lesson's §9 question this one grades
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
            tol.append(f"±{fmt_num(self.abs_tol)}")
        if self.rel_tol:
            tol.append(f"±{fmt_num(self.rel_tol * 100)}%")
        tail = STRINGS[lang]["tolerance"].format(x=" / ".join(tol)) if tol else ""
        if tail:
            tail = f"（{tail}）" if lang == "zh" else f" ({tail})"
        return f"{fmt_num(self.answer)}{unit}{tail}"

    def to_dict(self, lang: Lang) -> dict[str, Any]:
        """JSON-ready record with the texts in ``lang``."""
        d: dict[str, Any] = {"id": self.id, "type": self.type, "prompt": self.prompt[lang]}
        if self.choices:
            d["choices"] = [
                {"id": c.id, "text": c.text[lang], "correct": c.correct}
                | ({"key": c.key} if c.key else {})
                for c in self.choices
            ]
        if self.type == "numeric":
            unit = self.unit[lang] if self.unit else None
            d.update(answer=self.answer, abs_tol=self.abs_tol, rel_tol=self.rel_tol, unit=unit)
        d.update(explain=self.explain[lang], expected=self.expected(lang))
        if self.section is not None:
            d["section"] = self.section
        if self.generator:
            d.update(generator=self.generator, params=self.params)
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
    """Grade one answer (choice ids, or a number or numeric string); never raises for a bad
    answer: ``Result.error`` says what is wrong."""
    s = STRINGS[pick_lang(lang)]

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
    # the verdict, the answer (always for numeric, when wrong otherwise), the explanation
    parts = [s["correct"] if ok else s["wrong"]]
    if question.type == "numeric" or not ok:
        parts.append(s["answer"].format(x=question.expected(lang)))
    return Result(ok, s["sep"].join([*parts, question.explain[lang]]))


# ---------------------------------------------------------------- loading

GeneratorFn = Callable[[Mapping[str, Any]], dict[str, Any]]
GENERATORS: dict[str, GeneratorFn] = {}


def generator(name: str) -> Callable[[GeneratorFn], GeneratorFn]:
    """Register a generator: params -> type, the answer (``answer``, ``choices`` or the
    ``right`` keys of the entry's choices) and the ``values`` its texts name."""

    def deco(fn: GeneratorFn) -> GeneratorFn:
        GENERATORS[name] = fn
        return fn

    return deco


def _register_generators() -> None:
    """Import the ``gen_*`` modules (each registers its generators on import)."""
    for mod in sorted(Path(__file__).parent.glob("gen_*.py")):
        importlib.import_module(f"course_utils.quiz.{mod.stem}")


def pick_lang(lang: str) -> Lang:
    if lang not in LANGS:
        raise QuizError(f"language must be zh or en, not {lang!r}")
    return lang  # type: ignore[return-value]


def quiz_path(lesson: str) -> Path:
    if lesson not in LESSONS:
        raise QuizError(f"unknown lesson {lesson!r}; known: {', '.join(LESSONS)}")
    return QUIZ_DIR / f"{lesson}.yaml"


def shuffled(n: int, qid: str) -> list[int]:
    """The display order of ``n`` choices: a permutation fixed by the item id."""
    digest = hashlib.sha256(f"{SHUFFLE_SALT}:{qid}".encode()).digest()
    order = list(range(n))
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def _choices(raw: Any, where: str, qid: str) -> tuple[Choice, ...]:
    """Choices in the order ``shuffled`` gives, ids a, b, c... in that order."""
    if not isinstance(raw, Sequence) or len(raw) < 2:
        raise QuizError(f"{where}: needs at least two choices")
    if len(raw) > len(CHOICE_IDS):
        raise QuizError(f"{where}: too many choices")
    for i, c in enumerate(raw):
        if not isinstance(c, Mapping):
            raise QuizError(f"{where}: choice {i + 1} is not a mapping")
    return tuple(
        Choice(
            id=CHOICE_IDS[pos],
            text=_bi(raw[i].get("text"), f"{where} choice {i + 1}"),
            correct=bool(raw[i].get("correct", False)),
            key=str(raw[i].get("key", "")),
        )
        for pos, i in enumerate(shuffled(len(raw), qid))
    )


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
        id=qid,
        type=qtype,
        prompt=_bi(fields.get("prompt"), f"{where} prompt"),
        explain=_bi(fields.get("explain"), f"{where} explain"),
        section=fields.get("section"),
        generator=fields.get("generator"),
        params=dict(fields.get("params") or {}),
    )
    if qtype == "numeric":
        answer = fields.get("answer")
        if isinstance(answer, bool) or not isinstance(answer, int | float):
            raise QuizError(f"{where}: numeric answer must be a number, got {answer!r}")
        tol = fields.get("tolerance") or {}
        q.update(
            answer=float(answer),
            abs_tol=_tol(tol.get("abs"), where),
            rel_tol=_tol(tol.get("rel"), where),
            unit=_bi(fields["unit"], f"{where} unit") if fields.get("unit") else None,
        )
    else:
        q["choices"] = _choices(fields.get("choices"), where, qid)
        n = sum(c.correct for c in q["choices"])
        if qtype == "single" and n != 1:
            raise QuizError(f"{where}: a single-choice question needs exactly one correct choice")
        if qtype == "multiple" and n < 1:
            raise QuizError(f"{where}: a multiple-choice question needs a correct choice")
    if q["section"] is not None and not isinstance(q["section"], int):
        raise QuizError(f"{where}: section must be the §9 question number")
    return Question(**q)


def expand(entry: Mapping[str, Any], where: str = "entry") -> Question:
    """One YAML entry -> Question; a generator entry is computed now and its values fill
    the entry's texts."""
    if "generator" not in entry:
        return _build(entry, where)
    name = entry["generator"]
    _register_generators()
    if name not in GENERATORS:
        raise QuizError(f"{where}: unknown generator {name!r}; known: {', '.join(GENERATORS)}")
    params = dict(entry.get("params") or {})
    try:
        gen = GENERATORS[name](params)
    except QuizError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise QuizError(f"{where}: generator {name} failed: {e}") from e
    fields = {
        **gen,
        "id": entry.get("id"),
        "section": entry.get("section"),
        "unit": entry.get("unit"),
        "generator": name,
        "params": params,
    }
    return _build(fields | _filled(entry, gen, where), where)


_FIELD = re.compile(r"\{(\w+)\}")


def _filled(entry: Mapping[str, Any], gen: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A generator item's texts: its prompt, explain and ``choices`` (``key: {zh, en}``, after
    any the generator made; right when the generator's ``right`` names the key) with each ``{name}`` replaced by the value
    the generator computed (``values[name]``: {zh, en}, one value for both, or a list of keys
    of the item's ``notes``, optional sentences: those notes, filled, each after a space in
    en). Every value must be named in each language, and nothing else in braces."""
    choices, notes = entry.get("choices") or {}, entry.get("notes") or {}
    if not isinstance(choices, Mapping) or not isinstance(notes, Mapping):
        raise QuizError(f"{where}: a generator item's choices and notes map keys to texts")
    raw = {"prompt": entry.get("prompt"), "explain": entry.get("explain")} | dict(choices)
    texts = {k: _bi(v, f"{where} {k}") for k, v in raw.items()}
    notes = {k: _bi(v, f"{where} note {k}") for k, v in notes.items()}
    right = gen.get("right", ())
    right = {right} if isinstance(right, str) else set(right)
    values = dict(gen.get("values", {}))
    for k, v in values.items():
        bi = isinstance(v, Mapping) and set(v) == set(LANGS)
        if isinstance(v, bool) or not (
            isinstance(v, str | int | float | list)
            or (bi and all(isinstance(x, str) for x in v.values()))
        ):
            raise QuizError(f"{where}: value {k!r} is {v!r}, not a text, a number, notes or zh/en")
    picked = {n for v in values.values() if isinstance(v, list) for n in v}
    for keys, known, what in ((right, choices, "choice"), (picked, notes, "note")):
        if keys - set(known) and (known or what == "note"):
            raise QuizError(f"{where}: no {what} keyed {', '.join(sorted(keys - set(known)))}")
    out: dict[str, dict[str, str]] = {k: {} for k in texts}
    for lg in LANGS:
        used = {n for t in [*texts.values(), *notes.values()] for n in _FIELD.findall(t[lg])}
        if used != set(values):
            unknown, unused = sorted(used - set(values)), sorted(set(values) - used)
            raise QuizError(f"{where}: {lg} placeholders unknown {unknown}, unused {unused}")
        vals = {k: str(v[lg] if isinstance(v, Mapping) else v) for k, v in values.items()}

        def fill(text: str, vals: dict[str, str] = vals) -> str:
            return _FIELD.sub(lambda m: vals[m[1]], text)

        for k, v in values.items():
            if isinstance(v, list):
                vals[k] = "".join(STRINGS[lg]["sep"] + fill(notes[n][lg]) for n in v)
        for k, t in texts.items():
            out[k][lg] = fill(t[lg])
    filled: dict[str, Any] = {"prompt": out.pop("prompt"), "explain": out.pop("explain")}
    if choices:  # after those the generator made, if any
        mine = [{"text": t, "correct": k in right, "key": k} for k, t in out.items()]
        filled["choices"] = [*gen.get("choices", ()), *mine]
    return filled


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
    out = [
        expand(e, f"{p.name} #{i + 1} ({e.get('id', '?') if isinstance(e, Mapping) else e})")
        for i, e in enumerate(entries)
    ]
    ids = [q.id for q in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise QuizError(f"{p}: duplicate ids {', '.join(dup)}")
    return tuple(out)


def title(lesson: str, lang: Lang = "en") -> str:
    doc = yaml.safe_load(quiz_path(lesson).read_text(encoding="utf-8"))
    return _bi(doc["title"], f"{lesson} title")[lang]


# ---------------------------------------------------------------- formatting helpers


_FULL_WIDTH = {",": "，", ";": "；", ":": "："}


def sep(mark: str, lang: str) -> str:
    """A joiner: ``mark`` (``,``, ``;`` or ``:``) and a space, or its full-width form in zh."""
    return _FULL_WIDTH[mark] if lang == "zh" else mark + " "


def listed(items: Iterable[Any]) -> dict[str, str]:
    """``items`` as a list in each language: ``a, b`` in en, ``a、b`` in zh."""
    texts = [str(x) for x in items]
    return {"en": ", ".join(texts), "zh": "、".join(texts)}


def fmt_num(x: float) -> str:
    """Readable number: thousands separators, no trailing zeros."""
    x = float(x)
    if x.is_integer():
        return f"{int(x):,}"
    return f"{x:.4g}" if abs(x) < 1 else f"{x:,.2f}".rstrip("0").rstrip(".")
