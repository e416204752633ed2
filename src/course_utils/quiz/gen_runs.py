"""Reasoning items generated from the recorded GPU runs (``labs/results/<run>/``): Little's
law against the waiting/running series, TTFT split by the /metrics histograms, and "can you
trust this measurement?" (replayed prompts, a JIT compile inside the window, preemption).

Every generator names the exact run it reads and raises QuizError when the data does not
support the keyed answer, so an item cannot teach what its own data contradicts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course_utils.core.store import POINTS_FILE
from course_utils.quiz.data import option_list, recorded_point, resolve_path
from course_utils.quiz.engine import LANGS, QuizError, fmt_num, generator

REPO_RUNS = "labs/results/"


def run_name(path: Path) -> str:
    """``h200-2026-11-29c/slo`` for a path inside labs/results (what a prompt cites)."""
    text = path.as_posix()
    return text.split(REPO_RUNS, 1)[1] if REPO_RUNS in text else path.name


def point_load(p: Mapping[str, Any]) -> dict[str, Any]:
    """One recorded sweep point (``params.point``): bench fields, /metrics summary, where."""
    from course_utils.core import metrics

    rec = recorded_point(p)
    if rec is None:
        raise QuizError(f"recorded point {p.get('point')!r} not found")
    bench = json.loads(rec["bench"].read_text(encoding="utf-8"))
    samples = metrics.load_series(rec["series"])
    return {
        "bench": bench,
        "samples": samples,
        "summary": metrics.summarize(samples),
        "knobs": rec["knobs"],
        "workload": rec["workload"],
        "where": run_name(rec["bench"].parent.parent.parent),
    }


def in_flight(bench: Mapping[str, Any]) -> float:
    """Little's law: completed requests per second x mean end-to-end latency (s)."""
    return float(bench["request_throughput"]) * float(bench["mean_e2el_ms"]) / 1000.0


# ---------------------------------------------------------------- Little's law


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
    cap = pt["knobs"].get("max_num_seqs")
    thr, e2e = b["request_throughput"], b["mean_e2el_ms"]
    return {
        "type": "numeric",
        "answer": round(n, 1),
        "tolerance": {"rel": p.get("rel_tol", 0.05)},
        "unit": {"en": "requests", "zh": "个请求"},
        "prompt": {
            "en": f"Recorded run `{pt['where']}`, point `--max-num-seqs {cap}`: `vllm bench "
            f"serve` completed {thr:.2f} req/s with a mean end-to-end latency of "
            f"{fmt_num(round(e2e))} ms. On average, how many requests were inside the server "
            "(running or waiting)?",
            "zh": f"已录制的实测 `{pt['where']}`，`--max-num-seqs {cap}` 这个点：`vllm bench serve` "
            f"完成 {thr:.2f} req/s，平均端到端延迟 {fmt_num(round(e2e))} ms。平均有多少个请求"
            "在服务器里（运行中或排队中）？",
        },
        "explain": {
            "en": f"Little's law: requests in the system = rate x time each spends there = "
            f"{thr:.2f} x {e2e / 1000:.3f} s = {n:.1f}. The /metrics gauges sampled "
            f"under load agree: running {s.running_mean:.1f} + waiting "
            f"{s.waiting_mean:.1f} on average. A `--max-num-seqs` below this number "
            "cannot hold the load, so the rest must queue.",
            "zh": f"利特尔定律：系统里的请求数 = 到达速率 × 每个请求停留的时间 = {thr:.2f} × "
            f"{e2e / 1000:.3f} 秒 = {n:.1f}。负载期间采样的 /metrics gauge 也对得上：平均运行 "
            f"{s.running_mean:.1f} 个 + 排队 {s.waiting_mean:.1f} 个。`--max-num-seqs` "
            "比这个数小，就装不下这份负载，多出来的只能排队。",
        },
    }


