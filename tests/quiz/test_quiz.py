"""Self-check quizzes: grading, content consistency with course_utils, renderers, CLI."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from course_utils import quiz
from course_utils.core import capacity, diagnose, knobs, metrics, scaleout, slo
from course_utils.quiz import data as qdata
from course_utils.quiz import engine as qengine
from course_utils.quiz import render as qrender
from tests.quiz.run_checks import RUN_CHECKS

ROOT = Path(__file__).resolve().parents[2]
CJK = re.compile(r"[\u4e00-\u9fff]")


def _q(**fields: Any) -> quiz.Question:
    base = {"id": "t", "prompt": {"zh": "题", "en": "q"}, "explain": {"zh": "因为", "en": "because"}}
    return quiz.expand({**base, **fields})


SINGLE = dict(type="single", choices=[
    {"text": {"zh": "甲", "en": "A"}}, {"text": {"zh": "乙", "en": "B"}, "correct": True},
    {"text": {"zh": "丙", "en": "C"}}])
MULTI = dict(type="multiple", choices=[
    {"text": {"zh": "甲", "en": "A"}, "correct": True}, {"text": {"zh": "乙", "en": "B"}},
    {"text": {"zh": "丙", "en": "C"}, "correct": True}])


def _entry(lesson: str, qid: str, params: dict[str, Any]) -> dict[str, Any]:
    """A lesson's item as written (its templates), with other params."""
    raw = yaml.safe_load(quiz.quiz_path(lesson).read_text(encoding="utf-8"))["questions"]
    return {**next(e for e in raw if e["id"] == qid), "params": params}


def _num(answer: float, **tol: float) -> quiz.Question:
    return _q(type="numeric", answer=answer, tolerance=tol, unit={"zh": "个", "en": "things"})


# ---------------------------------------------------------------- grading

def _ids(q: quiz.Question) -> dict[str, str]:
    """English choice text -> the letter it got after the shuffle."""
    return {c.text["en"]: c.id for c in q.choices}


def test_single_choice() -> None:
    q = _q(**SINGLE)
    b, a = _ids(q)["B"], _ids(q)["A"]
    assert q.correct_ids == {b}
    for right in (b, b.upper(), f" {b} ", [b], (b,)):
        r = quiz.grade(q, right)
        assert r.correct and r.valid, right
        assert r.explanation.startswith("Correct.") and r.explanation.endswith("because")
    wrong = quiz.grade(q, a, "zh")
    assert not wrong.correct and wrong.valid
    assert wrong.explanation == f"不对。答案：{b}。因为"


def test_multiple_choice_needs_the_exact_set() -> None:
    q = _q(**MULTI)
    a, b, c = (_ids(q)[x] for x in "ABC")
    assert quiz.grade(q, [a, c]).correct
    assert quiz.grade(q, f"{c},{a}").correct
    assert quiz.grade(q, f"{a} {c} {a}").correct  # repeats do not matter
    assert not quiz.grade(q, [a]).correct  # a subset is wrong
    assert not quiz.grade(q, [a, b, c]).correct  # a superset is wrong
    assert f"Answer: {', '.join(sorted((a, c)))}." in quiz.grade(q, [a]).explanation


def test_choices_are_dealt_by_item_id() -> None:
    """Letters a, b, c... in display order; the order is fixed by the id (every renderer
    builds from the same Question), and another id may deal the same choices otherwise."""
    q = _q(**SINGLE)
    assert [c.id for c in q.choices] == ["a", "b", "c"]
    assert [c.text["en"] for c in _q(**SINGLE).choices] == [c.text["en"] for c in q.choices]
    orders = {tuple(c.text["en"] for c in _q(**{**SINGLE, "id": f"t{i}"}).choices)
              for i in range(30)}
    assert len(orders) == 6  # all 3! orders occur


def _single_keys(lang: str) -> list[tuple[str, str, list[int], int]]:
    """(id, key letter, every option's length, the key's index) of each single-choice item."""
    out = []
    for lesson in quiz.LESSONS:
        for q in quiz.load(lesson):
            if q.type == "single":
                key = next(c for c in q.choices if c.correct)
                out.append((q.id, key.id, [len(c.text[lang]) for c in q.choices],
                            q.choices.index(key)))
    return out


@pytest.mark.parametrize("lang", quiz.LANGS)
def test_no_letter_holds_the_keys(lang: str) -> None:
    """Over all built single-choice items, no letter holds more than 40 % of the keys."""
    keys = _single_keys(lang)
    letters = [k for _, k, _, _ in keys]
    assert len(keys) >= 20
    worst = max(set(letters), key=letters.count)
    assert letters.count(worst) <= 0.4 * len(letters), (worst, sorted(letters))


@pytest.mark.parametrize("lang", quiz.LANGS)
def test_the_key_is_rarely_the_longest_option(lang: str) -> None:
    """The key is the strictly longest option in at most a quarter of single-choice items."""
    keys = _single_keys(lang)
    longest = [qid for qid, _, lens, i in keys
               if all(lens[i] > n for j, n in enumerate(lens) if j != i)]
    assert len(longest) <= 0.25 * len(keys), longest


def test_numeric_shows_answer_even_when_right() -> None:
    q = _num(2063072, rel=0.01)
    r = quiz.grade(q, "2,063,088")
    assert r.correct
    assert r.explanation == "Correct. Answer: 2,063,072 things (within ±1%). because"


@pytest.mark.parametrize(("answer", "tol", "given", "ok"), [
    (10, {"abs": 0.5}, 10.5, True), (10, {"abs": 0.5}, 9.5, True),
    (10, {"abs": 0.5}, 10.5001, False), (10, {"abs": 0.5}, 9.4999, False),
    (0.3, {"abs": 0.1}, 0.4, True), (0.3, {"abs": 0.1}, 0.2, True),  # float edges inclusive
    (200, {"rel": 0.01}, 202, True), (200, {"rel": 0.01}, 198, True),
    (200, {"rel": 0.01}, 202.01, False), (-200, {"rel": 0.01}, -202, True),
    (0.92, {"abs": 0}, 0.92, True), (0.92, {"abs": 0}, 0.9201, False),
    (0.92, {}, 0.92, True), (0.92, {}, 0.93, False),
    (100, {"abs": 1, "rel": 0.05}, 104.9, True),  # either tolerance passes
    (100, {"abs": 1, "rel": 0.05}, 105.1, False),
    (1000, {"abs": 10, "rel": 0.001}, 1010, True),
])
def test_tolerance_edges_are_inclusive(answer: float, tol: dict[str, float], given: float,
                                       ok: bool) -> None:
    q = _num(answer, **tol)
    assert quiz.grade(q, given).correct is ok
    assert quiz.grade(q, str(given)).correct is ok


