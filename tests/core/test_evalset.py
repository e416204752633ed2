"""The lab eval set and its deterministic scorer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils.core import evalset

ROOT = Path(__file__).resolve().parents[2]
EVAL = ROOT / "labs" / "data" / "small_eval.jsonl"


def _item(answer: str, *aliases: str, lang: str = "en") -> evalset.Item:
    return evalset.Item(id="x", lang=lang, question="q", answer=answer, aliases=aliases)


def test_shipped_set_is_small_mixed_and_self_consistent() -> None:
    items = evalset.load_items(EVAL)
    assert 40 <= len(items) <= 60
    langs = {it.lang for it in items}
    assert langs == {"zh", "en"}
    assert min(sum(it.lang == lang for it in items) for lang in langs) >= 15
    # every item is answered correctly by its own answer and by each alias
    for it in items:
        assert evalset.check(it, it.answer), it.id
        for alias in it.aliases:
            assert evalset.check(it, alias), (it.id, alias)
    assert evalset.score(items, [it.answer for it in items]) == {
        "accuracy": 1.0,
        "n": len(items),
        "correct": len(items),
    }


@pytest.mark.parametrize(
    ("answer", "aliases", "output", "ok"),
    [
        ("Paris", (), "  paris.  ", True),
        ("Paris", (), "The capital of France is Paris.", True),
        ("Paris", (), "Lyon", False),
        ("Paris", (), "Parisian food", False),  # whole word only
        ("Au", (), "AU", True),
        ("42", (), "17 + 25 = 42", True),
        ("42", (), "42.0", True),
        ("42", (), "The answer is 24", False),
        ("4000", (), "4,000 g", True),
        ("3.14", (), "π ≈ 3.14", True),
        ("3.14", (), "3.1416", False),
        ("6", ("six",), "A hexagon has six sides.", True),
        ("carbon dioxide", ("CO2",), "CO₂", True),  # NFKC folds the subscript
        ("北京", ("Beijing",), "中国的首都是北京。", True),
        ("北京", ("Beijing",), "上海", False),
        ("100", (), "１００", True),  # full-width digits
        ("250", (), "250\n(2.5 m × 100)", True),  # only the first line counts
        ("250", (), "\n\n2.5", False),
    ],
)
def test_check_rules(answer: str, aliases: tuple[str, ...], output: str, ok: bool) -> None:
    assert evalset.check(_item(answer, *aliases), output) is ok


def test_missing_or_empty_outputs_are_wrong() -> None:
    it = _item("Paris")
    assert evalset.check(it, None) is False
    assert evalset.check(it, "   \n ") is False


def test_score_counts_and_alignment() -> None:
    items = [
        evalset.Item(id="a", lang="en", question="q", answer="1"),
        evalset.Item(id="b", lang="en", question="q", answer="Tokyo"),
        evalset.Item(id="c", lang="zh", question="q", answer="首尔"),
    ]
    result = evalset.score(items, ["1", "Kyoto", "首尔"])
    assert result == {"accuracy": pytest.approx(2 / 3), "n": 3, "correct": 2}
    # keyed by id: a missing key is a wrong answer
    assert evalset.score(items, {"a": "1", "b": "tokyo"})["correct"] == 2
    with pytest.raises(ValueError):
        evalset.score(items, ["1"])
    # deterministic: same inputs, same result
    assert evalset.score(items, ["1", "Kyoto", "首尔"]) == result


def test_messages_follow_the_item_language() -> None:
    zh = evalset.messages(_item("北京", lang="zh"))
    en = evalset.messages(_item("Paris"))
    assert [m["role"] for m in zh] == ["system", "user"]
    assert zh[0]["content"] != en[0]["content"]
    assert "阿拉伯数字" in zh[0]["content"]


def test_load_items_rejects_bad_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "lang": "en", "question": "q"}) + "\n")
    with pytest.raises(ValueError, match="answer"):
        evalset.load_items(bad)
    dup = tmp_path / "dup.jsonl"
    row = json.dumps({"id": "a", "lang": "en", "question": "q", "answer": "1"})
    dup.write_text(row + "\n" + row + "\n")
    with pytest.raises(ValueError, match="repeated"):
        evalset.load_items(dup)