def sweep_points(root: Path, knob: str) -> list[dict[str, Any]]:
    """Every recorded point of a sweep dir with its knob value, bench and /metrics summary."""
    from course_utils.core import metrics

    out: dict[Any, dict[str, Any]] = {}
    for line in (root / POINTS_FILE).read_text(encoding="utf-8").splitlines():
        rec = json.loads(line) if line.strip() else {}
        d = root / "points" / str(rec.get("key"))
        value = (rec.get("knobs") or {}).get(knob)
        if value is None or not (d / "bench.json").is_file():
            continue
        out[value] = {
            "value": value,
            "bench": json.loads((d / "bench.json").read_text()),
            "summary": metrics.summarize(metrics.load_series(d / "metrics.jsonl")),
        }
    return [out[v] for v in sorted(out)]


@generator("littles_cap")
def _g_littles_cap(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: results (a recorded sweep dir of max_num_seqs), reference (the value whose
    point did not queue). Answer: the values below rate x mean E2E of the reference, each
    checked against its own recorded waiting series (a queue iff below)."""
    from course_utils.core import diagnose

    root = resolve_path(p["results"])
    pts = sweep_points(root, "max_num_seqs")
    ref = next((x for x in pts if x["value"] == p["reference"]), None)
    if ref is None or len(pts) < 3:
        raise QuizError(f"littles_cap: no reference point {p.get('reference')} in {root}")
    n = in_flight(ref["bench"])
    deep = diagnose.Thresholds().waiting_mean_min
    for x in pts:
        if (x["value"] < n) != (x["summary"].waiting_mean >= deep):
            raise QuizError(f"littles_cap: {x['value']} disagrees with its waiting series")
    b = ref["bench"]
    rate = b.get("request_rate")
    where = run_name(root)

    def why(x: dict[str, Any], lg: str) -> str:
        s = x["summary"]
        if lg == "zh":
            verdict = "小于" if x["value"] < n else "不小于"
            return (
                f"{x['value']}：{verdict} {n:.0f}，实测排队均值 {s.waiting_mean:.1f}、"
                f"运行数最多 {fmt_num(s.running_max)}"
            )
        verdict = "below" if x["value"] < n else "not below"
        return (
            f"{x['value']}: {verdict} {n:.0f}; recorded waiting mean {s.waiting_mean:.1f}, "
            f"running max {fmt_num(s.running_max)}"
        )

    opts = [
        ({lg: f"`--max-num-seqs {x['value']}`" for lg in LANGS}, x["value"] < n, str(x["value"]))
        for x in pts
    ]
    return {
        "type": "multiple",
        "prompt": {
            "en": f"Recorded run `{where}`: {fmt_num(rate)} req/s offered, 512 tokens in / 128 out. "
            f"With `--max-num-seqs {ref['value']}` nothing queued: it completed "
            f"{b['request_throughput']:.2f} req/s at a mean end-to-end latency of "
            f"{fmt_num(round(b['mean_e2el_ms']))} ms. By Little's law, which caps must make "
            "requests queue at this load?",
            "zh": f"已录制的实测 `{where}`：压测速率 {fmt_num(rate)} req/s，512 入 / 128 出。"
            f"`--max-num-seqs {ref['value']}` 时没有排队：完成 {b['request_throughput']:.2f} "
            f"req/s，平均端到端延迟 {fmt_num(round(b['mean_e2el_ms']))} ms。按利特尔定律，"
            "在这个负载下哪些上限一定会让请求排队？",
        },
        "choices": option_list(opts),
        "explain": {
            "en": f"Requests in flight = {b['request_throughput']:.2f} x "
            f"{b['mean_e2el_ms'] / 1000:.3f} s = {n:.0f}. A cap below that cannot hold "
            "them, so the rest wait; each point's own /metrics confirm it: "
            + "; ".join(why(x, "en") for x in pts)
            + ".",
            "zh": f"同时在服务器里的请求 = {b['request_throughput']:.2f} × "
            f"{b['mean_e2el_ms'] / 1000:.3f} 秒 = {n:.0f}。上限比它小就装不下，其余的只能排队；"
            "每个点自己的 /metrics 也证实了这一点：" + "；".join(why(x, "zh") for x in pts) + "。",
        },
    }


# ---------------------------------------------------------------- TTFT split

TTFT_PARTS = ("queue", "prefill", "outside", "decode")


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


_PART_TEXT = {
    "queue": {"en": "Waiting in the engine's queue for a slot", "zh": "在引擎队列里等待进入运行批"},
    "prefill": {
        "en": "Prefill compute, from scheduling to the first token",
        "zh": "prefill 计算：从被调度到产出首 token",
    },
    "outside": {
        "en": "Outside the engine core: before queueing and after",
        "zh": "在引擎核心之外：入队之前与出结果之后",
    },
    "decode": {
        "en": "The first decode step, after the prefill ends",
        "zh": "prefill 结束之后的第一个 decode 步",
    },
}


def _part_why(k: str, parts: Mapping[str, float], lg: str) -> str:
    ms = {x: f"{parts[x]:.0f} ms" for x in ("queue", "prefill", "outside")}
    share = {x: f"{parts[x] / parts['ttft']:.0%}" for x in ("queue", "prefill", "outside")}
    en = {
        "queue": f"queue time {ms['queue']} ({share['queue']}); `--max-num-seqs` or the "
        "token budget act here",
        "prefill": f"prefill time {ms['prefill']} ({share['prefill']}); "
        "`--max-num-batched-tokens` acts here",
        "outside": f"TTFT minus both is {ms['outside']} ({share['outside']}): HTTP, "
        "tokenisation and the hand-off between API server and engine core; no "
        "scheduler knob acts on it",
        "decode": "never part of TTFT: the step that finishes the prompt emits the first token",
    }
    zh = {
        "queue": f"排队时间 {ms['queue']}（{share['queue']}）；`--max-num-seqs` 或 token 预算作用在这里",
        "prefill": f"prefill 时间 {ms['prefill']}（{share['prefill']}）；"
        "`--max-num-batched-tokens` 作用在这里",
        "outside": f"TTFT 减去前两段还剩 {ms['outside']}（{share['outside']}）：HTTP、分词以及 "
        "API 服务器与引擎核心之间的交接；没有调度旋钮能作用于它",
        "decode": "从来不属于 TTFT：算完 prompt 的那一步就产出首 token",
    }
    return (zh if lg == "zh" else en)[k]


@generator("ttft_split")
def _g_ttft_split(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: point {results, knobs}. Answer: the part of the mean TTFT above one half."""
    pt = point_load(p)
    parts = ttft_parts(pt["summary"])
    key = ttft_key(parts)
    cap, rate = pt["knobs"].get("max_num_seqs"), pt["workload"].get("request_rate")
    from course_utils.core import metrics

    q, pf, tt = metrics.QUEUE_TIME, metrics.PREFILL_TIME, metrics.TTFT
    opts = [(_PART_TEXT[k], k == key, k) for k in TTFT_PARTS]
    lines = {
        lg: ("；" if lg == "zh" else "; ").join(
            f"{_PART_TEXT[k][lg]}{'：' if lg == 'zh' else ': '}{_part_why(k, parts, lg)}"
            for k in TTFT_PARTS
        )
        for lg in LANGS
    }
    return {
        "type": "single",
        "prompt": {
            "en": f"Recorded run `{pt['where']}`, `--max-num-seqs {cap}` at {fmt_num(rate)} req/s. "
            f"From its /metrics histograms (mean per request): `{tt}` "
            f"{parts['ttft']:.0f} ms, `{q}` {parts['queue']:.1f} ms, `{pf}` "
            f"{parts['prefill']:.1f} ms. Where does most of the TTFT go?",
            "zh": f"已录制的实测 `{pt['where']}`，`--max-num-seqs {cap}`，{fmt_num(rate)} req/s。"
            f"它的 /metrics 直方图（每请求均值）：`{tt}` {parts['ttft']:.0f} ms，`{q}` "
            f"{parts['queue']:.1f} ms，`{pf}` {parts['prefill']:.1f} ms。TTFT 大部分花在哪？",
        },
        "choices": option_list(opts),
        "explain": {
            "en": "vLLM stamps a request when it arrives at the API server, when the engine "
            "core queues it, when it is scheduled and when its first token comes out "
            f"(vllm/v1/metrics/stats.py). {lines['en']}. Turn the knob of the part "
            "that dominates, and only that one.",
            "zh": "vLLM 给每个请求打了几个时间戳：到达 API 服务器、进入引擎核心队列、被调度、产出首 token"
            f"（vllm/v1/metrics/stats.py）。{lines['zh']}。只去拧占大头的那一段对应的旋钮。",
        },
    }


# ---------------------------------------------------------------- can you trust it?


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
    """The four choices of prefix_replay (the first is right)."""
    bad_rates = "/".join(fmt_num(r["rate"]) for r in bad)
    opts = [
        (
            {
                "en": f"Not at {bad_rates} req/s: replayed prompts skipped most of their prefill",
                "zh": f"{bad_rates} req/s 的点不可信：重放的 prompt 跳过了大部分 prefill",
            },
            True,
            "replay",
        ),
        (
            {
                "en": f"Yes: p99 TTFT stays near 300 ms up to {fmt_num(rows[-1]['rate'])} req/s",
                "zh": f"可信：直到 {fmt_num(rows[-1]['rate'])} req/s，p99 TTFT 都在 300 ms 附近",
            },
            False,
            "trust",
        ),
        (
            {
                "en": "Yes: prefix caching is on by default, so this is what users will see",
                "zh": "可信：prefix caching 默认开启，用户看到的就是这个",
            },
            False,
            "default",
        ),
        (
            {
                "en": f"Not at {fmt_num(rows[0]['rate'])} req/s: the first rate ran on a cold server",
                "zh": f"{fmt_num(rows[0]['rate'])} req/s 的点不可信：第一个速率跑在冷服务器上",
            },
            False,
            "cold",
        ),
    ]
    return option_list(opts)


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
    listing = {
        "en": "; ".join(
            f"{fmt_num(r['rate'])} req/s: p99 TTFT {r['p99']:.0f} ms, hits {r['hit']:.1%}"
            for r in rows
        )
        + ".",
        "zh": "；".join(
            f"{fmt_num(r['rate'])} req/s：p99 TTFT {r['p99']:.0f} ms，命中率 {r['hit']:.1%}"
            for r in rows
        )
        + "。",
    }
    return {
        "type": "single",
        "prompt": {
            "en": f"Knee scan of the recorded run `{where}`: random 512-token prompts (no shared "
            f"prefix), every rate on one server with the same `--seed`. Prefix-cache hits / "
            f"queries over each run: {listing['en']} Can you trust this knee?",
            "zh": f"已录制的实测 `{where}` 的拐点扫描：随机 512 token prompt（没有共享前缀），所有速率"
            f"在同一个服务器上、用同一个 `--seed`。每段的 prefix cache 命中 / 查询："
            f"{listing['zh']}这个拐点可信吗？",
        },
        "choices": _replay_choices(rows, bad),
        "explain": {
            "en": "The same seed sent the same random prompts at every rate, and the server "
            "kept their KV from the previous rate: at a hit rate above "
            f"{validity.REPLAY_HIT_RATE:.0%} the prefill was mostly skipped, so those "
            "TTFTs are not those of new prompts (fresh servers at 55 req/s missed 300 ms). "
            "Users with random prompts get no such hits, and the first rate is the only "
            "honest one. Give each rate its own seed or restart the server, and check the hit "
            "rate before reading a knee.",
            "zh": "同一个 seed 在每个速率都发出同样的随机 prompt，而服务器还留着上一个速率的 KV："
            f"命中率超过 {validity.REPLAY_HIT_RATE:.0%} 时 prefill 大多被跳过，这些 TTFT 不是新 prompt "
            "的 TTFT（新起的服务器在 55 req/s 下都超了 300 ms）。真实用户的随机 prompt 不会这样命中，"
            "第一个速率反而是唯一可信的点。每个速率换一个 seed 或重启服务器，读拐点之前先看命中率。",
        },
    }


def _overrides(text: Any) -> Any:
    """The "Server overrides:" dict that `vllm bench sweep serve` prints, as a dict."""
    import ast

    try:
        return ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError):
        return None


