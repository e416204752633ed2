"""Lab 03's comparison from knee records: knees, rows and the verdicts the data supports."""

from __future__ import annotations

import pytest

from course_utils.core.records import EngineWindow, Scores, ServedPoint, Window
from course_utils.core.scaleout import CONFIGS, ScaleoutRun, config, rate_rows, three_way


def _rec(rate: float, meets: bool, tpot: float = 20.0, constraint: str = "none",
         engines: dict[str, str] | None = None, waiting: float = 0.0,
         valid: bool = True) -> dict:
    """A knee record at ``rate`` with one window; ``engines``: engine -> its constraint."""
    w = Window(index=0, purpose="measure", seed=0, status="ok", valid=valid,
               validity_issues=[] if valid else ["x"],
               score=Scores(gate_goodput=rate if meets else 0.0,
                            request_goodput=rate if meets else rate / 2,
                            request_throughput=rate, meets_slo=meets),
               bench={"p99_ttft_ms": 100.0, "p99_tpot_ms": tpot},
               diagnosis={"constraint": constraint},
               engines={e: EngineWindow({"waiting_mean": waiting if c == "queue" else 0.0},
                                        {"constraint": c})
                        for e, c in (engines or {}).items()})
    return ServedPoint(key=f"rate-{rate:g}", knob="rate", value=f"{rate:g}",
                       rate_key=f"{rate:g}", knobs={}, workload={}, slo="ttft:300 tpot:50",
                       status="ok", windows=[w]).to_json()


def test_configs_are_vllms_own_flags():
    assert CONFIGS["dp2"].serve_args == ("--data-parallel-size", "2")
    assert CONFIGS["tp2"].serve_args == ("--tensor-parallel-size", "2")
    assert (config("one").gpus, config("one").devices) == (1, "0")
    with pytest.raises(ValueError, match="one, dp2, tp2"):
        config("tp4")


def test_rows_per_gpu_and_per_engine():
    rows = rate_rows("dp2", [_rec(100, True, engines={"0": "none", "1": "none"})])
    (r,) = rows
    assert (r.rate, r.goodput, r.goodput_per_gpu, r.p99_tpot_ms) == (100.0, 100.0, 50.0, 20.0)
    assert sorted(r.engines) == ["0", "1"] and r.engines["1"]["constraint"] == "none"


def test_dp_adding_up_beats_tp_and_the_queue_clears_per_engine():
    tw = three_way({
        "one": [_rec(40, True), _rec(50, True), _rec(60, False, constraint="queue")],
        "dp2": [_rec(80, True, 18, engines={"0": "none", "1": "none"}),
                _rec(100, True, 22, engines={"0": "none", "1": "none"}),
                _rec(120, False, 40, "queue", engines={"0": "queue", "1": "none"}, waiting=3)],
        "tp2": [_rec(60, True, 12), _rec(80, True, 15), _rec(100, False, 30)],
    })
    assert tw.predicted_dp2 == (100.0, 120.0)
    assert tw.verdicts["dp_vs_prediction"]["key"] == "agrees"
    assert tw.verdicts["dp_vs_tp"]["key"] == "dp"
    assert "DP=2 100-120, TP=2 80-100" in tw.verdicts["dp_vs_tp"]["en"]
    # at the lowest shared rate (80) TP's per-token speed wins
    assert tw.verdicts["tpot"]["key"] == "tp" and tw.verdicts["tpot"]["rate"] == "80"
    q = tw.verdicts["queue_cleared"]
    assert "one GPU at 60 req/s: queue; DP=2 at 100 req/s" in q["en"]
    assert "单卡 60 req/s：排队" in q["zh"]
    t = tw.table("zh")
    assert t[0]["配置"] == "1 张卡" and t[-1]["约束"] == "none"


def test_overlapping_knees_are_a_tie_and_a_short_dp_is_said():
    tw = three_way({
        "one": [_rec(40, True), _rec(60, False)],
        "dp2": [_rec(60, True), _rec(70, False)],
        "tp2": [_rec(60, True), _rec(80, False)],
    })
    assert tw.verdicts["dp_vs_tp"]["key"] == "tie"
    assert "a tie" in tw.verdicts["dp_vs_tp"]["en"] and "平局" in tw.verdicts["dp_vs_tp"]["zh"]
    # predicted 80-120, measured 60-70: the replicas did not add up
    assert tw.verdicts["dp_vs_prediction"]["key"] == "below"
    assert "queue_cleared" not in tw.verdicts


def test_a_config_that_met_nothing_loses_and_invalid_rates_do_not_count():
    tw = three_way({
        "dp2": [_rec(80, True), _rec(100, True, valid=False)],
        "tp2": [_rec(80, False), _rec(100, False)],
    })
    assert tw.knees["dp2"]["knee_rate"] == 80.0  # 100 was invalid: no evidence
    assert tw.verdicts["dp_vs_tp"]["key"] == "dp"
    assert "below the lowest rate tested" in tw.verdicts["dp_vs_tp"]["en"]
    assert "低于最低测试速率" in tw.verdicts["dp_vs_tp"]["zh"]
    assert "dp_vs_prediction" not in tw.verdicts  # no one-GPU run: nothing predicted
    assert [r.valid for r in tw.rows if r.config == "dp2"] == [True, False]
    assert tw.table()[1]["constraint"] == "INVALID"


def test_run_record_round_trip():
    run = ScaleoutRun(config="dp2", gpus=2, devices="0,1", serve_cmd="vllm serve m",
                      rates=[80.0], done_rates=["80"], status="ok",
                      processes={"EngineCore_DP0": {"kv_cache_tokens": 1}})
    assert ScaleoutRun.from_json(run.to_json()) == run