@pytest.mark.parametrize(("raw", "value"), [
    ("12.5", 12.5), (" 12.5 ", 12.5), ("2,048", 2048.0), ("2_048", 2048.0), ("1e3", 1000.0),
    ("-.5", -0.5), ("+3", 3.0), ("1\u3000000", 1000.0), (7, 7.0), (0.25, 0.25),
])
def test_parse_number(raw: Any, value: float) -> None:
    assert quiz.parse_number(raw) == value


@pytest.mark.parametrize("raw", ["abc", "1.2.3", "12ms", "--1", "nan", "inf", "1e999",
                                 True, float("nan"), "0x10", "½"])
def test_bad_numbers_are_reported_not_raised(raw: Any) -> None:
    r = quiz.grade(_num(1.0, abs=0.1), raw)
    assert not r.correct and not r.valid
    assert r.error == r.explanation and r.error.startswith("Not a number")


@pytest.mark.parametrize("raw", [None, "", "   ", ",", []])
def test_empty_answers(raw: Any) -> None:
    for q, key in ((_num(1.0), "empty_number"), (_q(**SINGLE), "empty_choice"),
                   (_q(**MULTI), "empty_choice")):
        if q.type == "numeric" and raw == []:
            continue
        for lang in quiz.LANGS:
            r = quiz.grade(q, raw, lang)
            assert not r.valid and r.error == quiz.STRINGS[lang][key], (q.type, raw)


def test_unknown_and_too_many_choices() -> None:
    single, multi = _q(**SINGLE), _q(**MULTI)
    r = quiz.grade(single, "z")
    assert not r.valid and r.error == "Unknown choice: z."
    assert quiz.grade(multi, ["a", "q"], "zh").error == "没有这个选项：q。"
    assert quiz.grade(single, ["a", "b"]).error == "Pick exactly one option."
    assert quiz.grade(single, 3).error == "Unknown choice: 3."


# ---------------------------------------------------------------- file format

@pytest.mark.parametrize(("entry", "message"), [
    ({"type": "single", "choices": SINGLE["choices"][:1]}, "at least two choices"),
    ({"type": "single", "choices": MULTI["choices"]}, "exactly one correct"),
    ({"type": "numeric", "answer": "1"}, "numeric answer must be a number"),
    ({"type": "numeric", "answer": 1, "tolerance": {"abs": -1}}, "tolerance must be"),
    ({"type": "essay"}, "type must be one of"),
    ({"type": "single", "choices": SINGLE["choices"], "prompt": {"en": "only"}},
     "needs exactly zh and en"),
    ({"type": "single", "choices": SINGLE["choices"], "id": "Bad Id"}, "id must be"),
    ({"generator": "nope"}, "unknown generator"),
    ({"generator": "knob_direction", "params": {"knob": "max_num_seqs", "axis": "cost"}},
     "axis must be"),
    ({"generator": "knob_direction", "params": {"knob": "warp_speed", "axis": "ttft"}},
     "unknown knob"),
])
def test_bad_entries_fail_with_one_line(entry: dict[str, Any], message: str) -> None:
    base = {"id": "t", "prompt": {"zh": "题", "en": "q"}, "explain": {"zh": "因", "en": "b"}}
    with pytest.raises(quiz.QuizError, match=message) as e:
        quiz.expand({**base, **entry})
    assert "\n" not in str(e.value)


def test_bad_files(tmp_path: Path) -> None:
    q = {"id": "a", "prompt": {"zh": "题", "en": "q"}, "explain": {"zh": "因", "en": "b"}, **SINGLE}
    p = tmp_path / "x.yaml"
    p.write_text(yaml.safe_dump({"lesson": "knobs", "questions": [q, q]}))
    with pytest.raises(quiz.QuizError, match="duplicate ids a"):
        quiz.load("knobs", p)
    p.write_text(yaml.safe_dump({"lesson": "slo-loop", "questions": [q]}))
    with pytest.raises(quiz.QuizError, match="lesson: knobs"):
        quiz.load("knobs", p)
    p.write_text("questions: [")
    with pytest.raises(quiz.QuizError, match="not YAML"):
        quiz.load("knobs", p)
    with pytest.raises(quiz.QuizError, match="unknown lesson"):
        quiz.load("tuning")
    with pytest.raises(quiz.QuizError, match="language"):
        quiz.html("knobs", "fr")  # type: ignore[arg-type]


# ---------------------------------------------------------------- shipped content

@pytest.fixture(scope="module", params=quiz.LESSONS)
def lesson(request: pytest.FixtureRequest) -> str:
    return request.param


def test_section9_questions_are_present(lesson: str) -> None:
    qs = {q.id: q for q in quiz.load(lesson)}
    for n in (1, 2, 3):  # each lesson's §9 has three questions
        assert qs[f"s9-{n}"].section == n
    assert sorted(q.section for q in qs.values() if q.section) == [1, 2, 3]
    # item ids end up in the page's markup (data-qid): none calls the lessons "seed"
    assert not any("seed" in q.id for q in qs.values())
    assert "seed" not in " ".join(re.findall(r'data-qid="([^"]+)"', quiz.html(lesson, "en")))


def test_enough_new_and_generated_questions(lesson: str) -> None:
    qs = quiz.load(lesson)
    assert sum(q.section is None for q in qs) >= 8
    assert sum(q.generator is not None for q in qs) >= 8
    assert {q.type for q in qs} == set(quiz.TYPES)


def test_both_languages_have_the_same_questions(lesson: str) -> None:
    zh = [q.to_dict("zh") for q in quiz.load(lesson)]
    en = [q.to_dict("en") for q in quiz.load(lesson)]
    assert [(q["id"], q["type"]) for q in zh] == [(q["id"], q["type"]) for q in en]
    for a, b in zip(zh, en, strict=True):
        assert a.get("answer") == b.get("answer")
        assert [c["correct"] for c in a.get("choices", [])] == \
            [c["correct"] for c in b.get("choices", [])]
        assert CJK.search(a["prompt"]) and CJK.search(a["explain"]), a["id"]
        assert not CJK.search(b["prompt"] + b["explain"]), b["id"]
        for c in b.get("choices", []):
            assert not CJK.search(c["text"]), (b["id"], c)
    assert re.findall(r'data-qid="([^"]+)"', quiz.html(lesson, "zh")) == \
        re.findall(r'data-qid="([^"]+)"', quiz.html(lesson, "en"))


def test_every_right_answer_grades_correct(lesson: str) -> None:
    for q in quiz.load(lesson):
        answer = q.answer if q.type == "numeric" else sorted(q.correct_ids)
        for lang in quiz.LANGS:
            r = quiz.grade(q, answer, lang)
            assert r.correct and r.explanation.endswith(q.explain[lang]), q.id


# ---- every data-driven answer, recomputed through the course_utils API

def _keys(q: quiz.Question) -> set[str]:
    return {c.key for c in q.choices if c.correct}


def _shown(q: quiz.Question) -> set[str]:
    return {c.key for c in q.choices}


