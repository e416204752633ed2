"""core.texts: lab verdicts, the knee and tune's stop reasons in the page's language."""

from __future__ import annotations

import re

import pytest

from course_utils.core import keep, knobs, texts
from tests.served import served

CJK = re.compile(r"[\u4e00-\u9fff]")
LATIN_WORD = re.compile(r"\b(?:the|baseline|keep|revert|knee|between|gave|but|not|within)\b",
                        re.IGNORECASE)


def _rec(value, tok_s, p99=1.0, **kw):
    return {"status": "ok", "value": value, "output_tok_s": tok_s, "latency_p99_s": p99, **kw}


def _zh_only(text: str) -> None:
    assert CJK.search(text), text
    assert not LATIN_WORD.search(text), text


def test_keep_in_both_languages() -> None:
    v = keep.verdict([_rec(0.8, 100.0), _rec(0.9, 120.0)], baseline=0.8)
    assert v["decision"] == "keep"
    assert texts.verdict(v, "en", knob="gpu_memory_utilization") == (
        "KEEP gpu_memory_utilization=0.9: " + v["why"])
    zh = texts.verdict(v, "zh", knob="gpu_memory_utilization")
    assert zh.startswith("保留 gpu_memory_utilization=0.9：") and "+20.0%" in zh
    _zh_only(zh.split("：", 1)[1])


def test_recheck_kv_and_spread_render_their_numbers_in_zh() -> None:
    recs = [_rec(0.8, 100.0), _rec(0.9, 134.0)]
    kv = {"binding": False, "demand_tokens": 81_920, "kv_tokens": 2_150_000}
    v = keep.verdict(recs, baseline=0.8, kv=kv)
    zh = texts.verdict(v, "zh")
    assert zh.startswith("先复测 0.8：") and "81,920" in zh and "2,150,000" in zh
    assert "+34.0%" in zh
    v2 = keep.verdict(recs, baseline=0.8, spread={"gaps": {0.9: 0.25}})
    zh2 = texts.verdict(v2, "zh")
    assert "+25.0%" in zh2 and "波动" in zh2
    _zh_only(zh2.split("：", 1)[1])


def test_revert_cases_in_zh() -> None:
    small = keep.verdict([_rec(1, 100.0), _rec(2, 102.0)], baseline=1)
    assert "不到 5%" in texts.verdict(small, "zh")
    fastest = keep.verdict([_rec(1, 100.0), _rec(2, 90.0)], baseline=1)
    assert "基线本身" in texts.verdict(fastest, "zh")
    miss = keep.verdict([_rec(1, 100.0, p99=9.0)], baseline=1, p99_latency_slo_s=5)
    zh = texts.verdict(miss, "zh")
    assert "p99 延迟 9.0 s > 5 s" in zh and "SLO" in zh
    recorded = {"decision": "revert", "value": 0.8, "gain": 0.0,
                "why": "no other setting meets the SLO and beats the baseline"}
    assert texts.verdict(recorded, "zh") == "回退到基线 0.8：没有别的设置既满足 SLO、又比基线快"
    none = keep.verdict([], baseline=1)
    assert texts.verdict(none, "zh") == "无法判断：基线 1 没有一次成功的测量，无法比较"


def test_judge_result_is_accepted_and_bad_input_is_refused() -> None:
    v = keep.verdict([_rec(1, 100.0), _rec(2, 120.0)], baseline=1)
    assert texts.verdict({"verdict": v}, "zh") == texts.verdict(v, "zh")
    with pytest.raises(ValueError, match="lang"):
        texts.verdict(v, "fr")
    with pytest.raises(ValueError, match="decision"):
        texts.verdict({"value": 1}, "en")


def _knee_rec(rate, tput, meets, **kw):
    return served(rate=str(rate), score={"request_throughput": tput, "meets_slo": meets}, **kw)


def test_knee_between_two_rates_and_invalid_rates() -> None:
    recs = [_knee_rec(40, 39.5, True), _knee_rec(50, 49.0, True), _knee_rec(55, 44.0, False),
            _knee_rec(60, 59.0, True, valid=False, issues=[
                "prefix cache hit rate 97% on a workload without a shared prefix: prompts "
                "were replayed, results are inflated"])]
    k = keep.pick_knee(recs)
    assert texts.knee(k, "en") == k["why"]
    zh = texts.knee(k, "zh")
    assert "拐点在 50 req/s" in zh and "55 req/s" in zh and "拐点扫描" in zh
    assert "忽略了无效的速率 60" in zh and "prefix cache 命中率 97%" in zh
    _zh_only(zh)


def test_knee_from_loop_points_in_zh() -> None:
    recs = [_knee_rec(40, 39.5, True)]
    pts = [served(k, v, workload={"request_rate": 55.0}, score={"meets_slo": False})
           for k, v in (("baseline", None), ("max_num_seqs", 256))]
    k = keep.pick_knee(recs, points=pts)
    zh = texts.knee(k, "zh")
    assert "闭环的全部 2 个有效点（基线、max_num_seqs=256" in zh
    _zh_only(zh)


def test_knee_edges_in_zh() -> None:
    assert "拐点还在更高处" in texts.knee(keep.pick_knee([_knee_rec(40, 39.5, True)]), "zh")
    assert "没有一个有效的测试速率" in texts.knee(keep.pick_knee([_knee_rec(40, 20, False)]),
                                                     "zh")


