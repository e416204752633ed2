"""core.cost: a bench call's phases as the worker logs them, read back from a log, and the
summary over points; the failure reason of a bench log skips the harness's own lines."""

from __future__ import annotations

import json

import pytest

from course_utils.core.cost import BenchPhases, PointCost, cost_summary
from course_utils.core.vllm_logs import bench_failure_reason


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