def _series(spec: dict[str, Any]) -> list[metrics.Snapshot]:
    """The same series as the quiz builds, made directly as Snapshot values (another path)."""
    n = len(spec["waiting"])
    cols = {metrics.WAITING: spec["waiting"], metrics.RUNNING: spec.get("running", [0] * n),
            metrics.KV_USAGE: spec.get("kv_usage", [0] * n),
            metrics.PREEMPTIONS: spec.get("preemptions", [0] * n)}
    return [metrics.Snapshot(t=i * 0.5, values={k: float(v[i]) for k, v in cols.items()})
            for i in range(n)]


def _bench(d: dict[str, Any]) -> slo.BenchResult:
    return slo.BenchResult.from_json({**{k: 0 for k in slo.REQUIRED_KEYS}, **d})


def _load_bench(p: dict[str, Any]) -> slo.BenchResult:
    rec = qdata.recorded_point(p)  # which file or inline dict the entry points at
    src = rec["bench"] if rec else qdata.item_data(p, "bench")
    return slo.BenchResult.from_json(src) if isinstance(src, Path) else _bench(src)


def _load_series(p: dict[str, Any]) -> list[metrics.Snapshot]:
    rec = qdata.recorded_point(p)
    src = rec["series"] if rec else qdata.item_data(p, "series")
    return metrics.load_series(src) if isinstance(src, Path) else _series(src)


def _check_diagnosis(q: quiz.Question, p: dict[str, Any]) -> diagnose.Diagnosis:
    rec = qdata.recorded_point(p)
    mns = rec["knobs"].get("max_num_seqs") if rec else p.get("max_num_seqs")
    d = diagnose.diagnose(_load_series(p), _load_bench(p), slo.SLO.parse(p["slo"]),
                          max_num_seqs=mns)
    summary = metrics.summarize(_load_series(p))
    raw = [e for lesson in quiz.LESSONS for e in  # ids are unique within a lesson only
           yaml.safe_load(quiz.quiz_path(lesson).read_text(encoding="utf-8"))["questions"]]
    entry = next(e for e in raw if e["id"] == q.id and e.get("generator") == q.generator)
    note = qengine._bi(entry["notes"][d.leaf], "note")
    for lg in quiz.LANGS:  # the explanation teaches the leaf the tree reached, with its numbers
        words = [w.strip() for w in re.split(r"\{\w+\}", note[lg]) if w.strip()]
        assert words and all(w in q.explain[lg] for w in words), (q.id, lg)
        assert f"{summary.waiting_mean:.1f}" in q.explain[lg] or "{w}" not in note[lg]
    return d


def _requests(p: dict[str, Any]) -> tuple[int, int, float]:
    """vLLM's rule counted by hand from the YAML: good when every value <= its target."""
    r, s = p["requests"], slo.SLO.parse(p["slo"])
    good = sum(t <= (s.ttft_ms or np.inf) and d <= (s.tpot_ms or np.inf)
               for t, d in zip(r["ttft_ms"], r["tpot_ms"], strict=True))
    return good, len(r["ttft_ms"]), float(r["duration_s"])


def check_generated(q: quiz.Question) -> None:
    p, g = q.params, q.generator
    if g == "knob_direction":
        assert _keys(q) == {getattr(knobs.KNOBS[p["knob"]], p["axis"])}
    elif g == "knob_recommend":
        assert _keys(q) == {k.name for k in knobs.recommend(p["goal"])} & _shown(q)
    elif g == "knob_free_wins":
        both = {k.name for k in knobs.KNOBS.values() if k.throughput == "better"
                and "worse" not in (k.ttft, k.itl) and "better" in (k.ttft, k.itl)}
        assert _keys(q) == both & _shown(q)
    elif g == "knob_constraint":
        assert _keys(q) == {k.name for k, _ in knobs.for_constraint(p["constraint"])} & _shown(q)
    elif g == "default_cap":
        gpu = capacity.get_gpu(p["gpu"])
        cap = knobs.default("max_num_seqs", gpu_memory_gib=gpu.memory_gib, gpu_name=gpu.name)
        assert f"max_num_seqs={cap}" in q.prompt["en"]  # the logged cap is in the question
        assert _keys(q) == ({"fits"} if p["rate"] * p["e2e_s"] < cap else set())
    elif g == "knob_validate":
        try:
            knobs.validate(p["values"], gpu_memory_gib=p.get("gpu_memory_gib"))
            assert _keys(q) == {"starts"}
        except knobs.KnobError as e:
            assert _keys(q) == {"rejected"} and str(e) in q.explain["en"]
    elif g == "kv_bytes_per_token":
        m = capacity.load_model(p["model"])
        assert q.answer == m.kv_bytes_per_token(p.get("kv_dtype", "auto"))
    elif g == "kv_tokens":
        m = capacity.load_model(p["model"])
        facts, _ = qdata.logged_memory(p)  # the recorded log's numbers, or the params' fallback
        assert q.answer == m.kv_tokens(facts["kv_memory_gib"], p.get("kv_dtype", "auto"))
        if "kv_tokens" in facts:  # vLLM's own count must grade as correct
            assert quiz.grade(q, facts["kv_tokens"]).correct
    elif g == "max_concurrency":
        m = capacity.load_model(p["model"])
        facts, _ = qdata.logged_memory(p)
        assert q.answer == pytest.approx(
            m.max_concurrency(facts["kv_memory_gib"], p["max_model_len"]), abs=0.01)
        if "concurrency" in facts:
            assert quiz.grade(q, facts["concurrency"]).correct
    elif g == "kv_binding":
        from course_utils.core import evalset, keep
        from course_utils.core.records import read_jsonl

        src = qdata.item_data(p, "records")
        recs = read_jsonl(src) if isinstance(src, Path) else list(src)
        items = evalset.load_items(qdata.resolve_path(p["eval_set"]))
        kv = keep.kv_check(recs, baseline=p["baseline"], max_num_seqs=p.get("max_num_seqs"),
                                prompt_tokens_bound=evalset.prompt_tokens_bound(items))
        assert q.answer == kv["demand_tokens"]
        assert ("does not bind" in q.explain["en"]) == (not kv["binding"])
    elif g == "same_batch_spread":
        from course_utils.core import keep
        from course_utils.core.records import read_jsonl

        src = qdata.item_data(p, "run")
        assert isinstance(src, Path)  # the recorded run is in the repo
        spread = keep.same_batch_gap(src, read_jsonl(src / "results.jsonl"),
                                          baseline=p["baseline"])
        gap = spread["gaps"][p["candidate"]]
        assert abs(gap) >= p["min_gain"]  # the right answer is "the run cannot judge it"
        assert _keys(q) == {"spread"} and f"{gap:+.0%}" in q.explain["en"]
    elif g == "tpot_floor":
        assert q.answer == pytest.approx(capacity.tpot_floor_ms(
            p["model"], p["gpu"], batch=p.get("batch", 1)), abs=0.01)
    elif g == "request_goodput":
        good, n, dur = _requests(p)
        assert q.answer == pytest.approx(good / dur, abs=1e-4)
        assert q.answer == pytest.approx(slo.request_goodput(qdata.requests_bench(p),
                                                             slo.SLO.parse(p["slo"])), abs=1e-4)
    elif g == "p99_gate":
        s = slo.SLO.parse(p["slo"])
        if "requests" in p:
            r = p["requests"]
            b = _bench({"request_throughput": len(r["ttft_ms"]) / r["duration_s"],
                        "p99_ttft_ms": float(np.percentile(r["ttft_ms"], 99)),
                        "p99_tpot_ms": float(np.percentile(r["tpot_ms"], 99))})
        else:
            b = _load_bench(p)
        sc = slo.score(b, s)
        over = {k for k in s.targets() if b.percentile(k) > s.targets()[k]}
        want = "pass" if sc.meets_slo else (f"fail-{next(iter(over))}" if len(over) == 1
                                            else "fail-several")
        assert _keys(q) == {want}
    elif g == "slo_compare":
        s = slo.SLO.parse(p["slo"])
        gate = {c["name"]: slo.gate_goodput(_bench(c), s) for c in p["configs"]}
        req = {c["name"]: c["request_throughput"] * c["good_share"] for c in p["configs"]}
        assert max(gate, key=gate.get) == max(req, key=req.get)  # both goodputs agree
        assert _keys(q) == {max(req, key=req.get)} and "req/s" in q.explain["en"]
    elif g == "sweep_best":
        s = slo.SLO.parse(p["slo"])
        fn = slo.gate_goodput if p.get("score", "gate") == "gate" else slo.request_goodput
        scores = {pt["value"]: fn(pt["bench"], s) or 0.0 for pt in qdata.recorded_sweep(p)}
        best = max(scores.values())
        winners = [str(v) for v, sc in scores.items() if sc == best]
        assert _keys(q) == ({winners[0]} if best > 0 and len(winners) == 1 else {"none"})
    elif g == "diagnose_constraint":
        assert _keys(q) == {_check_diagnosis(q, p).constraint}
    elif g == "diagnose_knobs":
        d = _check_diagnosis(q, p)
        assert _keys(q) == ((set(d.knobs) & _shown(q)) or {"none"})
    elif g in RUN_CHECKS:
        RUN_CHECKS[g](q, p)
    else:
        raise AssertionError(f"no independent check for generator {g}")


