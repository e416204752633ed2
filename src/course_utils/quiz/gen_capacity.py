"""Generators of capacity arithmetic (``core.capacity``) and lab 01's recorded runs: KV bytes
and tokens, concurrency, the TPOT floor, whether the KV cache bound, the same-batch spread."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course_utils.core import capacity, evalset, keep
from course_utils.core.records import read_jsonl
from course_utils.quiz.data import (
    item_data,
    item_model,
    logged_memory,
    resolve_path,
    run_name,
)
from course_utils.quiz.engine import QuizError, fmt_num, generator


def _shape(m: Any, kv_dtype: str) -> dict[str, Any]:
    """The values of an item's ``shape`` note: a token's KV bytes from the model's shape."""
    per = m.kv_bytes_per_token(kv_dtype)
    b = per // (2 * m.layers * m.kv_heads * m.head_dim)
    byte = {"en": "bytes" if b > 1 else "byte", "zh": "字节"}
    dims = {"layers": m.layers, "heads": m.kv_heads, "dim": m.head_dim}
    return {"shape": ["shape"], **dims, "b": b, "byte": byte, "per": fmt_num(per)}


@generator("kv_bytes_per_token")
def _g_kv_bytes(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, kv_dtype. Answer: ModelShape.kv_bytes_per_token."""
    m, dt = item_model(p)
    return {
        "type": "numeric",
        "answer": m.kv_bytes_per_token(dt),
        "tolerance": {"abs": 0},
        "values": {
            "name": m.name,
            "dt": dt,
            **_shape(m, dt),
        },
    }


@generator("kv_tokens")
def _g_kv_tokens(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, kv_memory_gib | log, kv_dtype, rel_tol. Answer: ModelShape.kv_tokens."""
    m, dt = item_model(p)
    facts, log = logged_memory(p)
    gib = facts["kv_memory_gib"]
    tokens = m.kv_tokens(gib, dt)
    logged = [] if "kv_tokens" not in facts else ["log"] if log else ["measured"]
    return {
        "type": "numeric",
        "answer": tokens,
        "tolerance": {"rel": p.get("rel_tol", 0.01)},
        "values": {
            "name": m.name,
            "gib": fmt_num(gib),
            "dt": dt,
            **_shape(m, dt),
            "bs": capacity.BLOCK_SIZE,
            "tokens": fmt_num(tokens),
            "log": log,
            "logged_tokens": fmt_num(facts.get("kv_tokens", 0)),
            "logged": logged,
        },
    }


@generator("max_concurrency")
def _g_max_concurrency(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, kv_memory_gib | log, max_model_len, kv_dtype, logged_concurrency.
    Answer: ModelShape.max_concurrency."""
    m, dt = item_model(p)
    facts, log = logged_memory(p)
    gib, mml = facts["kv_memory_gib"], int(p["max_model_len"])
    conc = m.max_concurrency(gib, mml, dt)
    blocks = m.kv_blocks(gib, dt)
    logged = "concurrency" in facts and facts.get("concurrency_len", mml) == mml
    return {
        "type": "numeric",
        "answer": round(conc, 2),
        "tolerance": {"rel": p.get("rel_tol", 0.01)},
        "values": {
            "name": m.name,
            "gib": fmt_num(gib),
            "mml": mml,
            "bs": capacity.BLOCK_SIZE,
            "blocks": fmt_num(blocks),
            "conc": f"{conc:.2f}",
            "logged_conc": f"{facts.get('concurrency', 0):.2f}",
            "log": {"en": f" (`{log}`)", "zh": f"（`{log}`）"} if log else "",
            "logged": ["logged"] if logged else [],
        },
    }


@generator("kv_gain")
def _g_kv_gain(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: records (lab 01 results.jsonl), model, gpu, base, to. Answer: the KV tokens at
    ``to`` from those at ``base``, the extra memory share going whole to KV."""
    src = resolve_path(p["records"])
    logged = {
        r["value"]: int(r["kv_cache_tokens"])
        for r in read_jsonl(src)
        if r.get("status") == "ok" and r.get("kv_cache_tokens")
    }
    (m, _), g = item_model(p), capacity.get_gpu(p["gpu"])
    base, to, tol = float(p["base"]), float(p["to"]), float(p.get("rel_tol", 0.005))
    if base not in logged or to not in logged:
        raise QuizError(f"kv_gain: {src} has no KV size at {base} and {to}")
    per = m.kv_bytes_per_token()
    extra = (to - base) * g.total_gib * capacity.GIB / per
    answer = round(logged[base] + extra)
    naive = logged[base] * to / base  # the mistake the explanation names
    if abs(logged[to] - answer) > tol * answer or abs(naive - answer) <= tol * answer:
        raise QuizError("kv_gain: the recorded size does not tell the two readings apart")
    return {
        "type": "numeric",
        "answer": answer,
        "tolerance": {"rel": tol},
        "values": {
            "run": src.parent.parent.name,
            "name": m.name,
            "gpu": g.name,
            "total": f"{g.total_gib:.1f}",
            "per": fmt_num(per),
            "base": f"{base:g}",
            "to": f"{to:g}",
            "d": f"{to - base:g}",
            "logged_base": fmt_num(logged[base]),
            "logged_to": fmt_num(logged[to]),
            "extra": fmt_num(round(extra)),
            "answer": fmt_num(answer),
            "naive": fmt_num(round(naive)),
        },
    }


@generator("kv_binding")
def _g_kv_binding(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: records (a lab 01 results.jsonl, recorded; or inline records), baseline,
    eval_set, max_num_seqs. Answer: keep.kv_check's demand_tokens for the baseline."""
    src = item_data(p, "records")
    records = read_jsonl(src) if isinstance(src, Path) else [dict(r) for r in src]
    base = p["baseline"]
    bound = evalset.prompt_tokens_bound(evalset.load_items(resolve_path(p["eval_set"])))
    kv = keep.kv_check(
        records, baseline=base, prompt_tokens_bound=bound, max_num_seqs=p.get("max_num_seqs")
    )
    if kv is None:
        raise QuizError(f"kv_binding: no baseline {base!r} with a KV size in the records")
    return {
        "type": "numeric",
        "answer": kv["demand_tokens"],
        "tolerance": {"rel": p.get("rel_tol", 0.05)},
        "values": {
            "run": src.parent.parent.name if isinstance(src, Path) else "",
            "where": ["recorded"] if isinstance(src, Path) else [],
            "n": kv["load_prompts"],
            "pt": kv["prompt_tokens"],
            "out": kv["out_tokens"],
            "at": kv["at_once"],
            "base": base,
            "kv": fmt_num(kv["kv_tokens"]),
            "bs": capacity.BLOCK_SIZE,
            "per": kv["per_request_tokens"],
            "demand": fmt_num(kv["demand_tokens"]),
            "share": f"{kv['demand_tokens'] / kv['kv_tokens']:.0%}",
            "verdict": ["binds" if kv["binding"] else "free"],
        },
    }


def _same_batch_points(src: Any, base: Any, cand: Any) -> dict[Any, dict[str, Any]]:
    """same_batch_spread's points {value: {tok_s, gen_before_full}, "window": {from_s, to_s}}."""
    if not isinstance(src, Path):
        pts = {(k if k == "window" else float(k)): dict(v) for k, v in src.items()}
        return pts
    recs = read_jsonl(src / "results.jsonl")
    spread = keep.same_batch_gap(src, recs, baseline=base)
    if spread is None:
        raise QuizError(f"same_batch_spread: no engine stats for {base!r} in {src}")
    tok = {r["value"]: r["output_tok_s"] for r in recs if r.get("status") == "ok"}
    sm = spread["shared_means"][cand]
    lo, hi = spread["windows_s"][cand]
    pts = {
        base: {"tok_s": tok[base], "gen_before_full": sm["baseline"]},
        cand: {"tok_s": tok[cand], "gen_before_full": sm["value"]},
        "window": {"from_s": lo, "to_s": hi},
    }
    return pts


def _repeat(p: Mapping[str, Any], base: Any) -> dict[str, Any]:
    """The values of the note on ``params.repeat`` (two recorded folders of the same sweep,
    run in the same order): the baseline's output tok/s in each; no note when absent."""
    dirs = [resolve_path(d) for d in p.get("repeat") or []]
    if len(dirs) != 2 or not all((d / "results.jsonl").is_file() for d in dirs):
        return {"rep": [], **dict.fromkeys(("run_a", "run_b", "rep_a", "rep_b", "apart"), "")}
    tok = [
        next(r["output_tok_s"] for r in read_jsonl(d / "results.jsonl") if r["value"] == base)
        for d in dirs
    ]
    return {
        "rep": ["repeat"],
        "run_a": run_name(dirs[0]),
        "run_b": run_name(dirs[1]),
        "rep_a": fmt_num(round(tok[0])),
        "rep_b": fmt_num(round(tok[1])),
        "apart": f"{max(tok) / min(tok) - 1.0:.0%}",
    }


@generator("same_batch_spread")
def _g_same_batch_spread(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: run (lab 01 folder or inline points), baseline, candidate, min_gain, repeat.
    Answer: the gap before the KV cache filled exceeds the effect: no verdict."""
    src = item_data(p, "run")
    base, cand = p["baseline"], p["candidate"]
    pts = _same_batch_points(src, base, cand)
    b, c = pts[base], pts[cand]
    lo, hi = pts["window"]["from_s"], pts["window"]["to_s"]
    return {
        "type": "single",
        "right": "spread",
        "values": {
            "run": src.parent.name if isinstance(src, Path) else "",
            "where": ["recorded"] if isinstance(src, Path) else [],
            "base": base,
            "cand": cand,
            "tok_b": fmt_num(round(b["tok_s"])),
            "tok_c": fmt_num(round(c["tok_s"])),
            "overall": f"{c['tok_s'] / b['tok_s'] - 1.0:+.0%}",
            "faster": f"{b['tok_s'] / c['tok_s'] - 1.0:.0%}",  # the baseline over the candidate
            "lo": lo,
            "hi": hi,
            "gen_b": fmt_num(round(b["gen_before_full"])),
            "gen_c": fmt_num(round(c["gen_before_full"])),
            "gap": f"{c['gen_before_full'] / b['gen_before_full'] - 1.0:+.0%}",
            "gain": f"{float(p.get('min_gain', 0.05)):.0%}",
            **_repeat(p, base),
        },
    }


@generator("tpot_floor")
def _g_tpot_floor(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, gpu, batch, context_tokens, rel_tol. Answer: capacity.tpot_floor_ms."""
    m, _ = item_model(p)
    g = capacity.get_gpu(p.get("gpu", "rtx4090"))
    batch, ctx = int(p.get("batch", 1)), int(p.get("context_tokens", 0))
    ms = capacity.tpot_floor_ms(m, g, batch=batch, context_tokens=ctx)
    return {
        "type": "numeric",
        "answer": round(ms, 2),
        "tolerance": {"rel": p.get("rel_tol", 0.1)},
        "values": {
            "name": m.name,
            "wgib": f"{m.weight_gib():.2f}",
            "gpu": g.name,
            "bw": fmt_num(g.hbm_gbps),
            "batch": batch,
            "ctx": ctx,
            "gb": f"{m.weight_bytes() / 1e9:.2f}",
            "ms": f"{ms:.2f}",
        },
    }
