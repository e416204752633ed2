"""Items from recorded GPU runs: Little's law and the TTFT split by /metrics histograms."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from course_utils.quiz.data import (
    option_list,
    recorded_point,
    recorded_sweep,
    run_name,
)
from course_utils.quiz.engine import LANGS, QuizError, fmt_num, generator, sep


def point_load(p: Mapping[str, Any]) -> dict[str, Any]:
    """One recorded sweep point (``params.point``): bench fields, /metrics summary, where."""
    from course_utils.core import metrics

    rec = recorded_point(p)
    if rec is None:
        raise QuizError(f"recorded point {p.get('point')!r} not found")
    return {
        "bench": json.loads(rec["bench"].read_text(encoding="utf-8")),
        "summary": metrics.summarize(metrics.load_series(rec["series"])),
        "knobs": rec["knobs"],
        "workload": rec["workload"],
        "where": run_name(rec["bench"].parent.parent.parent),
    }


def in_flight(bench: Mapping[str, Any]) -> float:
    """Little's law: completed requests per second x mean end-to-end latency (s)."""
    return float(bench["request_throughput"]) * float(bench["mean_e2el_ms"]) / 1000.0


@generator("littles_law")
def _g_littles_law(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: point {results, knobs}, rel_tol. Answer: throughput x mean E2E (requests in
    the server on average); the explanation sets it beside the recorded gauges."""
    pt = point_load(p)
    b, s = pt["bench"], pt["summary"]
    n = in_flight(b)
    seen = s.running_mean + s.waiting_mean
    if abs(seen - n) > 0.15 * n:
        raise QuizError(f"littles_law: gauges say {seen:.1f} in flight, the law {n:.1f}")
    return {
        "type": "numeric",
        "answer": round(n, 1),
        "tolerance": {"rel": p.get("rel_tol", 0.05)},
        "values": {
            "run": pt["where"],
            "cap": pt["knobs"].get("max_num_seqs"),
            **_law(b, f"{n:.1f}"),
            "running": f"{s.running_mean:.1f}",
            "waiting": f"{s.waiting_mean:.1f}",
        },
    }


def _law(b: Mapping[str, Any], n: str) -> dict[str, str]:
    """Little's law's terms as a prompt shows them: throughput, mean E2E in ms and s, n."""
    e2e = float(b["mean_e2el_ms"])
    thr = f"{b['request_throughput']:.2f}"
    return {"thr": thr, "e2e": fmt_num(round(e2e)), "e2e_s": f"{e2e / 1000:.3f}", "n": n}


@generator("littles_cap")
def _g_littles_cap(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: results (a max_num_seqs sweep), reference. Answer: the caps below rate x mean
    E2E of the reference, each checked against its recorded waiting series."""
    from course_utils.core import diagnose, metrics

    pts = recorded_sweep({"knob": "max_num_seqs", "results": p["results"]})
    for x in pts:
        x["summary"] = metrics.summarize(metrics.load_series(x["dir"] / "metrics.jsonl"))
    ref = next((x for x in pts if x["value"] == p["reference"]), None)
    if ref is None or len(pts) < 3:
        raise QuizError(f"littles_cap: no reference point {p.get('reference')} in {p['results']}")
    n = in_flight(ref["bench"].raw)
    deep = diagnose.Thresholds().waiting_mean_min
    for x in pts:
        if (x["value"] < n) != (x["summary"].waiting_mean >= deep):
            raise QuizError(f"littles_cap: {x['value']} disagrees with its waiting series")
    b = ref["bench"].raw

    def why(x: dict[str, Any], lg: str) -> str:
        s, below = x["summary"], x["value"] < n
        w, r = f"{s.waiting_mean:.1f}", fmt_num(s.running_max)
        if lg == "zh":
            return f"{x['value']}：{'小于' if below else '不小于'} {n:.0f}，实测排队均值 {w}、运行数最多 {r}"
        verdict = "below" if below else "not below"
        return f"{x['value']}: {verdict} {n:.0f}; recorded waiting mean {w}, running max {r}"

    opts = [
        ({lg: f"`--max-num-seqs {x['value']}`" for lg in LANGS}, x["value"] < n, str(x["value"]))
        for x in pts
    ]
    return {
        "type": "multiple",
        "choices": option_list(opts),
        "values": {
            "run": run_name(pts[0]["dir"].parent.parent),
            "rate": fmt_num(b.get("request_rate")),
            "ref": ref["value"],
            **_law(b, f"{n:.0f}"),
            "points": {lg: sep(";", lg).join(why(x, lg) for x in pts) for lg in LANGS},
        },
    }


def ttft_parts(summary: Any) -> dict[str, float]:
    """Mean TTFT (ms) split by the /metrics histograms: queue, prefill, and the rest, which
    lies outside the engine core's two intervals (vllm/v1/metrics/stats.py)."""
    q, pf, t = summary.queue_time_mean_s, summary.prefill_time_mean_s, summary.ttft_mean_s
    if None in (q, pf, t):
        raise QuizError("ttft_split: the series has no queue/prefill/TTFT histograms")
    return {
        "queue": q * 1000,
        "prefill": pf * 1000,
        "outside": (t - q - pf) * 1000,
        "ttft": t * 1000,
    }


def ttft_key(parts: Mapping[str, float]) -> str:
    """The part that holds more than half of the mean TTFT (QuizError when none does)."""
    for k in ("queue", "prefill", "outside"):
        if parts[k] > 0.5 * parts["ttft"]:
            return k
    raise QuizError("ttft_split: no part holds more than half of TTFT")


@generator("ttft_split")
def _g_ttft_split(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: point {results, knobs}. Answer: the part of the mean TTFT above one half, as the
    item's choice queue, prefill, outside (the rest of TTFT) or decode (never part of it)."""
    pt = point_load(p)
    parts = ttft_parts(pt["summary"])
    key = ttft_key(parts)
    cap, rate = pt["knobs"].get("max_num_seqs"), pt["workload"].get("request_rate")
    from course_utils.core import metrics

    return {
        "type": "single",
        "right": key,
        "values": {
            "run": pt["where"],
            "cap": cap,
            "rate": fmt_num(rate),
            "ttft_name": metrics.TTFT,
            "queue_name": metrics.QUEUE_TIME,
            "prefill_name": metrics.PREFILL_TIME,
            "ttft": f"{parts['ttft']:.0f}",
            "queue": f"{parts['queue']:.1f}",
            "prefill": f"{parts['prefill']:.1f}",
            **{f"{k}_ms": f"{parts[k]:.0f} ms" for k in ("queue", "prefill", "outside")},
            **{
                f"{k}_share": f"{parts[k] / parts['ttft']:.0%}"
                for k in ("queue", "prefill", "outside")
            },
        },
    }
