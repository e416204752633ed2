"""tools/investigate/cost.py: the harness's cost per point, on the recorded H200 run of
2026-11-30 and on synthetic records; a bench call's phases as the bench worker logged them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils.core.records import ServedPoint, Warmup, Window, read_jsonl
from course_utils.core.vllm_logs import bench_failure_reason
from tests.tooling import tool

lab_cost = tool("investigate/cost.py")
BenchPhases, PointCost = lab_cost.BenchPhases, lab_cost.PointCost
cost_summary, point_cost = lab_cost.cost_summary, lab_cost.point_cost

RUN = Path(__file__).resolve().parents[2] / "labs" / "results" / "h200-2026-11-30"


def test_recorded_points_split_into_start_up_load_and_harness() -> None:
    rows = lab_cost.recorded_costs(RUN / "decode12")
    assert len(rows) == 5
    for p, c in rows:
        d = RUN / "decode12" / "points" / p.key
        # the parts come from the files as vLLM wrote them
        loads = [json.loads((d / n).read_text())["duration"] for n in ("bench.json", "bench-w1.json")]
        assert c.windows_load_s == pytest.approx(sum(loads), abs=0.01)
        assert c.warmup_load_s == pytest.approx(
            json.loads((d / "warmup.json").read_text())["duration"], abs=0.01)
        assert c.server_start_s == p.startup_s and c.total_s == p.elapsed_s
        # the whole point is accounted for: start-up + warm-up + windows + a small rest
        assert c.other_s is not None and 0.0 <= c.other_s < 2.0
        assert c.harness_s == pytest.approx(
            c.bench_overhead_s + c.warmup_load_s + c.other_s, abs=0.05)
        # each bench call spent 19-32 s before vLLM's first log line (import, tokenizer)
        assert c.bench_calls == 3 and len(c.bench_startup_s) == 3
        assert all(x is not None and 19.0 <= x <= 32.0 for x in c.bench_startup_s)
        # and its prompts + exit on top: the calls' overhead exceeds their start-ups
        assert c.bench_overhead_s > sum(x or 0 for x in c.bench_startup_s)


def test_recorded_run_summary_harness_is_a_large_share() -> None:
    s = lab_cost.run_cost([RUN / "decode12", RUN / "decode"])
    assert s["points"] == 6 and s["bench_calls"] == 18
    # the measured load is a third or less of a point; the harness ~40 %
    assert 0.35 <= s["harness_share"] <= 0.5
    assert s["bench_startup_s"]["mean"] == pytest.approx(
        s["bench_startup_s"]["sum"] / 18, abs=0.01)
    assert s["windows_load_s"]["max"] < s["bench_overhead_s"]["min"]


def test_cli_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert lab_cost.main([str(RUN / "decode12")]) == 0
    out = capsys.readouterr().out
    assert "| max_num_seqs=128 |" in out and '"harness_share"' in out
    assert lab_cost.main([str(RUN)]) == 2  # no points.jsonl there


def _point() -> ServedPoint:
    p = ServedPoint(key="k", knob="baseline", value=None, knobs={}, workload={}, slo="",
                    status="ok", startup_s=50.0, elapsed_s=130.0, time="2026-12-01T10:00:00")
    p.warmup = Warmup(seed=1, num_prompts=8, status="ok", elapsed_s=25.0, load_s=10.0)
    p.windows = [Window(index=i, purpose="measure", seed=0, status="ok", elapsed_s=27.0,
                        bench={"duration": 12.0}) for i in range(2)]
    return p


def test_point_cost_arithmetic_and_json_round_trip() -> None:
    p = _point()
    c = point_cost(p, bench_mode="worker", bench_startup_s=[3.0, 1.0, 1.0])
    assert (c.windows_s, c.windows_load_s, c.warmup_load_s) == (54.0, 24.0, 10.0)
    assert c.other_s == pytest.approx(1.0) and c.harness_s == pytest.approx(56.0)
    assert c.bench_overhead_s == pytest.approx(45.0)
    back = PointCost.from_json(json.loads(json.dumps(c.to_json())))
    assert back == c and back.to_json()["harness_s"] == 56.0
    with pytest.raises(ValueError, match="bench_mode"):
        point_cost(p, bench_mode="thread")


def test_records_without_cost_still_read() -> None:
    rec = read_jsonl(RUN / "decode12" / "points.jsonl")[0]
    assert "cost" not in rec
    p = ServedPoint.from_json(rec)
    assert p.warmup is not None and p.warmup.load_s is None
    # no warm-up load known: the calls' overhead is unknown, the harness total is not
    c = point_cost(p)
    assert c.bench_overhead_s is None and c.harness_s is not None


def test_summary_of_nothing() -> None:
    s = cost_summary([])
    assert s["points"] == 0 and s["harness_share"] is None and s["total_s"] is None


def test_phases_line_round_trips_and_the_last_one_wins() -> None:
    a = BenchPhases(call_s=10.0, before_main_s=2.5, main_s=7.0, after_s=0.5)
    b = BenchPhases(call_s=3.0)  # no main run printed: its parts are unknown
    log = f"$ ['vllm', 'bench']\n# in-process\nINFO ...\n{a.line()}\nmore\n{b.line()}\n"
    assert BenchPhases.in_log(log) == b
    assert BenchPhases.in_log(log.replace(b.line(), "")) == a
    assert BenchPhases.in_log("no phases here\n") is None
    assert BenchPhases.in_log("# bench phases: {not json\n") is None


def test_point_cost_keeps_its_phases_through_json_and_sums_them() -> None:
    ph = [BenchPhases(call_s=20.0, before_main_s=3.0, main_s=16.0, after_s=1.0), None,
          BenchPhases(call_s=21.0, before_main_s=4.0, main_s=16.5, after_s=0.5)]
    c = PointCost(server_start_s=60.0, warmup_s=20.0, warmup_load_s=15.0, windows_s=41.0,
                  windows_load_s=31.0, total_s=125.0, bench_calls=3, bench_phases=ph)
    again = PointCost.from_json(json.loads(json.dumps(c.to_json())))
    assert again == c
    s = cost_summary([c])
    assert s["bench_before_main_s"] == {"mean": 3.5, "min": 3.0, "max": 4.0, "sum": 7.0}
    assert s["bench_after_s"]["sum"] == pytest.approx(1.5)


def test_a_failed_bench_reason_is_vllms_line_not_the_harness_phases() -> None:
    phases = BenchPhases(call_s=1.0).line()
    log = f"$ ['vllm']\n# in-process: worker pid 1\nsome vLLM output\n{phases}\n"
    why = bench_failure_reason(log, 1)
    assert why == "vllm bench serve exited with code 1 (last line: some vLLM output)"
    err = "ValueError: Initial test run failed"
    assert bench_failure_reason(f"{err}\n{phases}\n", 1) == err
