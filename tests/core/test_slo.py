import json

import pytest

from course_utils.core import slo
from tests.core.benchjson import make_result


def test_parse_the_goodput_syntax():
    s = slo.SLO.parse("ttft:300 tpot:50")
    assert (s.ttft_ms, s.tpot_ms, s.itl_ms) == (300, 50, None)
    assert s.goodput_args() == ["ttft:300", "tpot:50"]
    s2 = slo.SLO.parse("ttft:300, itl:40 rate:20")
    assert s2.rate == 20 and s2.goodput_args() == ["ttft:300"]  # itl is not a --goodput key


@pytest.mark.parametrize("text, msg", [
    ("", "empty SLO"), ("ttft=300", "KEY:VALUE"), ("latency:300", "unknown SLO metric"),
    ("ttft:fast", "not a number"), ("ttft:-5", "positive"), ("ttft:300 ttft:200", "twice"),
    ("rate:20", "at least one"), ("ttft:nan", "positive"),
])
def test_bad_slo_strings(text, msg):
    with pytest.raises(slo.SLOError) as e:
        slo.SLO.parse(text)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_bench_result_rejects_what_is_not_vllm(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"throughput": 3}))
    with pytest.raises(slo.BenchResultError, match="missing duration"):
        slo.BenchResult.from_json(p)
    p.write_text("{not json")
    with pytest.raises(slo.BenchResultError, match="not JSON"):
        slo.BenchResult.from_json(p)
    with pytest.raises(slo.BenchResultError, match="no such file"):
        slo.BenchResult.from_json(tmp_path / "missing.json")


def test_gate_and_per_request_goodput_differ_on_a_tail_miss():
    # 97 requests at 100 ms TTFT, 3 at 900 ms: p99 TTFT breaks 300 ms.
    s = slo.SLO.parse("ttft:300 tpot:50")
    r = slo.BenchResult.from_json(make_result([0.1] * 97 + [0.9] * 3, tpot_s=0.02,
                                              goodput_slo={"ttft": 300, "tpot": 50}))
    sc = slo.score(r, s)
    assert not sc.meets_slo and sc.gate_goodput == 0
    assert sc.request_goodput == pytest.approx(9.7) and sc.request_goodput_source == "vllm"
    assert "p99 TTFT" in sc.violations[0]
    assert "0" in sc.why_they_differ("en") and "门槛" in sc.why_they_differ("zh")


def test_recomputes_per_request_goodput_for_another_slo():
    r = slo.BenchResult.from_json(make_result([0.1] * 50 + [0.25] * 50, tpot_s=0.02,
                                              goodput_slo={"ttft": 300, "tpot": 50}))
    r.raw["goodput_slo"] = {"ttft": 300.0, "tpot": 50.0}
    tight = slo.SLO.parse("ttft:200 tpot:50")
    sc = slo.score(r, tight)
    assert sc.request_goodput_source == "recomputed"
    assert sc.request_goodput == pytest.approx(5.0)  # only the 100 ms half are good
    assert slo.score(r, slo.SLO.parse("ttft:300 tpot:50")).gate_goodput == pytest.approx(10)


def test_summarised_per_request_lists_give_none_not_a_crash():
    r = slo.BenchResult.from_json(make_result([0.1] * 10, tpot_s=0.02,
                                              goodput_slo={"ttft": 300, "tpot": 50}))
    r.raw["itls"] = {"stripped_list": True, "n": 10}
    r.raw["goodput_slo"] = {"ttft": 300.0, "tpot": 50.0}
    assert r.per_request() is None
    sc = slo.score(r, slo.SLO.parse("ttft:200"))  # other targets: cannot recompute
    assert sc.request_goodput is None and sc.request_goodput_source == "none"
    assert slo.score(r, slo.SLO.parse("ttft:300 tpot:50")).request_goodput == pytest.approx(1.0)
