"""How many replicas a target rate needs, from lab 03's recorded one-GPU knee."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from course_utils.quiz.data import resolve_path
from course_utils.quiz.engine import QuizError, fmt_num, generator


@generator("replicas_plan")
def _g_replicas_plan(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: target (req/s), headroom (0..1), run (optional: a run folder; default
    core.scaleout.RUN_DIR). Answer: the safe replica count from the recorded one-GPU knee."""
    from course_utils.core import keep, replicas, scaleout

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
            "hi": {
                "en": "no rate above it that missed"
                if hi is None
                else f"{fmt_num(hi)} req/s (missed)",
                "zh": "（更高的速率没测到未达标）"
                if hi is None
                else f" {fmt_num(hi)} req/s（未达标）",
            },
            "headroom": f"{headroom:g}",
            "per": f"{plan.per_replica_low:.4g}",
            "safe": plan.safe,
            "upper": plan.short or "",
            "short": ["same"]
            if plan.short == plan.safe
            else []
            if plan.short is None
            else ["upper"],
        },
    }
