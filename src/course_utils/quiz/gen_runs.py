"""Items from recorded GPU runs: Little's law, the TTFT split by /metrics histograms, whether a
measurement can be trusted (replayed prompts, a JIT compile inside the window, preemption
under a full KV cache) and the replicas a target rate needs (lab 03's one-GPU knee)."""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course_utils.core import diagnose, keep, metrics, replicas, scaleout, validity, vllm_logs
from course_utils.core.records import read_jsonl, read_text
from course_utils.quiz.data import (
    option_list,
    recorded_point,
    recorded_sweep,
    resolve_path,
    run_name,
)
from course_utils.quiz.engine import LANGS, QuizError, fmt_num, generator, sep


def point_load(p: Mapping[str, Any]) -> dict[str, Any]:
    """One recorded sweep point (``params.point``): bench fields, /metrics summary, where."""
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

    opts = [(f"`--max-num-seqs {x['value']}`", x["value"] < n, str(x["value"])) for x in pts]
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


# ---- can the measurement be trusted
def _replay_rows(root: Path) -> list[dict[str, float]]:
    """prefix_replay's rows {rate, p99 (TTFT ms), hit (prefix-cache hit rate)} of a recorded
    knee scan, by rate."""
    rows = []
    for d in sorted(root.glob("rate-*"), key=lambda x: float(x.name.split("-", 1)[1])):
        b = json.loads((d / "bench.json").read_text(encoding="utf-8"))
        hit = validity.prefix_cache_hit_rate(metrics.load_series(d / "metrics.jsonl"))
        rows.append(
            {"rate": float(d.name.split("-", 1)[1]), "p99": b["p99_ttft_ms"], "hit": hit or 0.0}
        )
    return rows


