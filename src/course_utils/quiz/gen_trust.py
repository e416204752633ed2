"""Items on whether a measurement can be trusted: replayed prompts, a JIT compile inside
the window, preemption under a full KV cache."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course_utils.quiz.data import resolve_path, run_name
from course_utils.quiz.engine import LANGS, QuizError, fmt_num, generator, sep


def _replay_rows(root: Path) -> list[dict[str, float]]:
    """prefix_replay's rows {rate, p99 (TTFT ms), hit (prefix-cache hit rate)} of a recorded
    knee scan, by rate."""
    from course_utils.core import metrics, validity

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
    from course_utils.core import validity

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
    import ast

    try:
        return ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError):
        return None


@generator("jit_window")
def _g_jit_window(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: log (a `vllm bench sweep serve` log), result (that server's run=0.json),
    server (its overrides). Answer: the window held a JIT compile (core.vllm_logs)."""
    from course_utils.core import vllm_logs
    from course_utils.core.records import read_text

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
    from course_utils.core import vllm_logs
    from course_utils.core.records import read_jsonl, read_text

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