def _jit_choices() -> list[dict[str, Any]]:
    """The four choices of jit_window (the first is right)."""
    opts = [
        (
            {
                "en": "No: a one-time compile stalled the first requests inside the window",
                "zh": "不可信：一次性的编译卡住了窗口里最早的那批请求",
            },
            True,
            "jit",
        ),
        (
            {
                "en": "Yes: compiling kernels is part of what this setting costs",
                "zh": "可信：编译内核本来就是这个配置的代价",
            },
            False,
            "cost",
        ),
        (
            {
                "en": "Yes: vLLM compiles its kernels at start-up, before any window",
                "zh": "可信：vLLM 在启动时就编译好内核，不会落进窗口",
            },
            False,
            "startup",
        ),
        (
            {
                "en": "No: the cap is too small, so the queue makes TTFT meaningless",
                "zh": "不可信：上限太小，排队让 TTFT 失去意义",
            },
            False,
            "cap",
        ),
    ]
    return option_list(opts)


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
            f"run reports p99 TTFT {fmt_num(round(res['p99_ttft_ms']))} ms. Can you compare "
            "this number with another setting's?",
            "zh": f"已录制的实测 `{run_name(log)}` 里 vLLM 的 `vllm bench sweep serve`，服务器 "
            f"`{flags}`，{fmt_num(res['request_rate'])} req/s，没有预热请求。在 `Starting main "
            "benchmark run...` 与这次压测结束之间，服务器日志出现 `Triton kernel JIT compilation "
            f"during inference: {k}`。这次报告 p99 TTFT {fmt_num(round(res['p99_ttft_ms']))} ms。"
            "这个数能拿去和别的配置比吗？",
        },
        "choices": _jit_choices(),
        "explain": {
            "en": f"vLLM compiles `{k}` the first time a sampling batch needs it, once per "
            "process (vllm/utils/jit_monitor.py warns about it), so a run without warm-up "
            "pays it inside its window: the requests that arrive meanwhile pile up and "
            "the p99 TTFT measures the compile, not the setting. `--num-warmups 8` moved "
            "the same compile before the window in the later run (h200-2026-11-29c). "
            "`core.vllm_logs.parse_sweep_log` finds such lines per window.",
            "zh": f"vLLM 在采样第一次用到 `{k}` 时才编译它，每个进程一次（vllm/utils/jit_monitor.py 会告警），"
            "所以没有预热的压测会在计时窗口里付这笔开销：编译期间到达的请求堆积起来，p99 TTFT 量的是编译，"
            "不是配置本身。后来那次实测（h200-2026-11-29c）加了 `--num-warmups 8`，同一次编译就落到了"
            "窗口之前。`core.vllm_logs.parse_sweep_log` 能按窗口找出这类日志行。",
        },
    }


