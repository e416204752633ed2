"""Generators of capacity arithmetic (``core.capacity``) and lab 01's recorded runs: KV bytes
and tokens, concurrency, the TPOT floor, whether the KV cache bound, the same-batch spread."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course_utils.quiz.data import (
    item_data,
    item_model,
    keyed,
    logged_memory,
    resolve_path,
    run_name,
)
from course_utils.quiz.engine import LANGS, QuizError, fmt_num, generator


def _shape_text(m: Any, kv_dtype: str) -> dict[str, str]:
    b = m.kv_bytes_per_token(kv_dtype) // (2 * m.layers * m.kv_heads * m.head_dim)
    return {
        "en": f"2 (K and V) × {m.layers} layers × {m.kv_heads} KV heads × head dim "
        f"{m.head_dim} × {b} byte{'s' if b > 1 else ''} = "
        f"{fmt_num(m.kv_bytes_per_token(kv_dtype))} bytes per token",
        "zh": f"2（K 与 V）× {m.layers} 层 × {m.kv_heads} 个 KV 头 × 头维 {m.head_dim} × "
        f"{b} 字节 = 每 token {fmt_num(m.kv_bytes_per_token(kv_dtype))} 字节",
    }


def _recorded(run: str) -> dict[str, str]:
    """`` (the recorded run NAME)`` to follow a lab's name in a prompt; empty without a run."""
    if not run:
        return {"en": "", "zh": ""}
    return {"en": f" (the recorded run {run})", "zh": f"（已录制的实测 {run}）"}


def _log_name(p: Mapping[str, Any]) -> str:
    """The recorded log a kv item read, as ``h200-.../serve.log``."""
    path = item_data(p, "log")
    return run_name(path) if isinstance(path, Path) else ""


