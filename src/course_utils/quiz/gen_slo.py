"""Generators of SLO scoring (``core.slo``: vLLM's per-request goodput and the lesson's p99
gate) and of the decision tree (``core.diagnose`` on /metrics series)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course_utils.core import diagnose, knobs, metrics
from course_utils.core import slo as slo_mod
from course_utils.quiz.data import (
    item_bench,
    item_data,
    item_slo,
    option_list,
    per_request_of,
    recorded_point,
    recorded_sweep,
    requests_bench,
    resolve_path,
    run_name,
    slo_text,
    synthetic_series,
)
from course_utils.quiz.engine import LANGS, QuizError, fmt_num, generator, listed, sep
from course_utils.quiz.gen_knobs import CONSTRAINTS, each, marked, move_word


def _requests(b: Any) -> dict[str, Any]:
    """The values of an item's ``requests`` note: the run, and each request's TTFT/TPOT."""
    per = per_request_of(b) or {"ttft": [], "tpot": []}
    pairs = [f"{t:.0f}/{d:.0f}" for t, d in zip(per["ttft"], per["tpot"], strict=True)]
    return {
        "completed": b.completed,
        "duration": fmt_num(b.duration),
        "pairs": {"en": "; ".join(pairs), "zh": "；".join(pairs)},
    }


@generator("request_goodput")
def _g_request_goodput(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: slo, requests (inline ttft_ms/tpot_ms/output_len/duration_s, or a path to a
    --save-detailed result). Answer: slo.request_goodput (vLLM's per-request goodput)."""
    s, b = item_slo(p), requests_bench(p)
    g = slo_mod.request_goodput(b, s)
    if g is None:
        raise QuizError("this result has no per-request data")
    return {
        "type": "numeric",
        "answer": round(g, 4),
        "tolerance": {"abs": 0.01},
        "values": {
            "requests": ["requests"],
            **_requests(b),
            "targets": " ".join(s.goodput_args()),
            "good": round(g * float(b.duration)),
            "g": f"{g:.2f}",
            "thr": f"{b.request_throughput:.2f}",
        },
    }


