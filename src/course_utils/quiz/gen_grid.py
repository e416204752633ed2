"""Reasoning items from recorded loops: how a loop ended, why a bigger budget cannot help,
and the loop against vLLM's grid on the same workload past the knee. Each generator
refuses data that does not support its key."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course_utils.core.keep import decide, loop_outcome, swept_knobs
from course_utils.core.records import ServedPoint, relative_spread
from course_utils.core.store import POINTS_FILE, TUNE_FILE, last_summary, read_jsonl
from course_utils.quiz.data import resolve_path, run_name
from course_utils.quiz.engine import QuizError, fmt_num, generator, listed


def _loop(root: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[Any]]:
    """A recorded loop folder's tune.jsonl steps, last summary and served points."""
    steps = read_jsonl(root / TUNE_FILE)
    pts = [ServedPoint.from_json(x) for x in read_jsonl(root / POINTS_FILE)]
    return steps, last_summary(steps), pts


def _workload(w: Mapping[str, Any]) -> dict[str, Any]:
    return {"input": w["input_len"], "output": w["output_len"], "rate": fmt_num(w["request_rate"])}


def _loop_windows(loop: Path) -> tuple[dict[str, list[float]], Any, Any]:
    """label -> the valid windows' request goodput, the kept point, the baseline point."""
    _, summary, pts = _loop(loop)
    if summary is None or not pts:
        raise QuizError(f"knee_ranking: {loop} has no finished loop")
    out: dict[str, list[float]] = {}
    for x in pts:
        label = "defaults" if x.knob == "baseline" else x.label  # the grid's name
        out[label] = [float(w.score.request_goodput or 0.0) for w in x.valid_windows if w.score]
        if x.meets_slo:
            raise QuizError(f"knee_ranking: {label} met the SLO in {loop}")
    kept = next(x for x in pts if x.knobs == summary.get("knobs"))
    base = next(x for x in pts if x.knob == "baseline")
    return out, kept, base


def _grid_runs(grid: Path) -> dict[str, float]:
    """combo label -> vLLM's request goodput in its first run file, as the sweep wrote it."""
    return {
        d.name.removeprefix("SERVE--"): float(
            json.loads((d / "run=0.json").read_text())["request_goodput"]
        )
        for d in sorted(grid.glob("SERVE--*"))
        if (d / "run=0.json").is_file()
    }


