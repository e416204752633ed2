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
    where = (folder.parent if folder.name == "scaleout" else folder).name
    seen = sorted(
        (float(x["rate_key"]), keep.as_point(x).meets_slo) for x in recs if x.get("valid")
    )
    rows = {
        "en": ", ".join(f"{fmt_num(r)}: {'met' if m else 'missed'}" for r, m in seen),
        "zh": "，".join(f"{fmt_num(r)}：{'达标' if m else '未达标'}" for r, m in seen),
    }
    hi_en = "no rate above it that missed" if hi is None else f"{fmt_num(hi)} req/s (missed)"
    hi_zh = "（更高的速率没测到未达标）" if hi is None else f" {fmt_num(hi)} req/s（未达标）"
    h = f"{headroom:.0%}"
    short = {"en": "", "zh": ""}
    if plan.short == plan.safe:
        short = {
            "en": " Both ends of the range give the same count here.",
            "zh": "这里区间两端算出的副本数相同。",
        }
    elif plan.short is not None:
        short = {
            "en": f" From the upper end you would get {plan.short}; fewer than that cannot keep "
            "the headroom even at the knee's upper bound.",
            "zh": f"按上端算是 {plan.short} 个；比它还少，就算拐点在上界也留不出余量。",
        }
    return {
        "type": "numeric",
        "answer": plan.safe,
        "tolerance": {"abs": 0},
        "unit": {"en": "replicas", "zh": "个副本"},
        "prompt": {
            "en": f"Recorded run `{where}`, lab 03: one GPU's offered-rate scan under the SLO "
            f"({rows['en']}; req/s). You must serve {fmt_num(target)} req/s with {h} of each "
            "replica's knee kept free. How many replicas do you provision?",
            "zh": f"已录制的实测 `{where}`，实验 03：单卡在 SLO 下的速率扫描（{rows['zh']}；单位 "
            f"req/s）。要服务 {fmt_num(target)} req/s，每个副本的拐点留出 {h} 余量。要部署几个副本？",
        },
        "explain": {
            "en": f"The knee lies between {fmt_num(lo)} req/s (met) and {hi_en}. Plan each replica "
            f"at {fmt_num(lo)} x (1 - {headroom:g}) = {plan.per_replica_low:.4g} req/s, so "
            f"{fmt_num(target)} / {plan.per_replica_low:.4g} rounds up to {plan.safe}: the safe "
            "end, since no replica then runs above a rate measured to meet the SLO." + short["en"],
            "zh": f"拐点在 {fmt_num(lo)} req/s（达标）和{hi_zh}之间。每个副本按 {fmt_num(lo)} ×"
            f"（1 - {headroom:g}）= {plan.per_replica_low:.4g} req/s 规划，{fmt_num(target)} / "
            f"{plan.per_replica_low:.4g} 向上取整得 {plan.safe}：这是安全端，每个副本都不会跑在"
            "实测达标的速率之上。" + short["zh"],
        },
    }
