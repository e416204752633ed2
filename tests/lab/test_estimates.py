"""The lab's time estimates before a run, checked against what recorded runs took."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils.core.records import Workload
from course_utils.core.workload import workload_from_dict
from course_utils.lab import knee
from course_utils.lab.measure import MeasureConfig

RESULTS = Path(__file__).resolve().parents[2] / "labs" / "results"
# knee scans measured through the `vllm bench serve` CLI, one call per warm-up and window
CLI_SCANS = ["h200-2026-11-29/slo", "h200-2026-11-29c/slo", "h200-2026-12-02/lab02-4090"]


def _first_records(path: Path) -> list[dict]:
    seen: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        seen.setdefault(rec["key"], rec)  # a repeat appends the same rate with more windows
    return list(seen.values())


@pytest.mark.parametrize("scan", CLI_SCANS)
def test_a_knee_rate_costs_what_the_estimate_says(scan: str) -> None:
    """Each rate measured in one window took within 25 % of ``MeasureConfig.seconds``."""
    checked = 0
    for rec in _first_records(RESULTS / scan / "knee.jsonl"):
        if rec["status"] != "ok" or len(rec["windows"]) != 1:
            continue  # a rejected window measured again costs a call no estimate foresees
        w = workload_from_dict(rec["workload"])
        cfg = MeasureConfig(repeats=0, warmup_share=0.5 if rec.get("warmup") else 0.0)
        assert cfg.seconds(w) == pytest.approx(rec["elapsed_s"], rel=0.25), rec["key"]
        checked += 1
    assert checked >= 3


def test_the_scan_estimate_counts_start_rates_repeats_and_batch1() -> None:
    w = Workload(input_len=512, output_len=128, num_prompts=200, request_rate=1.0)
    rates = [2.0, 4.0, 6.0, 8.0, 10.0]
    base = knee.scan_seconds(rates, w, startup_s=100.0, bracket_repeats=0)
    # each rate: a warm-up call (100 prompts) and a window call (200), 25 s each
    assert base == pytest.approx(100 + sum(2 * 25 + 300 / r for r in rates))
    more = knee.scan_seconds(rates, w, startup_s=100.0, bracket_repeats=1, batch1_prompts=20)
    assert more - base == pytest.approx((25 + 100) + (25 + 50) + 25 + 20 * 128 * 0.015)
    assert knee.scan_seconds([], w, startup_s=100.0) == 0.0