@pytest.mark.parametrize(("reason", "expected"), [
    ("plateau: no knob the diagnosis names (max_num_seqs, max_num_batched_tokens) has "
     "candidates left that help", "到平台了：诊断点名的旋钮（max_num_seqs, max_num_batched_tokens）"),
    ("diagnosis 'none' (none) names no engine knob: at the limit",
     "诊断「SLO 内没有约束在卡：调参到此为止」没有点名任何引擎旋钮：已经到头了"),
    ("diagnosis 'queue_replicas' (queue) names no engine knob: add replicas / lower the rate, "
     "not a tuning problem", "加副本或降低到达率"),
    ("GPU budget: 2.5 min left < 3.1 min per point", "只剩 2.5 分钟，少于每个点约 3.1 分钟"),
    ("max_steps (6) reached", "已走满 max_steps（6 步）"),
])
def test_stop_reasons_in_zh(reason: str, expected: str) -> None:
    zh = texts.stop_reason({"stop_reason": reason}, "zh")
    assert expected in zh
    assert texts.stop_reason(reason, "en") == reason
    _zh_only(zh)


def test_unknown_issue_and_decision() -> None:
    assert texts.issue("something new", "zh") == "something new"
    with pytest.raises(ValueError, match="unknown decision"):
        texts.decision_word("maybe")


@pytest.mark.parametrize(
    ("reason", "meets", "outcome"),
    [
        ("plateau: no knob the diagnosis names (max_num_seqs) has candidates left", False,
         "past_knee"),
        ("diagnosis 'queue_replicas' (queue) names no engine knob: add replicas", False,
         "past_knee"),
        ("diagnosis 'none' (none) names no engine knob: at the limit", True, "meets_slo"),
        ("GPU budget: 1.0 min left < 3.0 min per point", False, "unfinished"),
        ("max_steps (6) reached", False, "unfinished"),
        ("GPU budget: 1.0 min left < 3.0 min per point", True, "meets_slo"),
        ("baseline failed: server exited", None, "no_result"),
    ],
)
def test_loop_outcome_in_both_languages(reason: str, meets: bool | None, outcome: str) -> None:
    o = keep.loop_outcome(reason, meets, 1.6, 12.0, ["max_num_seqs", "max_num_batched_tokens"])
    assert o["outcome"] == outcome
    assert texts.loop_outcome(o, "en") == o["why"]
    zh = texts.loop_outcome(o, "zh")
    assert CJK.search(zh) and zh != o["why"]
    if outcome in ("past_knee", "unfinished"):
        assert o["goodput_share"] == pytest.approx(1.6 / 12.0, abs=1e-4)
        assert "13%" in o["why"] and "13%" in zh
    if outcome == "past_knee":
        assert "max_num_seqs, max_num_batched_tokens" in o["why"]
        assert "max_num_seqs、max_num_batched_tokens" in zh


def test_loop_outcome_without_a_finite_rate_has_no_share() -> None:
    o = keep.loop_outcome("plateau: x", False, 3.0, float("inf"))
    assert o["goodput_share"] is None and "offered rate" not in o["why"]


def test_a_plateau_with_nothing_tried_concludes_nothing() -> None:
    o = keep.loop_outcome("plateau: no knob the diagnosis names (kv_cache_dtype) has candidates",
                          False, 2.0, 10.0, [], ["kv_cache_dtype"])
    assert o["outcome"] == "untested" and "nothing is concluded" in o["why"]
    assert "kv_cache_dtype" in texts.loop_outcome(o, "zh")


def test_past_the_knee_names_the_knobs_it_did_not_try() -> None:
    o = keep.loop_outcome("plateau: x", False, 1.6, 12.0, ["max_num_seqs"], ["quantization"])
    assert o["outcome"] == "past_knee" and o["why"].endswith("not tried: quantization")
    assert texts.loop_outcome(o, "zh").endswith("没试的：quantization")


def test_a_named_move_already_in_effect_is_not_untried() -> None:
    """Prefill's leaf names enable_prefix_caching (enable): on by vLLM's default, so a loop
    that did not sweep it did not leave it untried; turned off, it is untried."""
    moves = {"max_num_batched_tokens": "raise", "enable_prefix_caching": "enable"}
    named = list(moves)
    o = keep.loop_outcome("plateau: x", False, 6.25, 80.0, ["max_num_batched_tokens"], named,
                          moves=moves, kept_knobs={"max_num_batched_tokens": 16384})
    assert o["untried"] == [] and o["in_effect"] == ["enable_prefix_caching"]
    assert o["why"].endswith("already on: enable_prefix_caching")
    assert texts.loop_outcome(o, "zh").endswith("本来就已开启：enable_prefix_caching")
    off = keep.loop_outcome("plateau: x", False, 6.25, 80.0, ["max_num_batched_tokens"], named,
                            moves=moves, kept_knobs={"enable_prefix_caching": False})
    assert off["untried"] == ["enable_prefix_caching"] and off["in_effect"] == []
    # without the moves nothing is assumed
    bare = keep.loop_outcome("plateau: x", False, 6.25, 80.0, ["max_num_batched_tokens"], named)
    assert bare["untried"] == ["enable_prefix_caching"]
    assert knobs.in_effect("kv_cache_dtype", "fp8", "fp8_e4m3")
    assert not knobs.in_effect("kv_cache_dtype", "fp8") and not knobs.in_effect(
        "max_num_seqs", "raise", 1024)