def test_generated_answers_agree_with_course_utils(lesson: str) -> None:
    used = set()
    for q in quiz.load(lesson):
        if q.generator:
            used.add(q.generator)
            check_generated(q)
    assert used <= set(quiz.GENERATORS)


def test_kv_binding_question_reads_the_recorded_lab01_run() -> None:
    """The recorded H200 run (labs/results/h200-2026-11-29b): 1024 x 352 = 360,448 tokens of
    the 1,782,064 the baseline logged; the inline fallback record gives the same answer."""
    q = next(q for q in quiz.load("knobs") if q.id == "kv-binding-lab01")
    assert q.answer == 360_448 and "h200-2026-11-29b" in q.prompt["en"]
    assert "does not bind" in q.explain["en"] and "没有卡住" in q.explain["zh"]
    assert quiz.grade(q, 345_088).correct  # without the block rounding: within 5 %
    assert not quiz.grade(q, 1_782_064).correct
    inline = quiz.expand(_entry("knobs", q.id, {**q.params, "records": [q.params["records"][1]]}))
    assert inline.answer == q.answer and "h200" not in inline.prompt["en"]


def test_every_generator_is_used_and_checked() -> None:
    used = {q.generator for lesson in quiz.LESSONS for q in quiz.load(lesson) if q.generator}
    assert used == set(quiz.GENERATORS)


def test_a_template_uses_every_value_and_no_other_name(tmp_path: Path) -> None:
    """A generator's values fill its item's {name}s; a name it does not compute, a value the
    text leaves out (in either language) or a right key with no choice is refused, naming
    the item."""
    params = {"model": "qwen2.5-7b-instruct", "gpu": "rtx4090", "batch": 1}
    entry = _entry("knobs", "tpot-floor-4090", params)
    q = quiz.expand(entry)
    assert "batch 1," in q.prompt["en"] and "batch 1，" in q.prompt["zh"]
    assert not re.search("[{}]", q.prompt["en"] + q.prompt["zh"] + q.explain["en"])

    def load(item: dict[str, Any]) -> list[quiz.Question]:
        f = tmp_path / f"{len(list(tmp_path.iterdir()))}.yaml"  # load caches by path
        f.write_text(yaml.safe_dump({"lesson": "knobs", "title": {"zh": "题", "en": "t"},
                                     "questions": [item]}, allow_unicode=True))
        return quiz.load("knobs", f)

    assert load(entry)[0].prompt == q.prompt
    en, zh = entry["explain"]["en"], entry["explain"]["zh"]
    bad = [({"en": en + " {nope}", "zh": zh}, r"en placeholders unknown \['nope'\], unused \[\]"),
           ({"en": en.replace("{ms}", "1"), "zh": zh}, r"en placeholders unknown \[\], unused \['ms'\]"),
           ({"en": en, "zh": zh.replace("{gb}", "1")}, r"zh placeholders .* unused \['gb'\]")]
    for explain, msg in bad:
        with pytest.raises(quiz.QuizError, match=r"\(tpot-floor-4090\): " + msg):
            load({**entry, "explain": explain})
    preempt = _entry("knobs", "kv-preempt-lab01", {"run": "labs/results/h200-2026-11-29c/knobs",
                                                   "value": 0.8})
    assert _keys(load(preempt)[0]) == {"preempt"}
    choices = {k: v for k, v in preempt["choices"].items() if k != "preempt"}
    with pytest.raises(quiz.QuizError, match=r"\(kv-preempt-lab01\): no choice keyed preempt"):
        load({**preempt, "choices": choices})
    # a note the generator picks must be written; the ones it does not pick are left out
    raw = yaml.safe_load(quiz.quiz_path("knobs").read_text(encoding="utf-8"))["questions"]
    binding = next(e for e in raw if e["id"] == "kv-binding-lab01")
    q = load(binding)[0]
    assert "does not bind" in q.explain["en"] and " it binds" not in q.explain["en"]
    with pytest.raises(quiz.QuizError, match=r"\(kv-binding-lab01\): no note keyed free"):
        load({**binding, "notes": {k: v for k, v in binding["notes"].items() if k != "free"}})


def test_written_choice_questions_have_no_duplicate_texts(lesson: str) -> None:
    for q in quiz.load(lesson):
        for lang in quiz.LANGS:
            texts = [c.text[lang] for c in q.choices]
            assert len(texts) == len(set(texts)), (q.id, lang)