@generator("knee_ranking")
def _g_knee_ranking(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: loop (a tune folder), grid (its grid's vllm_sweep folder). Answer: only the
    ending holds; the values' order is inside the spread between servers."""
    loop, grid = resolve_path(p["loop"]), resolve_path(p["grid"]) / "grid"
    wins, kept, base = _loop_windows(loop)
    kept_label = kept.label
    runs = {k: v for k, v in _grid_runs(grid).items() if k in ("defaults", kept_label)}
    if len(runs) < 2:
        raise QuizError(f"knee_ranking: the grid has no run of defaults or of {kept_label}")
    cross = {k: relative_spread([*wins[k], runs[k]]) or 0.0 for k in runs}
    if runs[kept_label] >= runs["defaults"]:
        raise QuizError("knee_ranking: the grid orders the values as the loop did")
    worst = max(cross, key=lambda k: cross[k])
    return {
        "type": "single",
        "right": "ending_only",
        "values": {
            "run": run_name(loop),
            **_workload(base.workload),
            "slo": str(base.slo).split(" @ ")[0],
            "rows": {
                "en": "; ".join(
                    f"{k} {', '.join(f'{v:.2f}' for v in vs)}" for k, vs in wins.items()
                ),
                "zh": "；".join(
                    f"{'默认配置' if k == 'defaults' else k} 为 {'、'.join(f'{v:.2f}' for v in vs)}"
                    for k, vs in wins.items()
                ),
            },
            "kept": kept_label,
            "defaults": f"{runs['defaults']:.2f}",
            "kept_goodput": f"{runs[kept_label]:.2f}",
            "worst": {"en": worst, "zh": "默认配置" if worst == "defaults" else worst},
            "cross": f"{cross[worst]:.0%}",
        },
    }


@generator("loop_ending")
def _g_loop_ending(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: run (a loop folder). Answer: keep.loop_outcome's past_knee, as run."""
    root = resolve_path(p["run"])
    steps, summary, pts = _loop(root)
    kept = [x for x in pts if x.knobs == (summary or {}).get("knobs")]
    if summary is None or not kept:
        raise QuizError(f"loop_ending: {root} has no summary or no point of its kept knobs")
    b = next((x for x in pts if x.knob == "baseline"), kept[0])
    w = b.workload
    tried = swept_knobs(steps)
    diag = summary.get("diagnosis") or {}
    o = loop_outcome(
        str(summary.get("stop_reason") or ""),
        all(x.meets_slo for x in kept),
        summary.get("request_goodput"),
        float(w["request_rate"]),
        tried,
        diag.get("knobs") or [],
        moves=diag.get("moves") or {},
        kept_knobs=summary.get("knobs") or {},
    )
    if o["outcome"] != "past_knee" or o["goodput_share"] is None:
        raise QuizError(f"loop_ending: {root} ended {o['outcome']}, not past the knee")
    if b.knob != "baseline" or summary.get("knobs") != b.knobs:
        raise QuizError(f"loop_ending: {root} kept a value: the item says it kept nothing")
    untried, in_effect = o["untried"], o.get("in_effect") or []
    return {
        "type": "single",
        "right": "past_knee",
        "values": {
            "run": run_name(root),
            **_workload(w),
            "slo": str(b.slo).split(" @ ")[0],
            "knobs": listed(f"`{k}`" for k in o["tried"]),
            "share": f"{o['goodput_share']:.0%}",
            "best": f"{float(summary['request_goodput'] or 0):.2f}",
            # the knobs the diagnosis named with no values, and those on by vLLM's default
            "untried": listed(f"`{k}`" for k in untried),
            "in_effect": listed(f"`{k}`" for k in in_effect),
            "named": ["untried"] * bool(untried) + ["in_effect"] * bool(in_effect),
        },
    }


@generator("spread_scale")
def _g_spread_scale(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: loop, grid, other_host. Answer: keep.decide's tie when the gain over the
    lower score passes the spread between servers but the (max - min) / mean gap does not."""
    loop, grid = resolve_path(p["loop"]), resolve_path(p["grid"]) / "grid"
    wins, kept, _ = _loop_windows(loop)
    runs = _grid_runs(grid)
    pick = kept.label
    if pick not in runs or len(runs) < 2:
        raise QuizError(f"spread_scale: the grid has no run of {pick}")
    margin = max(relative_spread([*wins[k], runs[k]]) or 0.0 for k in runs if k in wins)
    best = max(runs, key=lambda k: runs[k])
    d = decide([_run_point(best, runs[best])], runs[pick], current_spread=margin)
    gain, apart = float(d.gain or 0.0), float(d.apart or 0.0)
    if d.decision != "tie" or not apart <= margin < gain:
        raise QuizError("spread_scale: the two scales agree here; the item needs them apart")
    apart_hosts = p.get("other_host") in (best, pick)
    return {
        "type": "single",
        "right": "tie",
        "values": {
            "run": run_name(loop),
            "pick": pick,
            "best": best,
            "b": f"{runs[best]:.2f}",
            "k": f"{runs[pick]:.2f}",
            "hosts": ["two" if apart_hosts else "one"],
            "margin": f"{margin:.0%}",
            "apart": f"{apart:.0%}",
            "gain": f"{gain:.0%}",
        },
    }


def _run_point(label: str, score: float) -> dict[str, Any]:
    """One grid run as a point record for core.keep.decide: one valid window, no repeat."""
    window = {"status": "ok", "purpose": "measure", "index": 0, "seed": 0, "valid": True}
    window["score"] = {"request_goodput": score, "meets_slo": False}
    point = {"key": label, "knob": label, "value": None, "slo": "", "status": "ok"}
    return {**point, "knobs": {}, "workload": {}, "windows": [window]}


@generator("budget_unused")
def _g_budget_unused(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: run (a loop that diagnosed prefill). Answer: the steps used under half the
    budget and a prompt fits in it, so a bigger budget changes no step."""
    root = resolve_path(p["run"])
    steps, summary_, pts = _loop(root)
    summary = summary_ or {}
    ev = (summary.get("diagnosis") or {}).get("evidence") or {}
    base = next((x for x in pts if x.knob == "baseline"), None)
    if base is None or "tokens_per_step" not in ev:
        raise QuizError(f"budget_unused: {root} has no baseline or no tokens per step")
    used, budget = float(ev["tokens_per_step"]), int(ev["max_num_batched_tokens"])
    w = base.workload
    prompt = int(w["input_len"])
    if used >= 0.5 * budget or prompt > budget:
        raise QuizError("budget_unused: the steps used the budget; a bigger one could help")
    tried = [
        (r["value"], float(r["score"]) / float(st["score_before"]) - 1.0)
        for st in steps
        if st.get("kind") == "sweep" and st.get("knob") == "max_num_batched_tokens"
        for r in st.get("results") or []
        if r.get("score") is not None and st.get("score_before")
    ]
    return {
        "type": "single",
        "right": "unused",
        "values": {
            "run": run_name(root),
            "plen": prompt,
            "out": w["output_len"],
            "rate": fmt_num(w["request_rate"]),
            "slo": str(base.slo).split(" @ ")[0],
            "p99": f"{float(ev['p99_ttft_ms']):.0f}",
            "waiting": fmt_num(ev["waiting_max"]),
            "running": fmt_num(ev["running_max"]),
            "kv": f"{float(ev['kv_usage_max']):.0%}",
            "u": fmt_num(round(used)),
            "bud": fmt_num(budget),
            "moves": {
                "en": ", ".join(f"{v} {g:+.1%}" for v, g in tried),
                "zh": "、".join(f"{v} 为 {g:+.1%}" for v, g in tried),
            },
        },
    }