@generator("prefix_replay")
def _g_prefix_replay(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: knee (a recorded knee-scan dir with rate-*/{bench.json, metrics.jsonl}).
    Answer: the rates whose prefix-cache hit rate (core.validity) marks them replayed."""
    root = resolve_path(p["knee"])
    rows = _replay_rows(root)
    bad = [r for r in rows if r["hit"] > validity.REPLAY_HIT_RATE]
    if not bad or len(bad) == len(rows):
        raise QuizError("prefix_replay: needs both replayed and fresh rates")
    hits = {"en": "hits", "zh": "命中率"}
    return {
        "type": "single",
        "right": "replay",
        "values": {
            "run": run_name(root),
            "listing": {
                lg: sep(";", lg).join(
                    f"{fmt_num(r['rate'])} req/s{sep(':', lg)}p99 TTFT {r['p99']:.0f} ms"
                    f"{sep(',', lg)}{hits[lg]} {r['hit']:.1%}"
                    for r in rows
                )
                for lg in LANGS
            },
            "bad": "/".join(fmt_num(r["rate"]) for r in bad),
            "top": fmt_num(rows[-1]["rate"]),
            "first": fmt_num(rows[0]["rate"]),
            "limit": f"{validity.REPLAY_HIT_RATE:.0%}",
        },
    }


def _overrides(text: Any) -> Any:
    """The "Server overrides:" dict that `vllm bench sweep serve` prints, as a dict."""
    try:
        return ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError):
        return None


@generator("jit_window")
def _g_jit_window(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: log (a `vllm bench sweep serve` log), result (that server's run=0.json),
    server (its overrides). Answer: the window held a JIT compile (core.vllm_logs)."""
    log = resolve_path(p["log"])
    parsed = vllm_logs.parse_sweep_log(read_text(log, errors="replace"))
    want = dict(p["server"])
    srv = next((s for s in parsed["servers"] if _overrides(s["overrides"]) == want), None)
    if srv is None:
        raise QuizError(f"jit_window: no server {want} in {log}")
    kernels = sorted({k for w in srv["jit_windows"] for k in w["jit"]})
    if not kernels:
        raise QuizError("jit_window: that server's measured windows hold no JIT compile")
    res = json.loads(resolve_path(p["result"]).read_text(encoding="utf-8"))
    return {
        "type": "single",
        "right": "jit",
        "values": {
            "run": run_name(log),
            "flags": " ".join(f"--{k.replace('_', '-')} {v}" for k, v in want.items()),
            "rate": fmt_num(res["request_rate"]),
            "kernel": kernels[0],
            "p99": fmt_num(round(res["p99_ttft_ms"])),
        },
    }


def _preempt_stats(root: Path, value: Any) -> tuple[dict[str, Any], list[Any], Any, Any]:
    """kv_preempt's recorded point at `value`, its 10 s stats lines,
    the first line with a queue (KV full) and the one with the longest queue."""
    recs = [r for r in read_jsonl(root / "results.jsonl") if r.get("value") == value]
    rec = next((r for r in recs if r.get("status") == "ok"), None)
    if rec is None:
        raise QuizError(f"kv_preempt: no point {value} in {root}")
    log = root / "points" / str(rec["key"]) / "llm.log"
    stats = vllm_logs.engine_stats(read_text(log, errors="replace"))
    full = next((s for s in stats if s.waiting > 0), None)
    peak = max(stats, key=lambda s: s.waiting) if stats else None
    if full is None or peak is None or stats[0].waiting or full.kv_usage < 0.95:
        raise QuizError("kv_preempt: the stats show no wait that starts with a full KV cache")
    return rec, stats, full, peak


@generator("kv_preempt")
def _g_kv_preempt(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: run (a recorded lab 01 folder), value (the knob value). Answer: preemption,
    read from vLLM's 10 s stats lines (core.vllm_logs.engine_stats)."""
    root = resolve_path(p["run"])
    rec, stats, full, peak = _preempt_stats(root, p["value"])
    lines = [
        f"t={s.t_s} s: Running {s.running}, Waiting {s.waiting}, KV {s.kv_usage:.1%}"
        for s in (stats[0], full, peak)
    ]
    return {
        "type": "single",
        "right": "preempt",
        "values": {
            "run": run_name(root),
            "value": p["value"],
            "n": rec.get("load_prompts"),
            "rows": {"en": "; ".join(lines), "zh": "；".join(lines)},
            "start": stats[0].running,
            "full": f"{full.kv_usage:.1%}",
        },
    }


# ---- replicas for a target rate
@generator("replicas_plan")
def _g_replicas_plan(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: target (req/s), headroom (0..1), run (optional: a run folder; default
    core.scaleout.RUN_DIR). Answer: the safe replica count from the recorded one-GPU knee."""
    root = resolve_path(p.get("run") or scaleout.RUN_DIR)
    folder = root / "scaleout" if (root / "scaleout").is_dir() else root
    recs = scaleout.config_records(folder, "one")
    if not recs:
        raise QuizError(f"replicas_plan: no one-GPU knee scan in {folder}")
    k = keep.pick_knee(recs)
    lo, hi = k["knee_rate"], k["overloaded_rate"]
    if lo is None:
        raise QuizError("replicas_plan: no one-GPU rate met the SLO in the recorded run")
    target, headroom = float(p["target"]), float(p["headroom"])
    plan = replicas.plan_replicas(lo, hi, target, headroom)
    seen = sorted(
        (float(x["rate_key"]), keep.as_point(x).meets_slo) for x in recs if x.get("valid")
    )
    return {
        "type": "numeric",
        "answer": plan.safe,
        "tolerance": {"abs": 0},
        "values": {
            "run": (folder.parent if folder.name == "scaleout" else folder).name,
            "rows": {
                "en": ", ".join(f"{fmt_num(r)}: {'met' if m else 'missed'}" for r, m in seen),
                "zh": "，".join(f"{fmt_num(r)}：{'达标' if m else '未达标'}" for r, m in seen),
            },
            "target": fmt_num(target),
            "h": f"{headroom:.0%}",
            "lo": fmt_num(lo),
            "hi": ["open" if hi is None else "bound"],  # a rate above the knee that missed?
            "hi_rate": "" if hi is None else fmt_num(hi),
            "headroom": f"{headroom:g}",
            "per": f"{plan.per_replica_low:.4g}",
            "safe": plan.safe,
            "upper": plan.short or "",
            "short": [] if plan.short is None else ["same" if plan.short == plan.safe else "upper"],
        },
    }
