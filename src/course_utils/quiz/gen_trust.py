"""Items on whether a measurement can be trusted: replayed prompts, a JIT compile inside
the window, preemption under a full KV cache."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course_utils.quiz.data import keyed, resolve_path, run_name
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


def _replay_choices(
    rows: list[dict[str, float]], bad: list[dict[str, float]]
) -> list[dict[str, Any]]:
    """Wrong: a flat p99 taken as proof (trust), the default prefix caching taken as what
    users get (default), the first rate blamed as cold (cold)."""
    bad_rates = "/".join(fmt_num(r["rate"]) for r in bad)
    top, first = fmt_num(rows[-1]["rate"]), fmt_num(rows[0]["rate"])
    rows_ = {
        "replay": (
            f"Not at {bad_rates} req/s: replayed prompts skipped their prefill",
            f"{bad_rates} req/s 不可信：重放的 prompt 跳过了 prefill",
        ),
        "trust": (
            f"Yes: p99 TTFT stays near 300 ms up to {top} req/s",
            f"可信：直到 {top} req/s，p99 TTFT 都在 300 ms 附近",
        ),
        "default": (
            "Yes: prefix caching is on by default, so this is what your users will see too",
            "可信：prefix caching 默认就是开启的，用户实际看到的也就是这个结果",
        ),
        "cold": (
            f"Not at {first} req/s: the first rate ran on a cold server, unwarmed",
            f"{first} req/s 的点不可信：第一个速率跑在还没预热的冷服务器上",
        ),
    }
    return keyed(rows_, "replay")


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
    where = run_name(root)
    hits = {"en": "hits", "zh": "命中率"}
    listing = {
        lg: sep(";", lg).join(
            f"{fmt_num(r['rate'])} req/s{sep(':', lg)}p99 TTFT {r['p99']:.0f} ms{sep(',', lg)}"
            f"{hits[lg]} {r['hit']:.1%}"
            for r in rows
        )
        for lg in LANGS
    }
    return {
        "type": "single",
        "prompt": {
            "en": f"Knee scan of the recorded run `{where}`: random 512-token prompts (no shared "
            f"prefix), every rate on one server with the same `--seed`. Prefix-cache hits / "
            f"queries over each run: {listing['en']}. Can you trust this knee?",
            "zh": f"已录制的实测 `{where}` 的拐点扫描：随机 512 token prompt（没有共享前缀），所有速率"
            f"在同一个服务器上、用同一个 `--seed`。每段的 prefix cache 命中 / 查询："
            f"{listing['zh']}。这个拐点可信吗？",
        },
        "choices": _replay_choices(rows, bad),
        "explain": {
            "en": "The same seed sent the same random prompts at every rate and the server kept "
            f"their KV: above a {validity.REPLAY_HIT_RATE:.0%} hit rate the prefill was mostly "
            "skipped, so those TTFTs are not those of new prompts (fresh servers at 55 req/s "
            "missed 300 ms). Only the first rate is honest. Give each rate its own seed or a "
            "fresh server, and check the hit rate before reading a knee.",
            "zh": "同一个 seed 在每个速率都发出同样的随机 prompt，服务器还留着它们的 KV：命中率超过 "
            f"{validity.REPLAY_HIT_RATE:.0%} 时 prefill 大多被跳过，这些 TTFT 不是新 prompt 的 TTFT"
            "（新起的服务器在 55 req/s 下都超了 300 ms）。只有第一个速率可信。每个速率换一个 seed 或"
            "新起服务器，读拐点之前先看命中率。",
        },
    }


def _overrides(text: Any) -> Any:
    """The "Server overrides:" dict that `vllm bench sweep serve` prints, as a dict."""
    import ast

    try:
        return ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError):
        return None


# Wrong: the compile taken as part of the setting's cost (cost), compiles taken to happen
# at start-up (startup), the queue blamed on the cap (cap).
JIT_CHOICES = {
    "jit": (
        "No: a one-time compile stalled requests inside the window",
        "不可信：一次性的编译卡住了窗口里的请求",
    ),
    "cost": (
        "Yes: compiling kernels is part of what this setting costs",
        "可信：编译内核本来就是这个配置的代价",
    ),
    "startup": (
        "Yes: vLLM compiles its kernels at start-up, before any window",
        "可信：vLLM 在启动时就编译好内核，不会落进窗口",
    ),
    "cap": (
        "No: the cap is too small, so the queue makes TTFT meaningless",
        "不可信：上限太小，排队让 TTFT 失去意义",
    ),
}


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
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in want.items())
    k = kernels[0]
    return {
        "type": "single",
        "prompt": {
            "en": f"vLLM's `vllm bench sweep serve` in the recorded run `{run_name(log)}`, "
            f"server `{flags}`, {fmt_num(res['request_rate'])} req/s, no warm-up requests. "
            "Between `Starting main benchmark run...` and the end of that benchmark the "
            f"server logged `Triton kernel JIT compilation during inference: {k}`. The "
            f"run reports p99 TTFT {fmt_num(round(res['p99_ttft_ms']))} ms. Can you trust "
            "this number in a comparison with another setting?",
            "zh": f"已录制的实测 `{run_name(log)}` 里 vLLM 的 `vllm bench sweep serve`，服务器 "
            f"`{flags}`，{fmt_num(res['request_rate'])} req/s，没有预热请求。在 `Starting main "
            "benchmark run...` 与这次压测结束之间，服务器日志出现 `Triton kernel JIT compilation "
            f"during inference: {k}`。这次报告 p99 TTFT {fmt_num(round(res['p99_ttft_ms']))} ms。"
            "拿它和别的配置比，这个数可信吗？",
        },
        "choices": keyed(JIT_CHOICES, "jit"),
        "explain": {
            "en": f"vLLM compiles `{k}` the first time a sampling batch needs it, once per "
            "process (vllm/utils/jit_monitor.py warns), so a run without warm-up pays it inside "
            "its window: the p99 TTFT measures the compile, not the setting. `--num-warmups 8` "
            "moved it before the window in the later run (h200-2026-11-29c).",
            "zh": f"vLLM 在采样第一次用到 `{k}` 时才编译它，每个进程一次（vllm/utils/jit_monitor.py "
            "会告警），所以没有预热的压测在计时窗口里付这笔开销：p99 TTFT 量的是编译，不是配置。后来那次"
            "实测（h200-2026-11-29c）加了 `--num-warmups 8`，编译就落到了窗口之前。",
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


# Wrong: the usual causes of a queue, read without the stats lines.
PREEMPT_CHOICES = {
    "preempt": (
        "The KV cache filled, so vLLM preempted running requests",
        "KV cache 满了，vLLM 把运行中的请求抢占回队列",
    ),
    "arrivals": (
        "New requests kept arriving faster than the running ones finished",
        "新请求持续到达，来得比运行中的请求完成得还快",
    ),
    "cap": (
        "The running batch hit its `max_num_seqs` cap, so the rest had to wait",
        "运行批顶到了 `max_num_seqs` 上限，其余的请求只能等",
    ),
    "budget": (
        "Each step's token budget was spent on prefill, so no one else got in",
        "每步的 token 预算都花在了 prefill 上，别的请求挤不进来",
    ),
}


@generator("kv_preempt")
def _g_kv_preempt(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: run (a recorded lab 01 folder), value (the knob value). Answer: preemption,
    read from vLLM's 10 s stats lines (core.vllm_logs.engine_stats)."""
    root = resolve_path(p["run"])
    rec, stats, full, peak = _preempt_stats(root, p["value"])
    first = stats[0]
    n = rec.get("load_prompts")
    lines = [
        f"t={s.t_s} s: Running {s.running}, Waiting {s.waiting}, KV {s.kv_usage:.1%}"
        for s in (first, full, peak)
    ]
    rows, rows_zh = "; ".join(lines), "；".join(lines)
    return {
        "type": "single",
        "prompt": {
            "en": f"Lab 01 in the recorded run `{run_name(root)}`, `gpu_memory_utilization="
            f"{p['value']}`: all {n} requests were submitted at once, so none arrive "
            f"later. vLLM's 10 s stats lines: {rows}. Why do requests wait?",
            "zh": f"已录制的实测 `{run_name(root)}` 中的实验 01，`gpu_memory_utilization="
            f"{p['value']}`：{n} 个请求一次性提交，之后不再有新请求。vLLM 每 10 秒的统计行："
            f"{rows_zh}。为什么会有请求在等？",
        },
        "choices": keyed(PREEMPT_CHOICES, "preempt"),
        "explain": {
            "en": f"Nothing new arrived and the running count fell below its start of "
            f"{first.running}, so neither arrivals nor the cap explain the queue. It starts when "
            f"KV usage reaches {full.kv_usage:.1%}: a running request that cannot get a new "
            "block makes the v1 scheduler preempt the newest one back to waiting, to be "
            "recomputed (`_preempt_request` in vllm/v1/core/sched/scheduler.py).",
            "zh": f"没有新请求到达，运行数也从一开始的 {first.running} 往下掉，所以既不是到达太快，也不是"
            f"上限在卡。排队从 KV 使用率到 {full.kv_usage:.1%} 时开始：运行中的请求拿不到新 block 时，v1 "
            "调度器把最新进入运行的请求抢占回等待队列，之后重算（vllm/v1/core/sched/scheduler.py 的 "
            "`_preempt_request`）。",
        },
    }