@generator("kv_bytes_per_token")
def _g_kv_bytes(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, kv_dtype. Answer: ModelShape.kv_bytes_per_token."""
    m, dt = item_model(p)
    shape = _shape_text(m, dt)
    return {
        "type": "numeric",
        "answer": m.kv_bytes_per_token(dt),
        "tolerance": {"abs": 0},
        "unit": {"en": "bytes", "zh": "字节"},
        "prompt": {
            "en": f"{m.name} ({m.layers} layers, {m.kv_heads} KV heads, head dim "
            f"{m.head_dim}), `--kv-cache-dtype {dt}`: how many bytes of KV cache "
            "does one token take across all layers?",
            "zh": f"{m.name}（{m.layers} 层、{m.kv_heads} 个 KV 头、头维 {m.head_dim}），"
            f"`--kv-cache-dtype {dt}`：一个 token 在所有层上占多少字节 KV cache？",
        },
        "explain": {lg: shape[lg] + ("。" if lg == "zh" else ".") for lg in LANGS},
    }


@generator("kv_tokens")
def _g_kv_tokens(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, kv_memory_gib | log, kv_dtype, rel_tol. Answer: ModelShape.kv_tokens."""
    from course_utils.core import capacity

    m, dt = item_model(p)
    facts, from_log = logged_memory(p)
    gib = facts["kv_memory_gib"]
    tokens = m.kv_tokens(gib, dt)
    shape = _shape_text(m, dt)
    bs = capacity.BLOCK_SIZE
    logged = {"en": "", "zh": ""}
    if "kv_tokens" in facts:
        log = _log_name(p) if from_log else ""
        src = {
            "en": f"the recorded start-up log `{log}`" if from_log else "the measured log",
            "zh": f"已录制的启动日志 `{log}` " if from_log else "实测日志",
        }
        logged = {
            "en": f" vLLM's own line in {src['en']}: `GPU KV cache size: "
            f"{fmt_num(facts['kv_tokens'])} tokens` (the GiB figure it prints is "
            "rounded).",
            "zh": f"{src['zh']}里 vLLM 自己的一行：`GPU KV cache size: "
            f"{fmt_num(facts['kv_tokens'])} tokens`（它打印的 GiB 数是四舍五入后的）。",
        }
    return {
        "type": "numeric",
        "answer": tokens,
        "tolerance": {"rel": p.get("rel_tol", 0.01)},
        "unit": {"en": "tokens", "zh": "token"},
        "prompt": {
            "en": f"vLLM logs `Available KV cache memory: {fmt_num(gib)} GiB` for "
            f"{m.name} (`--kv-cache-dtype {dt}`). How many tokens of KV cache "
            "is that?",
            "zh": f"vLLM 为 {m.name} 打印 `Available KV cache memory: {fmt_num(gib)} GiB`"
            f"（`--kv-cache-dtype {dt}`）。这能装多少 token 的 KV？",
        },
        "explain": {
            "en": f"{shape['en']}; {fmt_num(gib)} GiB ÷ that, rounded down to whole "
            f"{bs}-token blocks (vllm/v1/core/kv_cache_utils.py) = {fmt_num(tokens)} "
            f"tokens.{logged['en']}",
            "zh": f"{shape['zh']}；{fmt_num(gib)} GiB ÷ 它，向下取整到 {bs} token 一个的整块"
            f"（vllm/v1/core/kv_cache_utils.py）= {fmt_num(tokens)} token。{logged['zh']}",
        },
    }


@generator("max_concurrency")
def _g_max_concurrency(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, kv_memory_gib | log, max_model_len, kv_dtype, logged_concurrency.
    Answer: ModelShape.max_concurrency."""
    m, dt = item_model(p)
    facts, from_log = logged_memory(p)
    gib, mml = facts["kv_memory_gib"], int(p["max_model_len"])
    conc = m.max_concurrency(gib, mml, dt)
    blocks = m.kv_blocks(gib, dt)
    logged = {"en": "", "zh": ""}
    if "concurrency" in facts and facts.get("concurrency_len", mml) == mml:
        where = f" (`{_log_name(p)}`)" if from_log else ""
        logged = {
            "en": f" vLLM logged {facts['concurrency']:.2f}x{where}.",
            "zh": f"vLLM 日志{where.replace(' (', '（').replace(')', '）')}里是 "
            f"{facts['concurrency']:.2f}x。",
        }
    return {
        "type": "numeric",
        "answer": round(conc, 2),
        "tolerance": {"rel": p.get("rel_tol", 0.01)},
        "unit": {"en": "requests", "zh": "个请求"},
        "prompt": {
            "en": f"{m.name}, {fmt_num(gib)} GiB of KV cache, `--max-model-len {mml}`: "
            "what 'Maximum concurrency' does vLLM log at start-up, i.e. how many "
            "full-length requests fit at once?",
            "zh": f"{m.name}，KV cache {fmt_num(gib)} GiB，`--max-model-len {mml}`："
            "vLLM 启动日志里的「Maximum concurrency」是多少，即同时能装下几个满长度请求？",
        },
        "explain": {
            "en": f"{fmt_num(blocks)} blocks ÷ ceil({mml} / 16) blocks per request = "
            f"{conc:.2f}×. Requests shorter than {mml} tokens fit more."
            f"{logged['en']}",
            "zh": f"{fmt_num(blocks)} 个 block ÷ 每请求 ceil({mml} / 16) 个 block = "
            f"{conc:.2f}×。比 {mml} 短的请求能装更多。{logged['zh']}",
        },
    }


@generator("kv_gain")
def _g_kv_gain(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: records (lab 01 results.jsonl), model, gpu, base, to. Answer: the KV tokens at
    ``to`` from those at ``base``, the extra memory share going whole to KV."""
    from course_utils.core import capacity
    from course_utils.core.records import read_jsonl

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
    run = src.parent.parent.name
    head = {
        "en": f"Lab 01 in the recorded run `{run}`, {m.name} on one {g.name} (vLLM sees "
        f"{g.total_gib:.1f} GiB in all; {fmt_num(per)} bytes of KV per token): at "
        f"`gpu_memory_utilization={base:g}` vLLM logged `GPU KV cache size: "
        f"{fmt_num(logged[base])} tokens`. Before you run {to:g}: how many tokens will it log?",
        "zh": f"已录制的实测 `{run}` 中的实验 01，{m.name} 跑在一张 {g.name} 上（vLLM 看到的总显存是 "
        f"{g.total_gib:.1f} GiB；每 token 的 KV 占 {fmt_num(per)} 字节）：`gpu_memory_utilization="
        f"{base:g}` 时 vLLM 日志是 `GPU KV cache size: {fmt_num(logged[base])} tokens`。还没跑 "
        f"{to:g} 之前，先算：它会打印多少 token？",
    }
    d = to - base
    return {
        "type": "numeric",
        "answer": answer,
        "tolerance": {"rel": tol},
        "unit": {"en": "tokens", "zh": "token"},
        "prompt": head,
        "explain": {
            "en": "Weights, activation peak and CUDA graphs take the same memory at both settings, "
            f"so the extra share goes whole to KV: {d:g} × {g.total_gib:.1f} GiB ÷ "
            f"{fmt_num(per)} bytes = {fmt_num(round(extra))} more tokens, {fmt_num(answer)} in "
            f"all (vLLM logged {fmt_num(logged[to])}). Scaling by {to:g} / {base:g} "
            f"({fmt_num(round(naive))}) grows the fixed costs too.",
            "zh": "权重、激活峰值和 CUDA graph 在两个设置下占的显存一样，多出来的那一份全给了 KV："
            f"{d:g} × {g.total_gib:.1f} GiB ÷ {fmt_num(per)} 字节 = 多 {fmt_num(round(extra))} 个 token，"
            f"一共 {fmt_num(answer)}（vLLM 实际打印 {fmt_num(logged[to])}）。按 {to:g} / {base:g} 等比放大"
            f"（{fmt_num(round(naive))}）等于把固定开销也一起放大了。",
        },
    }


@generator("kv_binding")
def _g_kv_binding(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: records (a lab 01 results.jsonl, recorded; or inline records), baseline,
    eval_set, max_num_seqs. Answer: keep.kv_check's demand_tokens for the baseline."""
    from course_utils.core import capacity, evalset, keep
    from course_utils.core.records import read_jsonl

    src = item_data(p, "records")
    records = read_jsonl(src) if isinstance(src, Path) else [dict(r) for r in src]
    base = p["baseline"]
    bound = evalset.prompt_tokens_bound(evalset.load_items(resolve_path(p["eval_set"])))
    kv = keep.kv_check(
        records, baseline=base, prompt_tokens_bound=bound, max_num_seqs=p.get("max_num_seqs")
    )
    if kv is None:
        raise QuizError(f"kv_binding: no baseline {base!r} with a KV size in the records")
    out_tokens, bs = kv["out_tokens"], capacity.BLOCK_SIZE
    share = kv["demand_tokens"] / kv["kv_tokens"]
    verdict = {
        "en": "it binds: more KV lets more requests run at once",
        "zh": "卡住了：更多 KV 让更多请求同时运行",
    }
    if not kv["binding"]:
        verdict = {
            "en": "it does not bind: more KV cannot speed this pass up, so a gain from raising "
            "the knob needs another explanation before you keep it",
            "zh": "没有卡住：更多 KV 不可能让这一轮更快，所以调高旋钮带来的提升另有原因，保留之前要先查清",
        }
    where = _recorded(src.parent.parent.name if isinstance(src, Path) else "")
    at = kv["at_once"]
    return {
        "type": "numeric",
        "answer": kv["demand_tokens"],
        "tolerance": {"rel": p.get("rel_tol", 0.05)},
        "unit": {"en": "tokens", "zh": "token"},
        "prompt": {
            "en": f"Lab 01's speed pass{where['en']}: {kv['load_prompts']} "
            f"requests submitted at once, each a prompt of at most "
            f"{kv['prompt_tokens']} tokens plus {out_tokens} generated "
            f"(`ignore_eos`), at most {at} running at once. The baseline "
            f"`gpu_memory_utilization={base}` logged `GPU KV cache size: "
            f"{fmt_num(kv['kv_tokens'])} tokens`. How many KV tokens can the "
            f"pass need at most ({bs}-token blocks)?",
            "zh": f"实验 01 的速度测试{where['zh']}：一次提交 {kv['load_prompts']} 个请求，"
            f"每个 prompt 至多 {kv['prompt_tokens']} token，再生成 {out_tokens} "
            f"个（`ignore_eos`），同时最多运行 {at} 个。基线 "
            f"`gpu_memory_utilization={base}` 的日志是 `GPU KV cache size: "
            f"{fmt_num(kv['kv_tokens'])} tokens`。这一轮最多需要多少 KV token"
            f"（按 {bs} token 的 block 取整）？",
        },
        "explain": {
            "en": f"{at} x ceil(({kv['prompt_tokens']} + {out_tokens}) / {bs}) x {bs} = "
            f"{at} x {kv['per_request_tokens']} = {fmt_num(kv['demand_tokens'])} "
            f"tokens, {share:.0%} of the {fmt_num(kv['kv_tokens'])} in the pool: "
            f"{verdict['en']} (course_utils.core.keep.kv_check).",
            "zh": f"{at} x ceil(({kv['prompt_tokens']} + {out_tokens}) / {bs}) x {bs} = "
            f"{at} x {kv['per_request_tokens']} = {fmt_num(kv['demand_tokens'])} "
            f"token，只占池子 {fmt_num(kv['kv_tokens'])} 的 {share:.0%}："
            f"{verdict['zh']}（course_utils.core.keep.kv_check）。",
        },
    }


def _same_batch_points(
    src: Any, base: Any, cand: Any
) -> tuple[dict[Any, dict[str, Any]], dict[str, str]]:
    """same_batch_spread's points {value: {tok_s, gen_before_full}, "window": {from_s, to_s}}
    and the (en, zh) note naming the recorded run ("" for inline data)."""
    from course_utils.core import keep
    from course_utils.core.records import read_jsonl

    if not isinstance(src, Path):
        pts = {(k if k == "window" else float(k)): dict(v) for k, v in src.items()}
        return pts, _recorded("")
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
    return pts, _recorded(src.parent.name)


def _same_batch_choices(base: Any, cand: Any, gap: float, faster: float) -> list[dict[str, Any]]:
    """Wrong: the pass's total taken as the knob's effect (keep-base), a bigger pool blamed
    for more preemption (preempt), "KV did not bind" where it did (no-bind)."""
    rows = {
        "spread": (
            f"No verdict: a {gap:+.0%} gap before the caches filled exceeds the effect",
            f"下不了结论：cache 填满前就有 {gap:+.0%} 的差距，比效应还大",
        ),
        "keep-base": (
            f"Keep {base}: the smaller KV pool is {faster:.0%} faster over the pass",
            f"保留 {base}：整轮来看，KV 池小一些反而快 {faster:.0%}",
        ),
        "preempt": (
            f"Revert to {base}: {cand} preempts more because its pool is larger",
            f"退回 {base}：{cand} 的池子更大，所以抢占更多",
        ),
        "no-bind": (
            "Ignore the knob: the caches filled at the end only, too late to matter",
            "不必理会这个旋钮：cache 到最后才满，来不及起作用",
        ),
    }
    return keyed(rows, "spread")


def _repeat(p: Mapping[str, Any], base: Any) -> dict[str, str]:
    """The explanation's sentence on ``params.repeat`` (two recorded folders of the same
    sweep, run in the same order): the baseline's output tok/s in each; '' when absent."""
    from course_utils.core.records import read_jsonl

    dirs = [resolve_path(d) for d in p.get("repeat") or []]
    if len(dirs) != 2 or not all((d / "results.jsonl").is_file() for d in dirs):
        return {"en": "", "zh": ""}
    tok = [
        next(r["output_tok_s"] for r in read_jsonl(d / "results.jsonl") if r["value"] == base)
        for d in dirs
    ]
    apart = max(tok) / min(tok) - 1.0
    names = [run_name(d) for d in dirs]
    a, b = fmt_num(round(tok[0])), fmt_num(round(tok[1]))
    return {
        "en": f" The same sweep run twice in the same order (`{names[0]}`, `{names[1]}`) put "
        f"{base} at {a} and {b} tok/s, {apart:.0%} apart with nothing changed, so gaps of "
        "this size come without the knob.",
        "zh": f"同一个 sweep 按同样顺序跑两次（`{names[0]}`、`{names[1]}`），{base} 分别是 {a} 和 "
        f"{b} tok/s，什么都没改也差了 {apart:.0%}，所以这么大的差距不需要旋钮也会出现。",
    }


@generator("same_batch_spread")
def _g_same_batch_spread(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: run (lab 01 folder or inline points), baseline, candidate, min_gain, repeat.
    Answer: the gap before the KV cache filled exceeds the effect: no verdict."""
    src = item_data(p, "run")
    base, cand = p["baseline"], p["candidate"]
    pts, where = _same_batch_points(src, base, cand)
    b, c = pts[base], pts[cand]
    overall = c["tok_s"] / b["tok_s"] - 1.0
    faster = b["tok_s"] / c["tok_s"] - 1.0  # the baseline over the candidate
    gap = c["gen_before_full"] / b["gen_before_full"] - 1.0
    gain = float(p.get("min_gain", 0.05))
    lo, hi = pts["window"]["from_s"], pts["window"]["to_s"]
    rep = _repeat(p, base)
    return {
        "type": "single",
        "prompt": {
            "en": f"Lab 01{where['en']}: `gpu_memory_utilization` {base} vs {cand}, with the KV "
            f"cache binding at both (requests preempted once it filled). Output tok/s over "
            f"the pass: {fmt_num(round(b['tok_s']))} vs {fmt_num(round(c['tok_s']))} "
            f"({overall:+.0%}). vLLM's 10 s stats lines: over the same seconds {lo}-{hi} of "
            f"each pass, before either cache filled, both ran the same requests at the "
            f"same lengths and generated {fmt_num(round(b['gen_before_full']))} vs "
            f"{fmt_num(round(c['gen_before_full']))} tok/s. What do you conclude?",
            "zh": f"实验 01{where['zh']}：`gpu_memory_utilization` {base} 对 {cand}，两边 KV cache "
            f"都成了瓶颈（填满后就有请求被抢占）。整轮输出 tok/s：{fmt_num(round(b['tok_s']))} 对 "
            f"{fmt_num(round(c['tok_s']))}（{overall:+.0%}）。vLLM 每 10 秒的统计行：在两轮相同的第 {lo}–{hi} 秒、"
            f"两边 cache 都还没满时，跑的是同样的请求、同样的长度，生成速度是 "
            f"{fmt_num(round(b['gen_before_full']))} 对 {fmt_num(round(c['gen_before_full']))} tok/s。"
            "结论是什么？",
        },
        "choices": _same_batch_choices(base, cand, gap, faster),
        "explain": {
            "en": f"Until a cache fills, every value of a capacity knob runs the same batch, so "
            f"the {gap:+.0%} gap there cannot come from the knob (the points ran in one order, "
            f"{base} first; clocks and memory placement are other candidates).{rep['en']} The "
            f"gap exceeds both the {overall:+.0%} over the pass ({base} {faster:.0%} faster) "
            f"and the {gain:.0%} min_gain, so no verdict on the knob survives it; lab 01 turns "
            "such a keep into recheck (course_utils.core.keep.same_batch_gap).",
            "zh": f"cache 填满之前，容量类旋钮的每个取值跑的都是同一批请求，所以那一段的 {gap:+.0%} 不可能"
            f"来自旋钮（两个点按固定顺序跑，{base} 在先；时钟、显存布局也都可能）。{rep['zh']}这个差距比"
            f"整轮的 {overall:+.0%}（{base} 快 {faster:.0%}）和 {gain:.0%} 的 min_gain 都大，关于这个旋钮"
            "的任何结论都站不住；实验 01 会把这种「保留」改判为 recheck"
            "（course_utils.core.keep.same_batch_gap）。",
        },
    }


@generator("tpot_floor")
def _g_tpot_floor(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: model, gpu, batch, context_tokens, rel_tol. Answer: capacity.tpot_floor_ms."""
    from course_utils.core import capacity

    m, _ = item_model(p)
    g = capacity.get_gpu(p.get("gpu", "rtx4090"))
    batch, ctx = int(p.get("batch", 1)), int(p.get("context_tokens", 0))
    ms = capacity.tpot_floor_ms(m, g, batch=batch, context_tokens=ctx)
    return {
        "type": "numeric",
        "answer": round(ms, 2),
        "tolerance": {"rel": p.get("rel_tol", 0.1)},
        "unit": {"en": "ms", "zh": "ms"},
        "prompt": {
            "en": f"Decode roofline: {m.name} (about {m.weight_gib():.2f} GiB of "
            f"weights) on one {g.name} ({fmt_num(g.hbm_gbps)} GB/s), batch {batch}, "
            f"{ctx} context tokens. What is the TPOT floor if every step reads "
            "all weights once?",
            "zh": f"decode 屋顶线：{m.name}（约 {m.weight_gib():.2f} GiB 权重）跑在一张 "
            f"{g.name}（{fmt_num(g.hbm_gbps)} GB/s）上，batch {batch}，上下文 {ctx} token。"
            "若每步都把全部权重读一遍，TPOT 下限是多少？",
        },
        "explain": {
            "en": f"{m.weight_bytes() / 1e9:.2f} GB ÷ {fmt_num(g.hbm_gbps)} GB/s ≈ "
            f"{ms:.2f} ms per token. Quantized weights shrink the bytes, which is "
            "why quantization speeds up memory-bound decode.",
            "zh": f"{m.weight_bytes() / 1e9:.2f} GB ÷ {fmt_num(g.hbm_gbps)} GB/s ≈ 每 token "
            f"{ms:.2f} ms。量化缩小权重字节，所以能加速受带宽限制的 decode。",
        },
    }
