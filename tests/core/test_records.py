"""The one JSONL store and the records: torn lines, strict JSON, round trips of every
recorded run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from course_utils.core.metrics import load_series, save_series
from course_utils.core.records import (
    OfflinePoint,
    ServedPoint,
    append_jsonl,
    gzip_file,
    is_present,
    read_jsonl,
    read_text,
    resolve_path,
)

RESULTS = Path(__file__).resolve().parents[2] / "labs" / "results"


def test_store_skips_a_torn_line_and_never_glues_onto_it(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    append_jsonl(p, {"a": 1})
    with open(p, "a") as fh:
        fh.write('{"b": ')  # a writer killed mid-line
    append_jsonl(p, {"c": 3})
    assert read_jsonl(p) == [{"a": 1}, {"c": 3}]
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_store_writes_strict_json_only(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    append_jsonl(p, {"gain": math.inf, "nan": math.nan, "nested": [{"x": -math.inf}]})
    line = p.read_text().strip()
    json.loads(line, parse_constant=lambda c: pytest.fail(f"non-finite literal {c}"))
    assert json.loads(line) == {"gain": "inf", "nan": "nan", "nested": [{"x": "-inf"}]}


def test_a_recorded_gz_twin_is_read_when_the_plain_file_is_absent(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    append_jsonl(p, {"a": 1})
    gz = gzip_file(p)
    assert gz.name == "x.jsonl.gz" and not p.exists()
    assert resolve_path(p) == gz and is_present(p)
    assert read_jsonl(p) == [{"a": 1}] and read_text(p) == '{"a": 1}\n'
    append_jsonl(p, {"plain": True})  # a live run writes plain: the plain file wins
    assert resolve_path(p) == p and read_jsonl(p) == [{"plain": True}]
    p.unlink()
    gz.unlink()  # neither: as before
    assert resolve_path(p) == p and not is_present(p) and read_jsonl(p) == []
    with pytest.raises(FileNotFoundError):
        read_text(p)


def test_gzip_is_deterministic_and_a_series_reads_back(tmp_path: Path) -> None:
    one, two = tmp_path / "1" / "metrics.jsonl", tmp_path / "2" / "metrics.jsonl"
    for p in (one, two):
        p.parent.mkdir()
        p.write_text("é\n" * 1000, encoding="utf-8")
    a, b = gzip_file(one).read_bytes(), gzip_file(two).read_bytes()
    assert a == b and a[:2] == b"\x1f\x8b" and len(a) < 200
    assert a[4:8] == b"\0\0\0\0" and not a[3] & 0x08  # no mtime, no file name
    src = RESULTS.parent.parent / "src/course_utils/data/examples/comfortable/metrics.jsonl"
    series = load_series(src)  # recorded gzipped
    assert not src.exists() and len(series) > 50
    again = save_series(series, tmp_path / "s.jsonl")
    assert [s.to_dict() for s in load_series(gzip_file(again))] == [s.to_dict() for s in series]
    with pytest.raises(FileNotFoundError):
        load_series(tmp_path / "none.jsonl")


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*/*/points.jsonl"))
                         + sorted(RESULTS.glob("*/*/knee.jsonl")), ids=str)
def test_every_recorded_served_point_reads_as_a_record(path: Path) -> None:
    for raw in read_jsonl(path):
        p = ServedPoint.from_json(raw)
        assert p.status in ("ok", "failed")
        if p.status == "ok":
            assert p.windows and p.scores() is not None
            assert p.valid == bool(raw.get("valid", not raw.get("validity_issues")))
        again = ServedPoint.from_json(p.to_json())
        assert again.to_json() == p.to_json()


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*/*/results.jsonl")), ids=str)
def test_every_recorded_offline_point_round_trips(path: Path) -> None:
    for raw in read_jsonl(path):
        p = OfflinePoint.from_json(raw)
        assert p.to_json() == {**{k: getattr(p, k) for k in p.__dataclass_fields__
                                  if k != "extra"}, **p.extra}
        assert {k: v for k, v in p.to_json().items() if k in raw} == raw


def test_a_point_decides_on_its_valid_windows_only() -> None:
    win = {"status": "ok", "purpose": "measure", "seed": 0, "index": 0,
           "score": {"gate_goodput": 0.0, "request_goodput": 1.0, "request_throughput": 9.0,
                     "meets_slo": False}, "valid": False, "validity_issues": ["jit"]}
    clean = {**win, "index": 1, "purpose": "remeasure", "valid": True, "validity_issues": [],
             "score": {**win["score"], "request_goodput": 4.0}}
    rep = {**clean, "index": 2, "purpose": "repeat", "score": {**win["score"],
                                                               "request_goodput": 6.0}}
    p = ServedPoint.from_json({"key": "k", "knob": "max_num_seqs", "value": 8, "knobs": {},
                               "workload": {}, "slo": "", "status": "ok",
                               "windows": [win, clean, rep]})
    assert p.valid and p.objective("request_goodput") == 5.0
    assert p.spread("request_goodput") == pytest.approx(0.4)
    assert p.validity_issues == ["window 0: jit"]
    assert p.to_json()["invalid_windows"] == [0]


def _point(key: str, value: int, scores: list[float]) -> ServedPoint:
    windows = [{"status": "ok", "purpose": "measure", "seed": 1000 * i, "index": i,
                "valid": True, "validity_issues": [],
                "score": {"gate_goodput": 0.0, "request_goodput": s, "request_throughput": s,
                          "meets_slo": False}} for i, s in enumerate(scores)]
    return ServedPoint.from_json({"key": key, "knob": "max_num_batched_tokens", "value": value,
                                  "knobs": {}, "workload": {}, "slo": "", "status": "ok",
                                  "windows": windows})


def test_the_keep_rule_weighs_the_difference_on_the_spreads_scale() -> None:
    """A margin is (max - min) / mean of repeated windows; the difference it is weighed
    against is taken the same way. 2.37 -> 5.98 is +152.3 % as a gain over the lower score
    but 86.5 % apart as (max - min) / mean: inside a 149 % spread, a tie; outside 80 %, a keep."""
    from course_utils.core.keep import decide

    best = _point("b", 32768, [5.98])
    tie = decide([best], 2.37, current_spread=1.49)
    assert tie.decision == "tie" and tie.gain == pytest.approx(1.523, abs=0.001)
    assert tie.apart == pytest.approx(0.865, abs=0.001) and tie.margin == 1.49
    assert "(86.5% apart) is inside the run-to-run spread 149.0%" in tie.why
    kept = decide([best], 2.37, current_spread=0.80)
    assert kept.decision == "keep" and "(86.5% apart) > margin 80.0%" in kept.why
    # small differences read the same on both scales: +10 % is 9.5 % apart
    assert decide([_point("s", 2, [1.10])], 1.0, current_spread=0.09).decision == "keep"
    assert decide([_point("s", 2, [1.10])], 1.0, current_spread=0.097).decision == "tie"
    assert decide([_point("z", 2, [1.0])], 0.0).decision == "keep"  # over 0: kept
