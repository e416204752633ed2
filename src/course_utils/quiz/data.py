"""Where quiz data comes from: paths and globs into the repo or package data, recorded
sweep points, bench results, metric series and start-up logs; shared text helpers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from course_utils.core import capacity, metrics, slo, vllm_logs
from course_utils.core.records import GZ, is_present, read_jsonl, read_text
from course_utils.core.store import POINTS_FILE
from course_utils.quiz.engine import PKG_DIR, REPO_ROOT, QuizError, fmt_num

REPO_RUNS = "labs/results/"


def resolve_path(p: str | Path) -> Path:
    """A data path (a glob picks its last match, so the newest run wins) under the repo root or
    the package data; ``X.jsonl`` also finds a gzipped ``X.jsonl.gz``."""
    text = str(p)
    bases = [Path("/")] if Path(text).is_absolute() else [REPO_ROOT, PKG_DIR / "data"]
    for base in bases:
        rel = text.lstrip("/") if base == Path("/") else text
        if any(ch in rel for ch in "*?["):
            found = {h.with_name(h.name.removesuffix(GZ)) for h in base.glob(rel + GZ)}
            hits = sorted(found | set(base.glob(rel)))
            if hits:
                return hits[-1]
        elif (base / rel).exists() or is_present(base / rel):
            return base / rel
    raise QuizError(f"data file {text!r} not found (looked in the repo and package data)")


def option_list(items: Sequence[tuple[Any, Any, Any]]) -> list[dict[str, Any]]:
    """Choices from (text, right?, key) rows; a plain string text is the same in zh and en."""
    return [
        {"text": {"en": t, "zh": t} if isinstance(t, str) else t, "correct": ok, "key": key}
        for t, ok, key in items
    ]


def run_name(path: Path) -> str:
    """``h200-2026-11-29c/slo`` for a path inside labs/results (what a prompt cites)."""
    text = path.as_posix()
    return text.split(REPO_RUNS, 1)[1] if REPO_RUNS in text else path.name


def item_slo(p: Mapping[str, Any]) -> Any:
    return slo.SLO.parse(str(p["slo"]))


def item_data(p: Mapping[str, Any], key: str) -> Any:
    """``params[key]``: inline data, or the first path/glob found of one or a list of them."""
    v = p.get(key)
    cands = list(v) if isinstance(v, list) else [v]
    misses = []
    for c in cands:
        if not isinstance(c, str | Path):
            return c
        try:
            return resolve_path(c)
        except QuizError:
            misses.append(str(c))
    raise QuizError(
        f"{key}: none of {', '.join(misses)} found (looked in the repo and package data)"
    )


def recorded_point(p: Mapping[str, Any]) -> dict[str, Any] | None:
    """The last recorded sweep point (``params.point = {results, knobs}``) whose knobs include
    those given, with its bench and series files; None when absent."""
    spec = p.get("point")
    if not spec:
        return None
    try:
        root = resolve_path(spec["results"])
    except QuizError:
        return None
    want = dict(spec.get("knobs") or {})
    found = None
    for rec, d in sweep_records(root):
        knobs_ = rec.get("knobs") or {}
        if all(knobs_.get(k) == v for k, v in want.items()) and is_present(d / "metrics.jsonl"):
            found = {
                "bench": d / "bench.json",
                "series": d / "metrics.jsonl",
                "knobs": knobs_,
                "workload": rec.get("workload") or {},
            }
    return found


def sweep_records(root: Path) -> list[tuple[dict[str, Any], Path]]:
    """(record, point folder) of each point in a sweep's points.jsonl that has a bench.json."""
    out = []
    for rec in read_jsonl(root / POINTS_FILE):
        d = root / "points" / str(rec.get("key"))
        if rec.get("key") and (d / "bench.json").is_file():
            out.append((rec, d))
    return out


def per_request_of(b: Any) -> Any:
    """Per-request arrays, or None (also when a collector summarised the ITL lists)."""
    return b.per_request() if isinstance(b.raw.get("itls"), list) else None


def item_bench(v: Any) -> Any:
    """A BenchResult from a path or a partial dict (missing required keys filled as 0)."""
    if isinstance(v, Mapping):
        raw = {k: 0 for k in slo.REQUIRED_KEYS}
        raw.update(v)
        return slo.BenchResult.from_json(raw)
    return slo.BenchResult.from_json(v)


def requests_bench(p: Mapping[str, Any]) -> Any:
    """A BenchResult from per-request ttft_ms/tpot_ms lists, as vLLM's calculate_metrics builds it
    (np.percentile p99s; each request's ITLs are its TPOT repeated)."""
    src = item_data(p, "requests")
    if isinstance(src, Path):
        return item_bench(src)
    src = src or p
    ttft = [float(x) for x in src["ttft_ms"]]
    tpot = [float(x) for x in src["tpot_ms"]]
    n = int(src.get("output_len", 128))
    if len(ttft) != len(tpot) or not ttft:
        raise QuizError("ttft_ms and tpot_ms need the same, non-zero length")
    dur = float(src["duration_s"])
    raw = {
        "duration": dur,
        "completed": len(ttft),
        "failed": 0,
        "request_throughput": len(ttft) / dur,
        "output_throughput": len(ttft) * n / dur,
        "total_input_tokens": 0,
        "total_output_tokens": len(ttft) * n,
        "ttfts": [t / 1000 for t in ttft],
        "output_lens": [n] * len(ttft),
        "itls": [[t / 1000] * (n - 1) for t in tpot],
    }
    for pct in (50, 90, 99):
        raw[f"p{pct}_ttft_ms"] = float(np.percentile(ttft, pct))
        raw[f"p{pct}_tpot_ms"] = float(np.percentile(tpot, pct))
    return item_bench(raw)


