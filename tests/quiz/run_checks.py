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


def _grid_runs(sweep: Path) -> dict[str, float]:
    """combo label -> vLLM's request goodput in its run file (read here, not by the quiz)."""
    return {d.name.split("--", 1)[1]: json.loads((d / "run=0.json").read_text())["request_goodput"]
            for d in (sweep / "grid").glob("SERVE--*") if (d / "run=0.json").is_file()}


def _loop_windows(loop: Path) -> dict[str, list[float]]:
    from course_utils.core.records import ServedPoint

    pts = [ServedPoint.from_json(r) for r in read_jsonl(loop / "points.jsonl")]
    assert not any(x.meets_slo for x in pts)  # no value met the SLO
    return {("defaults" if x.knob == "baseline" else x.label):
            [w.score.request_goodput for w in x.valid_windows] for x in pts}


def knee_ranking(q: Any, p: dict[str, Any]) -> None:
    """Through core: the grid's run files and the loop's windows, and
    core.records.relative_spread between the two servers."""
    from course_utils.core.records import relative_spread

    runs, wins = _grid_runs(ROOT / p["grid"]), _loop_windows(ROOT / p["loop"])
    kept = "max_num_batched_tokens=16384"  # the loop kept 16384 (its tune.jsonl)
    # the grid orders the two values against the loop, inside the spread between servers
    assert runs["defaults"] > runs[kept]
    cross = {k: relative_spread([*wins[k], runs[k]]) for k in ("defaults", kept)}
    worst = max(cross.values())
    assert f"{worst:.0%}" in q.explain["en"] and f"{worst:.0%}" in q.explain["zh"]
    assert _keys(q) == {"ending_only"}
    assert p["loop"].split("labs/results/")[-1] in q.prompt["en"]


def spread_scale(q: Any, p: dict[str, Any]) -> None:
    """Through core.keep.decide on the grid's two runs, with the margin recomputed from
    core.records.relative_spread over every configuration both sides measured."""
    from course_utils.core.keep import decide
    from course_utils.core.records import relative_spread

    runs, wins = _grid_runs(ROOT / p["grid"]), _loop_windows(ROOT / p["loop"])
    margin = max(relative_spread([*wins[k], runs[k]]) for k in runs if k in wins)
    best = max(runs, key=runs.__getitem__)
    pick = "max_num_batched_tokens=16384"
    point = {"key": best, "knob": best, "value": None, "knobs": {}, "workload": {}, "slo": "",
             "status": "ok", "windows": [{"status": "ok", "purpose": "measure", "index": 0,
                                          "seed": 0, "valid": True, "validity_issues": [],
                                          "score": {"request_goodput": runs[best],
                                                    "meets_slo": False}}]}
    d = decide([point], runs[pick], current_spread=margin)
    assert d.decision == "tie" and d.gain is not None and d.gain > margin > (d.apart or 0)
    assert _keys(q) == {"tie"}
    assert f"{d.apart:.0%}" in q.explain["en"] and f"{margin:.0%}" in q.explain["zh"]
    assert "two different hosts" in q.prompt["en"]  # README: 32768 ran on another host


def budget_unused(q: Any, p: dict[str, Any]) -> None:
    summary = [r for r in read_jsonl(ROOT / p["run"] / "tune.jsonl")
               if r.get("kind") == "summary"][-1]
    ev = summary["diagnosis"]["evidence"]
    assert summary["diagnosis"]["constraint"] == "prefill"
    assert ev["tokens_per_step"] < 0.5 * ev["max_num_batched_tokens"]
    assert _keys(q) == {"unused"}


def kv_gain(q: Any, p: dict[str, Any]) -> None:
    from course_utils.core import capacity

    logged = {r["value"]: r["kv_cache_tokens"] for r in read_jsonl(ROOT / p["records"])}
    assert quiz_grade(q, logged[p["to"]])  # vLLM's own count grades as right
    per = capacity.load_model(p["model"]).kv_bytes_per_token()
    assert per == 57_344  # 2 x 28 layers x 4 KV heads x 128 x 2 bytes


def quiz_grade(q: Any, x: float) -> bool:
    from course_utils import quiz

    return quiz.grade(q, x).correct


RUN_CHECKS: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "littles_law": littles_law, "littles_cap": littles_cap, "ttft_split": ttft_split,
    "prefix_replay": prefix_replay, "jit_window": jit_window, "kv_preempt": kv_preempt,
    "replicas_plan": replicas_plan, "loop_ending": loop_ending, "knee_ranking": knee_ranking,
    "spread_scale": spread_scale, "budget_unused": budget_unused, "kv_gain": kv_gain,
}