def test_answers_follow_the_direction_map(monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated answers are read at load time: change the map and the quiz follows."""
    entry = _entry("knobs", "dir-max-num-seqs-itl", {"knob": "max_num_seqs", "axis": "itl"})
    assert _keys(quiz.expand(entry)) == {knobs.KNOBS["max_num_seqs"].itl}
    flipped = dataclasses.replace(knobs.KNOBS["max_num_seqs"], itl="neutral")
    monkeypatch.setitem(knobs.KNOBS, "max_num_seqs", flipped)
    assert _keys(quiz.expand(entry)) == {"neutral"}


def test_data_paths_switch_to_recorded_files(tmp_path: Path) -> None:
    """A series/bench path is used when it exists; the fallback only when it does not."""
    series = tmp_path / "m.jsonl"
    metrics.save_series(_series({"waiting": [0, 0, 0], "running": [10, 12, 11],
                                 "kv_usage": [0.2, 0.3, 0.2]}), series)
    bench = tmp_path / "b.json"
    bench.write_text(json.dumps({**{k: 1 for k in slo.REQUIRED_KEYS}, "p99_ttft_ms": 100,
                                 "p99_tpot_ms": 90}))
    entry = _entry("slo-loop", "diag-kv",
                   {"slo": "ttft:300 tpot:50", "series": str(series), "bench": str(bench)})
    assert _keys(quiz.expand(entry)) == {"decode"}
    missing = {**entry["params"], "bench": [str(tmp_path / "h200-*" / "nope.json"),
                                            {"p99_ttft_ms": 900, "p99_tpot_ms": 20}]}
    assert _keys(quiz.expand({**entry, "params": missing})) == {"prefill"}  # inline, last
    missing["bench"] = str(tmp_path / "h200-*" / "nope.json")
    with pytest.raises(quiz.QuizError, match="bench: none of .*nope.json found"):
        quiz.expand({**entry, "params": missing})
    listed = {**entry["params"], "bench": [str(tmp_path / "h200-*" / "nope.json"), str(bench)]}
    assert _keys(quiz.expand({**entry, "params": listed})) == {"decode"}
    (tmp_path / "h200-2026-11-30").mkdir()
    (tmp_path / "h200-2026-11-30" / "nope.json").write_text(json.dumps(
        {**{k: 1 for k in slo.REQUIRED_KEYS}, "p99_ttft_ms": 900, "p99_tpot_ms": 20}))
    assert _keys(quiz.expand({**entry, "params": listed})) == {"prefill"}  # recorded file wins


def test_recorded_points_are_found_by_knobs(tmp_path: Path) -> None:
    root = tmp_path / "h200-2026-12-01" / "slo"
    for key, seqs, ttft in (("aaa", 64, 4000), ("bbb", 256, 100)):
        d = root / "points" / key
        d.mkdir(parents=True)
        metrics.save_series(_series({"waiting": [0, 0], "running": [5, 6],
                                     "kv_usage": [0.1, 0.1]}), d / "metrics.jsonl")
        (d / "bench.json").write_text(json.dumps(
            {**{k: 1 for k in slo.REQUIRED_KEYS}, "p99_ttft_ms": ttft, "p99_tpot_ms": 80}))
        with (root / "points.jsonl").open("a") as f:
            f.write(json.dumps({"key": key, "knobs": {"max_model_len": 4096,
                                                      "max_num_seqs": seqs}}) + "\n")
    params = {"slo": "ttft:300 tpot:50", "series": {"waiting": [0], "running": [1]},
              "bench": {"p99_ttft_ms": 10, "p99_tpot_ms": 10},
              "point": {"results": str(tmp_path / "h200-*" / "slo"),
                        "knobs": {"max_num_seqs": 256}}}
    rec = qdata.recorded_point(params)
    assert rec and rec["bench"].parent.name == "bbb" and rec["knobs"]["max_num_seqs"] == 256
    entry = _entry("slo-loop", "diag-kv", params)
    assert _keys(quiz.expand(entry)) == {"decode"}  # the recorded point, not the inline data
    params["point"]["knobs"] = {"max_num_seqs": 64}
    assert _keys(quiz.expand(entry)) == {"prefill"}
    params["point"]["knobs"] = {"max_num_seqs": 999}
    assert qdata.recorded_point(params) is None
    assert _keys(quiz.expand(entry)) == {"none"}  # falls back to the inline series/bench


def test_startup_facts_come_from_core_vllm_logs(tmp_path: Path) -> None:
    """kv_tokens reads a recorded log through core.vllm_logs; the params are the fallback."""
    log = ("(EngineCore pid=9) INFO [gpu_worker.py:560] Available KV cache memory: 5.98 GiB\n"
           "(EngineCore pid=9) INFO [kv_cache_utils.py:2177] GPU KV cache size: 112,048 tokens\n"
           "(EngineCore pid=9) INFO [kv_cache_utils.py:2178] Maximum concurrency for 4,096 "
           "tokens per request: 27.36x\n")
    assert not hasattr(quiz, "startup_facts") and not hasattr(qdata, "_LOG_LINES")
    (tmp_path / "serve.log").write_text(log)
    facts, from_log = qdata.logged_memory({"log": str(tmp_path / "serve.log"), "kv_memory_gib": 1})
    assert from_log and facts == {"kv_memory_gib": 5.98, "kv_tokens": 112048.0,
                                  "concurrency": 27.36, "concurrency_len": 4096.0}
    logs = [str(tmp_path / "nope.log"), str(tmp_path / "serve.log")]
    q = quiz.expand(_entry("knobs", "kv-tokens-h200",
                           {"model": "qwen2.5-7b-instruct", "kv_memory_gib": 99, "log": logs}))
    assert q.answer == capacity.load_model().kv_tokens(5.98)
    assert quiz.grade(q, 112048).correct and "112,048 tokens" in q.explain["en"]
    missing = {"model": "qwen2.5-7b-instruct", "kv_memory_gib": 99, "log": "nope/*.log"}
    q = quiz.expand(_entry("knobs", "kv-tokens-h200", missing))
    assert q.answer == capacity.load_model().kv_tokens(99)


def test_synthetic_series_uses_real_metric_names() -> None:
    snaps = qdata.synthetic_series({"waiting": [1, 2], "running": [3, 4], "kv_usage": [0.5, 0.6],
                                   "preemptions": [0, 5]})
    assert snaps[1].gauge(metrics.WAITING) == 2 and snaps[1].gauge(metrics.KV_USAGE) == 0.6
    assert metrics.summarize(snaps).preemptions == 5


# ---------------------------------------------------------------- static renderer

def _data(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" class="cu-quiz-data">(.*?)</script>', page,
                  re.S)
    assert m
    return json.loads(m.group(1).replace("<\\/", "</"))


def test_html_is_deterministic_self_contained_and_matches_grade(lesson: str) -> None:
    for lang in quiz.LANGS:
        page = quiz.html(lesson, lang)
        assert page == quiz.html(lesson, lang)
        qs = quiz.load(lesson)
        ids = re.findall(r'<li class="cu-q" id="([^"]+)"', page)
        assert ids == [f"q-{lesson}-{lang}-{n}" for n in range(1, len(qs) + 1)]
        assert not re.search(r'(src|href)=["\']?(https?:)?//', page)
        assert "<script>" in page and "<style>" in page
        assert page.count("<script") == 2  # the data and the grader, nothing loaded
        data = _data(page)
        assert data["strings"] == quiz.STRINGS[lang]
        for dom, q in zip(ids, qs, strict=True):
            rec = data["questions"][dom]
            assert rec["explain"] == q.explain[lang] and rec["expected"] == q.expected(lang)
            if q.type == "numeric":
                assert (rec["answer"], rec["abs_tol"], rec["rel_tol"]) == \
                    (q.answer, q.abs_tol, q.rel_tol)
            else:
                assert set(rec["correct"]) == q.correct_ids


def test_html_escapes_text() -> None:
    q = _q(**{**SINGLE, "prompt": {"zh": "<b>题</b> `x<y`", "en": "<script>alert(1)</script>"}})
    page = quiz.html("knobs", "en", questions=[q])
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert "<code>x&lt;y</code>" in quiz.html("knobs", "zh", questions=[q])


NODE = shutil.which("node")


def test_browser_grader_matches_python() -> None:
    """quiz.js's grade() gives the same verdicts and texts as quiz.grade() (node is needed
    by `make book` too, so it is there)."""
    assert NODE is not None, "node not on PATH"
    cases = []
    qs = [q for lesson in quiz.LESSONS for q in quiz.load(lesson)]
    qs += [_num(0.3, abs=0.1), _num(200, rel=0.01), _num(100, abs=1, rel=0.05), _q(**MULTI)]
    for q in qs:
        if q.type == "numeric":
            a = q.answer
            answers: list[Any] = [str(a), f"{a:,}", str(a * 1.02), str(a + (q.abs_tol or 0)),
                                  "", "abc", "1e999", str(-a), " 1 2 ", "12ms"]
        else:
            ids = [c.id for c in q.choices]
            answers = [sorted(q.correct_ids), [ids[0]], [], ids, [ids[-1], ids[0]]]
            if q.type == "single":
                answers = [a for a in answers if len(a) <= 1]
        for lang in quiz.LANGS:
            rec = {"type": q.type, "explain": q.explain[lang], "expected": q.expected(lang),
                   "answer": q.answer, "abs_tol": q.abs_tol, "rel_tol": q.rel_tol,
                   "correct": sorted(q.correct_ids)}
            for a in answers:
                r = quiz.grade(q, a, lang)
                cases.append({"q": rec, "a": a, "lang": lang, "ok": r.correct,
                              "text": r.error or r.explanation, "err": not r.valid})
    js = qrender._asset("quiz.js")
    harness = ("const document = {currentScript: null, querySelectorAll: () => []};"
               "const window = {};" + js +
               "const S = " + json.dumps(quiz.STRINGS, ensure_ascii=False) + ";"
               "const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
               "const bad = [];"
               "for (const c of cases) { const r = window.cuQuiz.grade(c.q, c.a, S[c.lang]);"
               "  const text = r.error || r.text;"
               "  if (!!r.error !== c.err || (!r.error && r.correct !== c.ok) || text !== c.text)"
               "    bad.push({c, r}); }"
               "console.log(JSON.stringify({n: cases.length, bad: bad.slice(0, 5)}));")
    out = subprocess.run([NODE, "-e", harness], input=json.dumps(cases), capture_output=True,
                         text=True, timeout=60, check=True)
    res = json.loads(out.stdout)
    assert res["n"] == len(cases) > 300
    assert res["bad"] == []


# ---------------------------------------------------------------- live renderer, show()

def test_widgets_grade_like_python() -> None:
    qs = quiz.load("knobs")
    box = quiz.widget("knobs", "zh")
    assert len(box.children) == len(qs)
    for q, item in zip(qs, box.children, strict=True):
        _, inp, button, out = item.children
        if q.type == "single":
            inp.value = sorted(q.correct_ids)[0]
        elif q.type == "multiple":
            for cb, c in zip(inp.children, q.choices, strict=True):
                cb.value = c.correct
        else:
            inp.value = q.answer
        button.click()
        assert 'class="cu-ok"' in out.value and out.value.count("正确。") == 1, q.id
    first = box.children[0]
    for cb in first.children[1].children:
        cb.value = False
    first.children[2].click()
    assert 'class="cu-err"' in first.children[3].value


def test_show_static_unless_live(monkeypatch: pytest.MonkeyPatch) -> None:
    shown: list[Any] = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    monkeypatch.delenv("COURSE_UTILS_QUIZ_LIVE", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert quiz.live_frontend() is False  # no kernel here
    quiz.show("slo-loop", "en")
    assert shown[-1].data == quiz.html("slo-loop", "en")
    quiz.show("slo-loop", "zh", live=True)
    bundle = shown[-1]._repr_mimebundle_()
    assert bundle["text/html"] == quiz.html("slo-loop", "zh")
    assert "application/vnd.jupyter.widget-view+json" in bundle
    monkeypatch.setenv("COURSE_UTILS_QUIZ_LIVE", "1")
    assert quiz.live_frontend() is True
    monkeypatch.setenv("COURSE_UTILS_QUIZ_LIVE", "0")
    monkeypatch.setenv("JPY_SESSION_NAME", "/x.ipynb")
    assert quiz.live_frontend() is False


# ---------------------------------------------------------------- CLI

def _run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    quiz.add_cli(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(list(argv))
    rc = args.func(args)
    return rc, capsys.readouterr().out


def test_cli_json_and_text(capsys: pytest.CaptureFixture[str], lesson: str) -> None:
    rc, out = _run_cli(capsys, "quiz", "--lesson", lesson, "--lang", "zh", "--format", "json")
    doc = json.loads(out)
    assert rc == 0 and doc["lesson"] == lesson and doc["lang"] == "zh"
    assert [q["id"] for q in doc["questions"]] == [q.id for q in quiz.load(lesson)]
    assert all("expected" in q and "explain" in q for q in doc["questions"])
    rc, out = _run_cli(capsys, "quiz", "--lesson", lesson, "--format", "text")
    assert rc == 0 and "[s9-1] (§9.1," in out and "-> " in out


def test_cli_via_main(capsys: pytest.CaptureFixture[str]) -> None:
    from course_utils import __main__ as cli

    assert cli.main(["quiz", "--lesson", "knobs", "--lang", "en", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["questions"]


def test_fallback_data_gives_the_recorded_answer(lesson: str) -> None:
    """Entries reading a recorded run (labs/results) also name data that ships with the
    package or inline; without the recorded run they give the same answer."""
    def recorded(c: Any) -> bool:
        return isinstance(c, str) and c.startswith("labs/results")

    raw = yaml.safe_load(quiz.quiz_path(lesson).read_text(encoding="utf-8"))["questions"]
    checked = 0
    for entry in raw:
        if entry.get("generator") in RUN_CHECKS:  # read only the recorded run, by design
            continue
        p = dict(entry.get("params") or {})
        if not ({"point", "results"} & set(p) or any(
                isinstance(v, list) and any(map(recorded, v)) for v in p.values())):
            continue
        fallback = {k: ([c for c in v if not recorded(c)] if isinstance(v, list)
                        and k in ("series", "bench", "log", "records", "run") else v)
                    for k, v in p.items() if k not in ("point", "results")}
        with_run, without = quiz.expand(entry), quiz.expand({**entry, "params": fallback})
        assert _keys(with_run) == _keys(without), entry["id"]
        checked += 1
    assert checked >= (5 if lesson == "slo-loop" else 0)


def test_same_batch_spread_question_reads_the_recorded_run() -> None:
    """h200-2026-11-29c/knobs: over the same seconds (10-60 s) before either KV cache
    filled, 0.94 generated 21.6 % less; the inline fallback numbers give the same question
    and answer."""
    q = next(q for q in quiz.load("knobs") if q.id == "same-batch-spread-lab01")
    assert "h200-2026-11-29c" in q.prompt["en"] and "24,420 vs 19,144 tok/s" in q.prompt["en"]
    assert "seconds 10-60" in q.prompt["en"]
    assert "-22%" in q.explain["en"] and "-14%" in q.explain["en"]
    assert "0.8 16% faster" in q.explain["en"]  # 19,034 / 16,389 - 1
    # the repeat it cites: the same sweep twice, 0.8 at 15,584 and 17,424 tok/s
    assert "h200-2026-11-29b/knobs-repeat" in q.explain["en"] and "12% apart" in q.explain["en"]
    assert "16%" in next(c for c in q.choices if c.key == "keep-base").text["en"]
    ids = {c.key: c.id for c in q.choices}
    assert quiz.grade(q, ids["spread"]).correct
    assert not any(quiz.grade(q, ids[k]).correct for k in ("keep-base", "preempt", "no-bind"))
    fallback = quiz.expand(_entry("knobs", q.id, {**q.params, "run": [q.params["run"][1]]}))
    assert _keys(fallback) == _keys(q) == {"spread"}
    assert fallback.explain == q.explain and "h200" not in fallback.prompt["en"]


# ---------------------------------------------------------------- corrected facts, pinned

def _item(lesson: str, qid: str) -> quiz.Question:
    return next(q for q in quiz.load(lesson) if q.id == qid)


def test_gmu_one_is_refused_at_start_up() -> None:
    """vLLM 0.26.0 v1/worker/utils.py request_memory: free memory < total x utilization
    raises at start-up; the quiz keys that, not a later OOM."""
    q = _item("knobs", "pit-gmu-one")
    right = next(c for c in q.choices if c.correct)
    assert "refused" in right.text["en"] and "启动被拒" in right.text["zh"]
    assert "less than desired GPU memory utilization" in q.explain["en"]
    assert "vllm/v1/worker/utils.py" in q.explain["zh"]


def test_recommend_ttft_list_is_the_maps() -> None:
    want = {"gpu_memory_utilization", "kv_cache_dtype", "max_num_seqs",
            "max_num_batched_tokens", "enable_prefix_caching", "tensor_parallel_size"}
    assert {k.name for k in knobs.recommend("ttft")} == want
    q = _item("knobs", "s9-1")
    assert "lists 6:" in q.explain["en"] and "一共列出 6 个" in q.explain["zh"]


@pytest.mark.parametrize(("lesson", "qid", "keys"), [
    ("slo-loop", "s9-2", {"none"}),
    ("slo-loop", "diag-decode-knobs", {"max_num_seqs", "max_num_batched_tokens"}),
    ("slo-loop", "diag-h200-baseline-knobs", {"max_num_seqs"}),
    ("slo-loop", "knobs-for-prefill", {"max_num_batched_tokens", "enable_prefix_caching"}),
])
def test_knob_sets_of_the_diagnosis_items(lesson: str, qid: str, keys: set[str]) -> None:
    q = _item(lesson, qid)
    assert _keys(q) == keys
    shown = _shown(q)
    assert not {"enable_chunked_prefill", "speculative_config"} & _keys(q)
    assert "max_model_len" not in shown or "max_model_len" not in _keys(q)


def test_errata_are_gone_from_every_explanation() -> None:
    for lesson in quiz.LESSONS:
        for q in quiz.load(lesson):
            for lg in quiz.LANGS:
                text = q.explain[lg] + q.prompt[lg]
                assert "authority on its default" not in text and "权威来源" not in text, q.id
                assert "first decode step" not in q.explain[lg] or q.type != "single" or \
                    "never part of TTFT" in q.explain[lg], q.id
                assert "试试" not in text and "(lower)" not in text, q.id
                assert "more sequences fit" not in text, q.id
            assert "tok/s" not in q.explain["en"] or q.generator in (
                "tpot_floor", "same_batch_spread"), q.id  # goodput is in req/s


def test_written_distractors_name_their_mistake(lesson: str) -> None:
    """In a written choice item, each wrong option has a comment naming the mistake it
    stands for (the generators' options carry theirs in the code)."""
    text = quiz.quiz_path(lesson).read_text(encoding="utf-8")
    for block in text.split("\n  - id: ")[1:]:
        if "\n    choices:" not in block:
            continue
        choices = block.split("\n    choices:", 1)[1].split("\n    explain:", 1)[0]
        wrong = choices.count("- text") - choices.count("correct: true")
        comments = len(re.findall(r"^\s+# ", choices, re.M))
        assert comments >= wrong, (block.split("\n", 1)[0], comments, wrong)


def test_no_space_after_chinese_punctuation() -> None:
    """YAML folds leave no space after 。，；：in Chinese texts (the renderer keeps them)."""
    for lesson in quiz.LESSONS:
        for q in quiz.load(lesson):
            texts = [q.prompt["zh"], q.explain["zh"], *(c.text["zh"] for c in q.choices)]
            assert not any(re.search(r"[。，；：？！] ", t) for t in texts), q.id


def test_zh_explanations_space_latin_and_chinese() -> None:
    bad = re.compile(r"[\u4e00-\u9fff][A-Za-z0-9`]|[A-Za-z0-9`][\u4e00-\u9fff]")
    for lesson in quiz.LESSONS:
        for q in quiz.load(lesson):
            if q.generator in (None, "kv_tokens", "kv_bytes_per_token", "max_concurrency",
                               "kv_binding", "tpot_floor", "request_goodput", "p99_gate",
                               "sweep_best", "goodput_args", "knob_validate"):
                continue  # written or older texts: checked by eye
            hits = bad.findall(q.explain["zh"])
            assert not hits, (q.id, hits[:5])


def test_default_cap_reads_the_logged_cap() -> None:
    """60 req/s x 5 s = 300 in flight: over the declared 128 and the 4090's 256, under the
    1024 an H200 logs, which is the cap that runs."""
    q = _item("knobs", "default-cap-h200")
    assert "get_batch_defaults" in q.explain["en"] and "for tests" in q.explain["en"]
    assert "max_num_seqs=1024" in q.prompt["en"] and "RTX 4090" in q.prompt["zh"]
    right = next(c for c in q.choices if c.correct)
    assert right.key == "fits" and "300" in right.text["en"] and "1024" in right.text["zh"]


def test_kv_gain_predicts_the_logged_size() -> None:
    """0.8 -> 0.9 on the H200: + 0.1 x 139.8 GiB of 57,344-byte tokens; vLLM logged 2,044,928;
    scaling the tokens by 0.9 / 0.8 is outside the tolerance."""
    q = _item("knobs", "kv-gain-gmu")
    assert quiz.grade(q, 2_044_928).correct and not quiz.grade(q, 1_782_064 * 0.9 / 0.8).correct
    assert "1,782,064" in q.prompt["en"] and "57,344" in q.prompt["zh"]


def test_no_text_says_gmu_one_ooms_at_start_up() -> None:
    """0.26.0 refuses start-up when free memory is below the requested share (pit-gmu-one);
    no quiz text may say it starts and runs out of memory at start-up."""
    for lesson in quiz.LESSONS:
        for q in quiz.load(lesson):
            texts = [q.prompt[lg] + q.explain[lg] for lg in quiz.LANGS]
            assert not any(re.search(r"start-up OOM|启动时 OOM", t) for t in texts), q.id


def test_direction_items_state_their_condition() -> None:
    """An effect the map makes conditional (a `when`, or a batch-shape knob, whose effect
    needs the batch to change) is asked with the condition given."""
    for q in quiz.load("knobs"):
        if q.generator == "knob_direction":
            k = knobs.KNOBS[q.params["knob"]]
            if k.condition(q.params["axis"]) or k.group == "batch_shape":
                given = q.params.get("given") or {}
                assert all(given.get(lg) and given[lg] in q.prompt[lg] for lg in quiz.LANGS), q.id


def test_reasoning_items_per_lesson_from_recorded_runs() -> None:
    for lesson in quiz.LESSONS:
        qs = [q for q in quiz.load(lesson) if q.generator in RUN_CHECKS]
        assert len(qs) >= 3, lesson
        lab03 = Path(scaleout.RUN_DIR).name  # the lab 03 run (the fake fixture until collected)
        for q in qs:
            named = str((q.params or {}).get("run") or (q.params or {}).get("loop") or "")
            run = {"replicas_plan": lab03}.get(
                q.generator, named.split("/")[2] if named else "h200-2026-11-29")
            assert run in q.prompt["en"] and run in q.prompt["zh"]


def test_choice_lengths_do_not_give_the_key_away() -> None:
    """In single-choice items the keyed option is not much longer than every other one."""
    for lesson in quiz.LESSONS:
        for q in quiz.load(lesson):
            if q.type != "single" or len(q.choices) < 3:
                continue
            for lg in quiz.LANGS:
                lens = {c.id: len(c.text[lg]) for c in q.choices}
                key = next(iter(q.correct_ids))
                others = [v for k, v in lens.items() if k != key]
                assert lens[key] <= 1.5 * max(others), (q.id, lg, lens)


def test_run_generators_refuse_data_that_does_not_support_the_key(tmp_path: Path) -> None:
    from course_utils.quiz import gen_runs

    with pytest.raises(quiz.QuizError, match="more than half"):
        gen_runs.ttft_key({"queue": 40.0, "prefill": 40.0, "outside": 20.0, "ttft": 100.0})
    assert gen_runs.ttft_key({"queue": 5.0, "prefill": 40.0, "outside": 55.0,
                              "ttft": 100.0}) == "outside"
    knee = tmp_path / "knee" / "rate-40"  # one fresh rate only: nothing was replayed
    knee.mkdir(parents=True)
    (knee / "bench.json").write_text(json.dumps({"p99_ttft_ms": 100.0}))
    metrics.save_series(_series({"waiting": [0, 0], "running": [1, 1]}), knee / "metrics.jsonl")
    with pytest.raises(quiz.QuizError, match="replayed and fresh"):
        quiz.expand({"id": "r", "generator": "prefix_replay",
                     "params": {"knee": str(tmp_path / "knee")}})
    with pytest.raises(quiz.QuizError, match="not found"):
        quiz.expand({"id": "l", "generator": "littles_law",
                     "params": {"point": {"results": str(tmp_path / "nope"),
                                          "knobs": {"max_num_seqs": 1}}}})
    # a loop that met the SLO (decode at 6 req/s) did not end past the knee
    with pytest.raises(quiz.QuizError, match="ended meets_slo, not past the knee"):
        quiz.expand({"id": "e", "generator": "loop_ending",
                     "params": {"run": "labs/results/h200-2026-11-30/decode"}})
    # the knee loop ended past the knee but kept 16384: "kept nothing" would be false
    with pytest.raises(quiz.QuizError, match="kept a value"):
        quiz.expand({"id": "k", "generator": "loop_ending",
                     "params": {"run": "labs/results/h200-2026-12-01b/knee"}})


def test_budget_unused_asks_why_not_more_budget() -> None:
    """The prefill loop: a step carried 458 of 8,192 tokens; the item asks why a bigger budget
    cannot help, not the loop's ending again."""
    q = _item("slo-loop", "budget-unused-prefill-2026-12-01c")
    assert "458" in q.prompt["en"] and "8,192" in q.prompt["zh"] and _keys(q) == {"unused"}
    ending = {c.text["en"] for c in _item("slo-loop", "loop-ending-decode12").choices}
    assert not ending & {c.text["en"] for c in q.choices}


def test_loop_ending_explains_from_the_runs_own_ending() -> None:
    """The share and the named knobs come from keep.loop_outcome on the run."""
    d = _item("slo-loop", "loop-ending-decode12")
    assert "12%" in d.explain["en"] and "`quantization`" in d.explain["en"]


@pytest.mark.parametrize("value", [None, True, {"en": "one"}, {"en": "a", "zh": 1}])
def test_a_generator_value_is_a_text_a_number_notes_or_both_languages(
        monkeypatch: pytest.MonkeyPatch, value: Any) -> None:
    from course_utils.quiz import engine

    monkeypatch.setitem(engine.GENERATORS, "_bad_value", lambda p: {
        "type": "numeric", "answer": 1, "values": {"x": value}})
    entry = {"id": "bad", "generator": "_bad_value", "params": {},
             "prompt": {"en": "{x}?", "zh": "{x}？"}, "explain": {"en": "e", "zh": "解"}}
    with pytest.raises(quiz.QuizError, match=r"value 'x' is .*not a text, a number"):
        quiz.expand(entry)