def slo_text(s: Any, lang: str) -> str:
    """``p99 TTFT ≤ 300 ms, p99 TPOT ≤ 50 ms`` (+ the rate) for an slo.SLO."""
    pct = fmt_num(s.percentile)
    parts = [f"p{pct} {k.upper()} ≤ {fmt_num(v)} ms" for k, v in s.targets().items()]
    text = ("，" if lang == "zh" else ", ").join(parts)
    return text + (f" @ {fmt_num(s.rate)} req/s" if s.rate else "")


def recorded_sweep(p: Mapping[str, Any]) -> list[dict[str, Any]]:
    """(value, bench, rate, dir) for every point of one knob in a recorded sweep, baseline
    included; ``params.points`` (inline ``[{value, bench: {...}}]``, no dir) when not recorded."""
    knob = p["knob"]
    out: list[dict[str, Any]] = []
    try:
        root = resolve_path(p["results"]) if "results" in p else None
    except QuizError:
        root = None
    for rec, d in sweep_records(root) if root else []:
        value = (rec.get("knobs") or {}).get(knob)
        if rec.get("knob") in (knob, "baseline") and value is not None:
            out = [o for o in out if o["value"] != value]  # a re-run replaces a point
            rate = (rec.get("workload") or {}).get("request_rate")
            out.append(
                {"value": value, "bench": item_bench(d / "bench.json"), "rate": rate, "dir": d}
            )
    if not out:
        out = [
            {"value": pt["value"], "bench": item_bench(pt["bench"]), "rate": p.get("rate")}
            for pt in p.get("points") or []
        ]
    if len(out) < 2:
        raise QuizError(f"sweep of {knob}: fewer than two points")
    return sorted(out, key=lambda o: o["value"])


def synthetic_series(spec: Mapping[str, Any]) -> list[Any]:
    """Snapshots from Prometheus text with the real metric names: lists waiting, running,
    kv_usage, preemptions (cumulative), one value per scrape ``interval_s`` apart."""
    waiting = list(spec["waiting"])
    n = len(waiting)
    running = list(spec.get("running", [0] * n))
    kv = list(spec.get("kv_usage", [0.0] * n))
    pre = list(spec.get("preemptions", [0] * n))
    if not n or not len(running) == len(kv) == len(pre) == n:
        raise QuizError(
            "synthetic series: waiting, running, kv_usage, preemptions need the "
            "same non-zero length"
        )
    dt = float(spec.get("interval_s", 0.5))
    lab = 'engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"'
    cols = [
        (metrics.WAITING, "gauge", waiting),
        (metrics.RUNNING, "gauge", running),
        (metrics.KV_USAGE, "gauge", kv),
        (f"{metrics.PREEMPTIONS}_total", "counter", pre),
    ]
    return [
        metrics.Snapshot.parse(
            "".join(f"# TYPE {m} {kind}\n{m}{{{lab}}} {v[i]}\n" for m, kind, v in cols), t=i * dt
        )
        for i in range(n)
    ]


def item_model(p: Mapping[str, Any]) -> tuple[Any, str]:
    """The item's model shape and its ``kv_dtype`` (auto by default)."""
    return capacity.load_model(p.get("model", "qwen2.5-7b-instruct")), str(
        p.get("kv_dtype", "auto")
    )


def logged_memory(p: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """Start-up facts from ``params.log`` (core.vllm_logs) and the log's name when found, else
    from the params and ""."""
    if "log" in p:
        try:
            src = item_data(p, "log")
        except QuizError:
            src = None
        if isinstance(src, Path):
            f = vllm_logs.startup_facts(read_text(src, errors="replace"))
            if f.kv_cache_gib is not None:
                facts = {"kv_memory_gib": f.kv_cache_gib}
                if f.kv_cache_tokens is not None:
                    facts["kv_tokens"] = float(f.kv_cache_tokens)
                if f.max_concurrency is not None and f.concurrency_len is not None:
                    facts["concurrency"] = f.max_concurrency
                    facts["concurrency_len"] = float(f.concurrency_len)
                return facts, run_name(src)
    facts = {"kv_memory_gib": float(p["kv_memory_gib"])}
    if "logged_tokens" in p:
        facts["kv_tokens"] = float(p["logged_tokens"])
    if "logged_concurrency" in p:
        facts["concurrency"] = float(p["logged_concurrency"])
    return facts, ""
