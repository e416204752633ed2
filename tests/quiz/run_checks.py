"""Independent checks of the items generated from recorded runs: each recomputes the keyed
answer from the files the item cites, through core only (not the quiz's own helpers)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from course_utils.core import metrics, validity, vllm_logs
from course_utils.core.records import read_jsonl, read_text

ROOT = Path(__file__).resolve().parents[2]


def _keys(q: Any) -> set[str]:
    return {c.key for c in q.choices if c.correct}


def _point(results: str, knobs: dict[str, Any]) -> Path:
    root = ROOT / results
    found = None
    for line in (root / "points.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if all(rec["knobs"].get(k) == v for k, v in knobs.items()):
            found = root / "points" / rec["key"]
    assert found is not None, (results, knobs)
    return found


def littles_law(q: Any, p: dict[str, Any]) -> None:
    d = _point(p["point"]["results"], p["point"]["knobs"])
    b = json.loads((d / "bench.json").read_text())
    n = b["completed"] / b["duration"] * b["mean_e2el_ms"] / 1000
    assert abs(q.answer - n) <= 0.05 * n
    s = metrics.summarize(metrics.load_series(d / "metrics.jsonl"))
    assert abs(s.running_mean + s.waiting_mean - n) <= 0.15 * n  # the gauges agree
    assert p["point"]["results"].split("/")[2] in q.prompt["en"]


def littles_cap(q: Any, p: dict[str, Any]) -> None:
    root = ROOT / p["results"]
    ref = json.loads((_point(p["results"], {"max_num_seqs": p["reference"]})
                      / "bench.json").read_text())
    n = ref["request_throughput"] * ref["mean_e2el_ms"] / 1000
    waits = {}
    for line in (root / "points.jsonl").read_text().splitlines():
        rec = json.loads(line)
        d = root / "points" / rec["key"]
        s = metrics.summarize(metrics.load_series(d / "metrics.jsonl"))
        waits[str(rec["knobs"]["max_num_seqs"])] = s.waiting_mean
    assert _keys(q) == {v for v in waits if int(v) < n}
    assert _keys(q) == {v for v, w in waits.items() if w >= 1.0}  # the queues were recorded
    assert {c.key for c in q.choices} == set(waits)


def ttft_split(q: Any, p: dict[str, Any]) -> None:
    d = _point(p["point"]["results"], p["point"]["knobs"])
    snaps = metrics.load_series(d / "metrics.jsonl")
    first, last = snaps[0], snaps[-1]

    def mean(name: str) -> float:
        h = last.histogram(name).minus(first.histogram(name))
        return h.sum / h.count

    queue, prefill, ttft = (mean(metrics.QUEUE_TIME), mean(metrics.PREFILL_TIME),
                            mean(metrics.TTFT))
    parts = {"queue": queue, "prefill": prefill, "outside": ttft - queue - prefill}
    big = [k for k, v in parts.items() if v > 0.5 * ttft]
    assert _keys(q) == set(big) and len(big) == 1
    assert "decode" not in _keys(q)  # TTFT never holds a decode step


def prefix_replay(q: Any, p: dict[str, Any]) -> None:
    root = ROOT / p["knee"]
    rates = {}
    for d in root.glob("rate-*"):
        rates[d.name] = validity.prefix_cache_hit_rate(metrics.load_series(d / "metrics.jsonl"))
    replayed = {k for k, v in rates.items() if v and v > validity.REPLAY_HIT_RATE}
    assert replayed and replayed != set(rates)
    assert _keys(q) == {"replay"}
    for k in replayed:
        assert k.split("-")[1] in next(c for c in q.choices if c.correct).text["en"]


def jit_window(q: Any, p: dict[str, Any]) -> None:
    parsed = vllm_logs.parse_sweep_log(read_text(ROOT / p["log"], errors="replace"))
    srv = next(s for s in parsed["servers"] if str(p["server"]) == s["overrides"])
    assert any(w["jit"] for w in srv["jit_windows"]) and srv["jit_in_benchmark"] >= 1
    assert _keys(q) == {"jit"}


def kv_preempt(q: Any, p: dict[str, Any]) -> None:
    root = ROOT / p["run"]
    rec = next(r for r in read_jsonl(root / "results.jsonl") if r["value"] == p["value"])
    stats = vllm_logs.engine_stats(read_text(root / "points" / rec["key"] / "llm.log"))
    first_wait = next(s for s in stats if s.waiting > 0)
    assert stats[0].waiting == 0 and first_wait.kv_usage >= 0.95  # waits start at a full cache
    assert first_wait.running < stats[0].running  # running requests went back to waiting
    assert _keys(q) == {"preempt"}


def replicas_plan(q: Any, p: dict[str, Any]) -> None:
    import math

    from course_utils.core import keep, scaleout

    folder = ROOT / (p.get("run") or scaleout.RUN_DIR) / "scaleout"
    last: dict[str, dict[str, Any]] = {}
    for rec in read_jsonl(folder / "one" / "knee.jsonl"):
        last[str(rec["rate_key"])] = rec
    k = keep.pick_knee(list(last.values()))
    assert k["knee_rate"] is not None
    per_replica = k["knee_rate"] * (1 - p["headroom"])
    assert q.answer == math.ceil(p["target"] / per_replica - 1e-9)
    assert folder.parent.name in q.prompt["en"] and folder.parent.name in q.prompt["zh"]


def loop_ending(q: Any, p: dict[str, Any]) -> None:
    from course_utils.core import keep
    from course_utils.core.records import ServedPoint

    root = ROOT / p["run"]
    summary = [r for r in read_jsonl(root / "tune.jsonl") if r.get("kind") == "summary"][-1]
    points = [ServedPoint.from_json(r) for r in read_jsonl(root / "points.jsonl")]
    assert points and not any(x.meets_slo for x in points)  # no value met the SLO
    tried = [r["knob"] for r in read_jsonl(root / "tune.jsonl") if r.get("kind") == "sweep"]
    o = keep.loop_outcome(summary["stop_reason"], False, None, None, tried)
    assert o["outcome"] == "past_knee" and _keys(q) == {"past_knee"}
    assert all(k in q.prompt["en"] and k in q.prompt["zh"] for k in tried)
    assert p["run"].split("/")[2] in q.prompt["en"]


def knee_ranking(q: Any, p: dict[str, Any]) -> None:
    """Through lab (the grid's validity gate, JIT compiles in its log included, and
    grid.compare's spread between servers), not the generator's own reading of the files."""
    from course_utils.lab import grid
    from course_utils.lab.grid import compare

    loop, sweep = ROOT / p["loop"], ROOT / p["grid"]
    slo = str((grid.read_grid_meta(sweep) or {})["slo"])
    cmp = compare(sweep, loop, slo)
    pts = {x.knob: x for x in grid.grid_points(sweep, slo)}
    kept = "max_num_batched_tokens=16384"
    assert pts["defaults"].valid and pts[kept].valid  # both grid runs passed the gate
    assert not any(x.windows[0].score.meets_slo for x in pts.values())
    # the grid orders the two values against the loop, inside the spread between servers
    assert pts["defaults"].windows[0].score.request_goodput > pts[kept].windows[0].score.request_goodput
    assert cmp["verdict"]["decision"] == "tie" and cmp["loop"]["knobs"]["max_num_batched_tokens"] == 16384
    worst = max(cmp["cross_spread"].values())
    assert f"{worst:.0%}" in q.explain["en"] and f"{worst:.0%}" in q.explain["zh"]
    assert _keys(q) == {"ending_only"}
    assert p["loop"].split("labs/results/")[-1] in q.prompt["en"]


def spread_scale(q: Any, p: dict[str, Any]) -> None:
    """Through core.keep.decide on the grid's two runs, with the margin recomputed from
    core.records.relative_spread over every configuration both sides measured."""
    from course_utils.core.keep import decide
    from course_utils.core.records import ServedPoint, relative_spread
    from course_utils.core.store import read_jsonl
    from course_utils.lab import grid

    sweep = ROOT / p["grid"]
    slo = str((grid.read_grid_meta(sweep) or {})["slo"])
    pts = {x.knob: x for x in grid.grid_points(sweep, slo)}
    loop = [ServedPoint.from_json(r) for r in read_jsonl(ROOT / p["loop"] / "points.jsonl")]
    margin = max(relative_spread([*(w.score.request_goodput for w in g.valid_windows),
                                  *(w.score.request_goodput for w in m.valid_windows)]) or 0.0
                 for g in pts.values() for m in loop if m.knobs == g.knobs)
    best = max(pts.values(), key=lambda x: x.windows[0].score.request_goodput)
    pick = pts["max_num_batched_tokens=16384"]  # the loop kept 16384 (its tune.jsonl)
    d = decide([best], pick.windows[0].score.request_goodput, current_spread=margin)
    assert d.decision == "tie" and d.gain is not None and d.gain > margin > (d.apart or 0)
    assert _keys(q) == {"tie"}
    assert f"{d.apart:.0%}" in q.explain["en"] and f"{margin:.0%}" in q.explain["zh"]


RUN_CHECKS: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "littles_law": littles_law, "littles_cap": littles_cap, "ttft_split": ttft_split,
    "prefix_replay": prefix_replay, "jit_window": jit_window, "kv_preempt": kv_preempt,
    "replicas_plan": replicas_plan, "loop_ending": loop_ending, "knee_ranking": knee_ranking,
    "spread_scale": spread_scale,
}