def _preempt_stats(root: Path, value: Any) -> tuple[dict[str, Any], list[Any], Any, Any]:
    """kv_preempt's recorded point at `value`, its 10 s stats lines,
    the first line with a queue (KV full) and the one with the longest queue."""
    from course_utils.core import vllm_logs
    from course_utils.core.records import read_jsonl, read_text

    rec = next(
        (
            r
            for r in read_jsonl(root / "results.jsonl")
            if r.get("value") == value and r.get("status") == "ok"
        ),
        None,
    )
    if rec is None:
        raise QuizError(f"kv_preempt: no point {value} in {root}")
    log = root / "points" / str(rec["key"]) / "llm.log"
    stats = vllm_logs.engine_stats(read_text(log, errors="replace"))
    full = next((s for s in stats if s.waiting > 0), None)
    peak = max(stats, key=lambda s: s.waiting) if stats else None
    if full is None or peak is None or stats[0].waiting or full.kv_usage < 0.95:
        raise QuizError("kv_preempt: the stats show no wait that starts with a full KV cache")
    return rec, stats, full, peak


def _preempt_choices() -> list[dict[str, Any]]:
    """The four choices of kv_preempt (the first is right)."""
    opts = [
        (
            {
                "en": "The KV cache filled, so vLLM preempted running requests",
                "zh": "KV cache 满了，vLLM 把运行中的请求抢占回队列",
            },
            True,
            "preempt",
        ),
        (
            {
                "en": "New requests kept arriving faster than they finished",
                "zh": "新请求持续到达，比完成得还快",
            },
            False,
            "arrivals",
        ),
        (
            {
                "en": "The running batch hit its `max_num_seqs` cap",
                "zh": "运行批顶到了 `max_num_seqs` 上限",
            },
            False,
            "cap",
        ),
        (
            {
                "en": "The step's token budget was spent on prefill",
                "zh": "每步的 token 预算都花在了 prefill 上",
            },
            False,
            "budget",
        ),
    ]
    return option_list(opts)


