"""tools/migrate_records.py: a flat record of a run from before windows gains its one window,
keeps every recorded key, and reads back as a served point; a second run changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils.core.keep import pick_knee
from course_utils.core.records import ServedPoint
from tests.tooling import tool

migrate = tool("migrate_records.py")

KNEE = {"rate_key": "40", "rate": "40", "status": "ok", "knobs": {}, "slo": "ttft:300",
        "workload": {"request_rate": 40.0, "seed": 0}, "server_startup_s": 142.7,
        "request_throughput": 38.2, "request_goodput": 38.2, "gate_goodput": 38.2,
        "meets_slo": True, "violations": [], "p99_ttft_ms": 203.4, "validity_issues": []}
POINT = {"key": "abc", "knob": "max_num_seqs", "value": 256, "knobs": {"max_num_seqs": 256},
         "workload": {"seed": 0}, "slo": "ttft:300", "status": "ok", "valid": False,
         "validity_issues": ["prefix cache hit rate 97%"], "files": {"bench_json": "/tmp/x"},
         "score": {"gate_goodput": 0.0, "request_goodput": 28.2, "request_throughput": 42.0,
                   "meets_slo": False, "violations": ["p99 TTFT"]}}


def test_flat_records_gain_their_window_and_keep_every_key(tmp_path: Path) -> None:
    run = tmp_path / "slo"
    run.mkdir()
    (run / "knee.jsonl").write_text(json.dumps(KNEE) + "\n")
    (run / "points.jsonl").write_text(json.dumps(POINT) + "\n")
    assert migrate.main([str(tmp_path)]) == 0
    knee = json.loads((run / "knee.jsonl").read_text())
    point = json.loads((run / "points.jsonl").read_text())
    assert {k: knee[k] for k in KNEE} == KNEE and {k: point[k] for k in POINT} == POINT
    k = ServedPoint.from_json(knee)
    assert (k.key, k.knob, k.tag, k.startup_s, k.valid) == ("rate-40", "rate", "knee", 142.7, True)
    assert k.windows[0].elapsed_s is None  # the point's time included its server start
    assert k.to_json()["p99_ttft_ms"] == 203.4  # the bench keys it kept flat
    assert pick_knee([knee])["knee_rate"] == 40
    p = ServedPoint.from_json(point)
    assert not p.valid and p.validity_issues == ["window 0: prefix cache hit rate 97%"]
    assert p.scores() is not None and p.scores().request_goodput == 28.2
    before = [(run / n).read_bytes() for n in ("knee.jsonl", "points.jsonl")]
    assert migrate.main([str(tmp_path)]) == 0
    assert [(run / n).read_bytes() for n in ("knee.jsonl", "points.jsonl")] == before


def test_a_folder_from_before_windows_names_the_migration(tmp_path: Path) -> None:
    from course_utils.lab.replay import load_points_checked

    run = tmp_path / "slo"
    run.mkdir()
    (run / "points.jsonl").write_text(json.dumps(POINT) + "\n")
    with pytest.raises(ValueError, match=r"before points kept their windows.*migrate_records.py"):
        load_points_checked(run)