@generator("p99_gate")
def _g_p99_gate(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: slo, requests (as request_goodput) or bench (a result). Answer: slo.score, as
    the item's choice pass, fail-<target> (the one target missed) or fail-several."""
    s = item_slo(p)
    rec = recorded_point(p)
    if not rec and ("requests" in p or "ttft_ms" in p):
        b = requests_bench(p)
    else:
        b = item_bench(rec["bench"] if rec else item_data(p, "bench"))
    sc = slo_mod.score(b, s)
    over = [k for k, v in s.targets().items() if (b.percentile(k, s.percentile) or 0) > v]
    p99s = _p99s(b, s)
    thr = f"{b.request_throughput:.2f} req/s"
    right = "pass" if sc.meets_slo else f"fail-{over[0]}" if len(over) == 1 else "fail-several"
    return {
        "type": "single",
        "right": right,
        "values": {
            # a saved result: its p99s and throughput are what the gate reads
            "measured": ["requests" if per_request_of(b) is not None else "saved"],
            **_requests(b),
            "thr": thr,
            "slo": {lg: slo_text(s, lg) for lg in LANGS},
            "p99s": {"en": ", ".join(p99s), "zh": "，".join(p99s)},
            "violations": ["missed"] if sc.violations else [],
            "missed": "; ".join(sc.violations),
            "why": {lg: sc.why_they_differ(lg) for lg in LANGS},
        },
    }


@generator("slo_compare")
def _g_slo_compare(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: slo, configs. Answer: the config both goodputs rank first."""
    s = item_slo(p)
    rows = []
    for c in p["configs"]:
        b = item_bench(c)
        rows.append(
            {
                "name": c["name"],
                "b": b,
                "gate": slo_mod.gate_goodput(b, s),
                "req": float(c["request_throughput"]) * float(c["good_share"]),
                "share": float(c["good_share"]),
            }
        )
    best_req = max(rows, key=lambda r: r["req"])["name"]
    best_gate = max(rows, key=lambda r: r["gate"])["name"]
    if best_req != best_gate:
        raise QuizError("slo_compare: the two goodputs rank the configs differently")

    def desc(r: dict[str, Any], lg: str) -> str:
        b = r["b"]
        p99 = [f"p99 {k.upper()} {fmt_num(b.percentile(k))} ms" for k in s.targets()]
        ok = "的请求各项都达标" if lg == "zh" else "of requests within every target"
        parts = [f"{b.request_throughput:.2f} req/s", *p99, f"{r['share']:.0%} {ok}"]
        return r["name"] + sep(":", lg) + sep(",", lg).join(parts)

    def score(r: dict[str, Any], lg: str) -> str:
        gate = f"{'p99 门槛' if lg == 'zh' else 'p99 gate'} {r['gate']:.2f} req/s"
        return f"{r['name']}{sep(':', lg)}vLLM goodput {r['req']:.2f} req/s{sep(',', lg)}{gate}"

    def joined(fn: Any, lg: str) -> str:
        return sep(";", lg).join(fn(r, lg) for r in rows)

    return {
        "type": "single",
        "choices": option_list([(r["name"], r["name"] == best_req, r["name"]) for r in rows]),
        "values": {
            "rows": {lg: joined(desc, lg) for lg in LANGS},
            "slo": {lg: slo_text(s, lg) for lg in LANGS},
            "scores": {lg: joined(score, lg) for lg in LANGS},
        },
    }


def _p99s(b: Any, s: Any) -> list[str]:
    """``p99 TTFT 12.3 ms`` for each target of ``s`` the result reports."""
    pcts = {k: b.percentile(k, s.percentile) for k in s.targets()}
    return [f"p99 {k.upper()} {v:.1f} ms" for k, v in pcts.items() if v is not None]


def _sweep_rows(pts: list[dict[str, Any]], s: Any, how: str, lang: str) -> str:
    """What each point's score is read from: throughput and p99s for the gate, good requests
    and the run's length for vLLM's goodput (good = goodput x duration, as vLLM counts)."""
    rows = []
    for pt in pts:
        b = pt["bench"]
        if how == "gate":
            p99 = sep(",", lang).join(_p99s(b, s))
            thr = f"{b.request_throughput:.2f} req/s"
            rows.append(f"{pt['value']}{sep(':', lang)}{thr}{sep(',', lang)}{p99}")
            continue
        good = round(float(slo_mod.request_goodput(b, s) or 0.0) * float(b.duration))
        if lang == "zh":
            rows.append(
                f"{pt['value']}：{b.completed} 个请求里 {good} 个各项达标，用时 {fmt_num(b.duration)} 秒"
            )
        else:
            rows.append(
                f"{pt['value']}: {good} of {b.completed} requests within every target "
                f"in {fmt_num(b.duration)} s"
            )
    return sep(";", lang).join(rows)


@generator("sweep_best")
def _g_sweep_best(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: knob, slo, score (gate|request), results and/or points. Answer: the value
    with the highest score, or "none" when all score 0."""
    s, how = item_slo(p), p.get("score", "gate")
    if how not in ("gate", "request"):
        raise QuizError("score must be gate or request")
    pts = recorded_sweep(p)
    fn = slo_mod.gate_goodput if how == "gate" else slo_mod.request_goodput
    scores = [(pt["value"], float(fn(pt["bench"], s) or 0.0)) for pt in pts]
    best = max(v for _, v in scores)
    winners = [val for val, v in scores if v == best]
    win = winners[0] if best > 0 and len(winners) == 1 else "none"
    flag = knobs.get(p["knob"]).flag
    rate = next((pt["rate"] for pt in pts if pt["rate"]), None)
    try:
        run = f"`{run_name(resolve_path(p['results']))}`"
    except (KeyError, QuizError):
        run = ""
    return {
        "type": "single",
        "choices": option_list([(f"`{flag} {v}`", v == win, str(v)) for v, _ in scores]),
        "right": "none" if win == "none" else (),
        "values": {
            "run": run,
            "flag": flag,
            "vals": listed(v for v, _ in scores),
            "at": ["rate"] if rate else [],
            "rate": fmt_num(rate) if rate else "",
            "slo": {lg: slo_text(s, lg) for lg in LANGS},
            "shown": {lg: _sweep_rows(pts, s, how, lg) for lg in LANGS},
            "name": [how],
            "listing": {
                lg: sep(";", lg).join(f"{v}{sep(':', lg)}{sc:.2f} req/s" for v, sc in scores)
                for lg in LANGS
            },
        },
    }


# ---- /metrics and the decision tree


def _diagnosis(p: Mapping[str, Any]) -> tuple[Any, Any, Any, Any, Any]:
    """The tree's diagnosis of the item's recorded point, else of its ``series``/``bench``
    params; with the series summary, bench result, SLO and max_num_seqs."""
    rec = recorded_point(p)
    if rec:
        src, bsrc = rec["series"], rec["bench"]
        mns = rec["knobs"].get("max_num_seqs", p.get("max_num_seqs"))
    else:
        src, bsrc, mns = item_data(p, "series"), item_data(p, "bench"), p.get("max_num_seqs")
    samples = metrics.load_series(src) if isinstance(src, Path) else synthetic_series(src)
    bench, s = None if bsrc is None else item_bench(bsrc), item_slo(p)
    d = diagnose.diagnose(samples, bench, s, max_num_seqs=mns)
    return d, metrics.summarize(samples), bench, s, mns


def _observed(cap: int | None, summary: Any, bench: Any, s: Any) -> dict[str, Any]:
    """The values of the item's ``observed`` note: the sampled gauges, p99s and SLO."""
    p99 = [
        f"p99 {k.upper()} {fmt_num(round(bench.percentile(k), 1))} ms"
        for k in ("ttft", "tpot")
        if bench is not None and bench.percentile(k) is not None
    ]
    return {
        "observed": ["observed"],
        "waiting": metrics.WAITING,
        "running": metrics.RUNNING,
        "kv_name": metrics.KV_USAGE,
        "w_max": fmt_num(summary.waiting_max),
        "on": {"en": f" (max_num_seqs {cap})", "zh": f"（max_num_seqs {cap}）"} if cap else "",
        "kv_max": f"{summary.kv_usage_max:.2f}",
        "p99": {"en": ", ".join(p99) or "n/a", "zh": "，".join(p99) or "无"},
        "slo": {lg: slo_text(s, lg) for lg in LANGS},
    }


def _leaf(d: Any, summary: Any, cap: int | None) -> dict[str, Any]:
    """The item's note on the leaf the tree reached, and the numbers it may cite."""
    return {
        "why": [d.leaf],
        "w": f"{summary.waiting_mean:.1f}",
        "r": fmt_num(summary.running_max),
        "cap": cap if cap else "?",
        "kv": f"{summary.kv_usage_max:.0%}",
        "pre": fmt_num(summary.preemptions),
    }


@generator("diagnose_constraint")
def _g_diagnose_constraint(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: series (path/glob of a metrics JSONL, or inline lists), bench (path or dict of
    p99 keys), slo, max_num_seqs. Answer: diagnose.diagnose(...).constraint."""
    d, summary, bench, s, cap = _diagnosis(p)
    return {
        "type": "single",
        "choices": option_list([(CONSTRAINTS[c], c == d.constraint, c) for c in CONSTRAINTS]),
        "values": {
            **_observed(cap, summary, bench, s),
            **_leaf(d, summary, cap),
        },
    }


@generator("diagnose_knobs")
def _g_diagnose_knobs(p: Mapping[str, Any]) -> dict[str, Any]:
    """Same params as diagnose_constraint, plus knobs (the options shown). Answer: the
    diagnosis's knobs among them (or 'no engine knob'); each option says why."""
    d, summary, bench, s, cap = _diagnosis(p)
    names = p.get("knobs") or list(knobs.KNOBS)
    shown = [knobs.get(n) for n in names]
    good = set(d.knobs)

    def text(k: Any, lg: str) -> str:
        mv = move_word(d.moves[k.name], lg) if k.name in good else k.move[lg]
        return f"`{k.flag}`{'：' if lg == 'zh' else ': '}{mv}"

    choices = option_list(
        [({lg: text(k, lg) for lg in LANGS}, k.name in good, k.name) for k in shown]
    )
    if good and not any(c["correct"] for c in choices):
        raise QuizError("none of the listed knobs is in the diagnosis")

    def line(k: Any, lg: str) -> str:
        if k.name in good:
            label = f"（{k.label[lg]}）" if lg == "zh" else f" ({k.label[lg]})"
            return marked(k, True, lg, move_word(d.moves[k.name], lg) + label)
        off = "，不作用于这个约束" if lg == "zh" else ", not what binds here"
        return marked(k, False, lg, k.label[lg] + off)

    return {
        "type": "multiple",
        "choices": choices,
        "right": () if good else "none",  # the item's "no engine knob" choice
        "values": {
            **_observed(cap, summary, bench, s),
            **_leaf(d, summary, cap),
            "lines": {lg: each([line(k, lg) for k in shown], lg) for lg in LANGS},
        },
    }