@generator("kv_preempt")
def _g_kv_preempt(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: run (a recorded lab 01 folder), value (the knob value). Answer: preemption,
    read from vLLM's 10 s stats lines (core.vllm_logs.engine_stats)."""
    root = resolve_path(p["run"])
    rec, stats, full, peak = _preempt_stats(root, p["value"])
    first = stats[0]
    n = rec.get("load_prompts")
    rows = "; ".join(
        f"t={s.t_s} s: Running {s.running}, Waiting {s.waiting}, KV {s.kv_usage:.1%}"
        for s in (first, full, peak)
    )
    return {
        "type": "single",
        "prompt": {
            "en": f"Lab 01 in the recorded run `{run_name(root)}`, `gpu_memory_utilization="
            f"{p['value']}`: all {n} requests were submitted at once, so none arrive "
            f"later. vLLM's 10 s stats lines: {rows}. Why do requests wait?",
            "zh": f"已录制的实测 `{run_name(root)}` 中的实验 01，`gpu_memory_utilization="
            f"{p['value']}`：{n} 个请求一次性提交，之后不再有新请求。vLLM 每 10 秒的统计行："
            f"{rows}。为什么会有请求在等？",
        },
        "choices": _preempt_choices(),
        "explain": {
            "en": f"Nothing new arrived, and the running count fell below its start of "
            f"{first.running}, so neither arrivals nor the cap explain the queue. It starts "
            f"when KV usage reaches {full.kv_usage:.1%}: each generated token needs KV "
            "space, and when a running request cannot get a new block the v1 scheduler "
            "preempts the newest running request, frees its blocks and puts it back to "
            "waiting, to be recomputed later (`_preempt_request` in "
            "vllm/v1/core/sched/scheduler.py). A bigger KV pool moves this point later.",
            "zh": f"没有新请求到达，运行数也从一开始的 {first.running} 往下掉，所以既不是到达太快，也不是上限在卡。"
            f"排队从 KV 使用率到 {full.kv_usage:.1%} 时开始：每生成一个 token 都要 KV 空间，运行中的请求"
            "拿不到新 block 时，v1 调度器会抢占最新进入运行的请求，释放它的 block，把它放回等待队列，之后重算"
            "（vllm/v1/core/sched/scheduler.py 的 `_preempt_request`）。KV 池更大，这个时刻就来得更晚。",
        },
    }
