"""Reasoning items from recorded loops: how a loop ended, why a bigger budget cannot help,
and the loop against vLLM's grid on the same workload past the knee. Each generator
refuses data that does not support its key."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course_utils.quiz.data import keyed, resolve_path, run_name
from course_utils.quiz.engine import QuizError, fmt_num, generator


def _loop(root: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[Any]]:
    """A recorded loop folder's tune.jsonl steps, last summary and served points."""
    from course_utils.core.records import ServedPoint
    from course_utils.core.store import POINTS_FILE, TUNE_FILE, last_summary, read_jsonl

    steps = read_jsonl(root / TUNE_FILE)
    pts = [ServedPoint.from_json(x) for x in read_jsonl(root / POINTS_FILE)]
    return steps, last_summary(steps), pts


def _workload(w: Mapping[str, Any]) -> dict[str, str]:
    rate = fmt_num(w["request_rate"])
    return {
        "en": f"{w['input_len']}/{w['output_len']} tokens at {rate} req/s",
        "zh": f"输入 {w['input_len']} / 输出 {w['output_len']} token，{rate} req/s",
    }


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
    from course_utils.core.records import relative_spread

    loop, grid = resolve_path(p["loop"]), resolve_path(p["grid"]) / "grid"
    wins, kept, base = _loop_windows(loop)
    kept_label = kept.label
    every = _grid_runs(grid)
    for label in ("defaults", kept_label):
        if label not in every:
            raise QuizError(f"knee_ranking: the grid has no run of {label}")
    runs = {label: every[label] for label in ("defaults", kept_label)}
    cross = {k: relative_spread([*wins[k], runs[k]]) or 0.0 for k in runs}
    if runs[kept_label] >= runs["defaults"]:
        raise QuizError("knee_ranking: the grid orders the values as the loop did")
    wl, slo = _workload(base.workload), str(base.slo).split(" @ ")[0]
    rows = "; ".join(f"{k} {', '.join(f'{v:.2f}' for v in vs)}" for k, vs in wins.items())
    rows_zh = "；".join(
        f"{'默认配置' if k == 'defaults' else k} 为 {'、'.join(f'{v:.2f}' for v in vs)}"
        for k, vs in wins.items()
    )
    grid_en = f"defaults {runs['defaults']:.2f} and {kept_label} {runs[kept_label]:.2f} req/s"
    grid_zh = f"默认配置 {runs['defaults']:.2f}、{kept_label} 为 {runs[kept_label]:.2f} req/s"
    worst = max(cross, key=lambda k: cross[k])
    worst_zh = "默认配置" if worst == "defaults" else worst
    run = run_name(loop)
    # Wrong options, as learners read two disagreeing measurements: the loop's windows taken
    # as the spread (kept_wins), the grid taken as the truth (grid_wins), disagreement taken
    # as invalidity (grid_invalid).
    opts = {
        "ending_only": (
            "Only the ending (past the knee); the values' order is inside the spread "
            "between servers.",
            "只有结局站得住（已过拐点）；各取值的高下落在服务器之间的波动里。",
        ),
        "kept_wins": (
            f"{kept_label} is the better setting: its gain is far beyond its two-window spread.",
            f"{kept_label} 更好：它的提升远超两个窗口之间的波动。",
        ),
        "grid_wins": (
            "The defaults are better: vLLM's own grid is the ground truth for a ranking.",
            "默认配置更好：排高下时，vLLM 自己的网格就是标准答案。",
        ),
        "grid_invalid": (
            "The grid's runs are invalid, since they disagree with the loop.",
            "网格的结果无效，因为它和闭环不一致。",
        ),
    }
    return {
        "type": "single",
        "prompt": {
            "en": f"The recorded loop `{run}` ({wl['en']}, SLO `{slo}`) served each value on its own "
            f"server and measured two windows of vLLM's request goodput (req/s): {rows}. No "
            f"value met the SLO, and it kept {kept_label}. vLLM's grid, on another host, "
            f"measured {grid_en}. What does the data support?",
            "zh": f"已录制的闭环 `{run}`（{wl['zh']}，SLO `{slo}`）每个取值各起一台服务器，测两个窗口的"
            f"逐请求 goodput（req/s）：{rows_zh}。没有一个取值满足 SLO，闭环保留了 {kept_label}。"
            f"vLLM 的网格在另一台机器上测得{grid_zh}。这些数据支持什么结论？",
        },
        "choices": keyed(opts, "ending_only"),
        "explain": {
            "en": "When every value misses the SLO, goodput counts the few requests that happened "
            "to meet it. Two windows on one server measure that server's spread only: "
            f"{worst} moved {cross[worst]:.0%} ((max - min) / mean) between the loop's server "
            "and the grid's, and the grid ordered the values the other way. Neither side ranks "
            "them; both agree on the ending: lower the rate to the knee or add replicas.",
            "zh": "所有取值都不达标时，goodput 只数到碰巧达标的那几个请求。同一台服务器上的两个窗口只量到"
            f"这台服务器自己的波动：{worst_zh} 在闭环和网格的两台服务器之间差了 {cross[worst]:.0%}"
            "（(最大 − 最小) / 均值），网格给出的高下还和闭环相反。哪一边都排不出高下；两边一致的只有结局："
            "把速率降到拐点，或者加副本。",
        },
    }


def _named_knobs_note(untried: list[str], in_effect: list[str]) -> tuple[str, str]:
    """The explanation's last sentence: named knobs the loop had no values for, and named
    knobs already on by vLLM's default (keep.loop_outcome's ``untried`` / ``in_effect``)."""
    en, zh = "", ""
    if untried:
        en += (
            f" The diagnosis also named {', '.join(f'`{k}`' for k in untried)}, which had no "
            "candidates: a claim about them needs a run that tries them."
        )
        zh += (
            f"诊断还点名了 {'、'.join(f'`{k}`' for k in untried)}，但没有给候选值："
            "要对它们下结论，得另跑一次把它们试上。"
        )
    if in_effect:
        en += (
            f" It also named {', '.join(f'`{k}`' for k in in_effect)}, already on by "
            "vLLM's default."
        )
        zh += f"诊断还点名了 {'、'.join(f'`{k}`' for k in in_effect)}，它本来就已开启（vLLM 的默认值）。"
    return en, zh


@generator("loop_ending")
def _g_loop_ending(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: run (a loop folder). Answer: keep.loop_outcome's past_knee, as run."""
    from course_utils.core.keep import loop_outcome, swept_knobs

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
    run, wl, slo = run_name(root), _workload(w), str(b.slo).split(" @ ")[0]
    knobs = ", ".join(f"`{k}`" for k in o["tried"])
    knobs_zh = "、".join(f"`{k}`" for k in o["tried"])
    share = f"{o['goodput_share']:.0%}"
    named_en, named_zh = _named_knobs_note(o["untried"], o.get("in_effect") or [])
    best = f"{float(summary['request_goodput'] or 0):.2f}"
    # Wrong options, as learners read such an ending: more of the same knobs (more_values),
    # the best score taken as good enough (ship_best), "kept nothing" read as "the defaults
    # are fine" (ship_defaults).
    opts = {
        "past_knee": (
            "With these knobs the rate is past the knee: lower it or add replicas.",
            "只靠这些旋钮，这个速率已过拐点：降低速率或加副本。",
        ),
        "more_values": (
            "Try wider values of the same knobs until one of them meets the SLO.",
            "把同样的旋钮换成更极端的取值继续试，直到有一个满足 SLO。",
        ),
        "ship_best": (
            "Ship the value with the highest goodput: it is the best configuration.",
            "上线 goodput 最高的那个值：它就是最好的配置。",
        ),
        "ship_defaults": (
            "Ship the defaults: the loop stayed on them, so they are good enough here.",
            "上线默认配置：闭环最后停在默认值上，说明它在这里够用了。",
        ),
    }
    return {
        "type": "single",
        "prompt": {
            "en": f"The recorded loop `{run}` ({wl['en']}, SLO `{slo}`) started from vLLM's "
            f"defaults. It swept "
            f"{knobs} (the named knobs it had values for) and kept nothing: the defaults scored "
            f"{best} req/s of request goodput as run, {share} of the offered rate, and no value met "
            "the SLO. What does this ending tell you?",
            "zh": f"已录制的闭环 `{run}`（{wl['zh']}，SLO `{slo}`）从 vLLM 默认配置起步，"
            f"扫了诊断点名、且给了候选值的 {knobs_zh}，"
            f"什么也没保留：按运行时的记录，默认配置的逐请求 goodput 是 {best} req/s，只有压测速率的 {share}，"
            "没有一个取值满足 SLO。这个结局说明什么？",
        },
        "choices": keyed(opts, "past_knee"),
        "explain": {
            "en": "Every knob it swept failed the SLO, so with these knobs the rate is past what "
            "this server serves inside it (keep.loop_outcome: past_knee). Nothing beat the "
            f"defaults beyond the noise, and they serve only {share} of the offered rate inside "
            "the SLO; wider values are a guess the run does not support. Find the knee (a lower "
            f"rate) or add replicas, as in lab 03.{named_en}",
            "zh": "扫过的旋钮没有一个让 SLO 达标：只靠这些旋钮，这个速率已超过这台服务器在 SLO 内的服务能力"
            "（keep.loop_outcome 称之为 past_knee）。没有取值比默认值高出噪声以外，而默认配置在 SLO 内只"
            f"服务到压测速率的 {share}；更极端的取值是这次运行支撑不了的猜测。去找拐点（更低的速率），或者像"
            f"实验 03 那样加副本。{named_zh}",
        },
    }


@generator("spread_scale")
def _g_spread_scale(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: loop, grid, other_host. Answer: keep.decide's tie when the gain over the
    lower score passes the spread between servers but the (max - min) / mean gap does not."""
    from course_utils.core.keep import decide
    from course_utils.core.records import relative_spread

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
    run = run_name(loop)
    b, k = f"{runs[best]:.2f}", f"{runs[pick]:.2f}"
    apart_hosts = p.get("other_host") in (best, pick)
    hosts = {
        "en": ", on two different hosts" if apart_hosts else ", on one host",
        "zh": "（两次运行在两台不同的机器上）" if apart_hosts else "（两次运行在同一台机器上）",
    }
    # Wrong options: the gain over the lower score weighed against a (max - min) / mean
    # spread (gain), the loop's own windows taken as enough (loop), and "another host" taken
    # to forbid any comparison (hosts).
    opts = {
        "tie": (
            f"A tie: measured like the spread, the two runs are {apart:.0%} apart, "
            f"inside {margin:.0%}.",
            f"打平：按波动的同一算法算，两次运行相差 {apart:.0%}，在 {margin:.0%} 之内。",
        ),
        "gain": (
            f"The grid's best wins: +{gain:.0%} is more than the {margin:.0%} margin.",
            f"网格最佳胜出：高出 {gain:.0%}，超过了 {margin:.0%} 的边界。",
        ),
        "loop": (
            f"{pick} wins: the loop kept it after its own two windows.",
            f"{pick} 胜出：闭环凭自己的两个窗口保留了它。",
        ),
        "hosts": (
            "Nothing: runs from two hosts can never be compared at all.",
            "什么也说明不了：两台机器上的运行根本不能比。",
        ),
    }
    return {
        "type": "single",
        "prompt": {
            "en": f"The recorded loop `{run}` kept {pick}. vLLM's grid, on the same workload, "
            f"measured {best} at {b} req/s and {pick} at {k} req/s{hosts['en']}. The same "
            "configuration, "
            f"measured by the loop and by the grid on two servers, moved up to {margin:.0%} "
            "((max - min) / mean). What is the verdict?",
            "zh": f"已录制的闭环 `{run}` 保留了 {pick}。vLLM 的网格在同一份负载上测得 {best} 为 "
            f"{b} req/s，{pick} 为 {k} req/s{hosts['zh']}。同一配置由闭环和网格在两台服务器上分别测，最多相差 "
            f"{margin:.0%}（(最大 − 最小) / 均值）。结论是什么？",
        },
        "choices": keyed(opts, "tie"),
        "explain": {
            "en": f"{b} against {k} is +{gain:.0%} over the lower number, but a spread is "
            f"(max - min) / mean, and on that scale the two are {apart:.0%} apart: inside the "
            f"{margin:.0%} one configuration moves between servers. Weigh a difference the way "
            "the spread was measured (keep.decide's apart).",
            "zh": f"{b} 对 {k}，以小的为基准是高出 {gain:.0%}；可波动是按 (最大 − 最小) / 均值算的，"
            f"按同一算法两者只差 {apart:.0%}，落在同一配置换台服务器就会有的 {margin:.0%} 之内。"
            "差距要按波动的同一算法来量（keep.decide 的 apart）。",
        },
    }


def _run_point(label: str, score: float) -> dict[str, Any]:
    """One grid run as a point record for core.keep.decide: one valid window, no repeat."""
    window = {
        "status": "ok",
        "purpose": "measure",
        "index": 0,
        "seed": 0,
        "valid": True,
        "validity_issues": [],
        "score": {"request_goodput": score, "meets_slo": False},
    }
    return {
        "key": label,
        "knob": label,
        "value": None,
        "knobs": {},
        "workload": {},
        "slo": "",
        "status": "ok",
        "windows": [window],
    }


def _budget_choices(used: str, budget: str) -> list[dict[str, Any]]:
    """Wrong: the budget taken as memory (kv), a full GPU assumed (saturated), the chunk-size
    trade where no prompt is chunked (itl)."""
    rows = {
        "unused": (
            f"Steps use {used} of {budget} tokens: a bigger budget changes no step",
            f"每步只用了 {budget} 里的 {used} 个 token：预算再大也没有哪一步会变",
        ),
        "kv": (
            "A bigger budget needs more KV memory than the server has left for it",
            "预算更大就要更多 KV 显存，而服务器已经没有多余的显存给它了",
        ),
        "saturated": (
            "Every step is already full of prefill work, so the GPU is saturated",
            "每一步都已经塞满了 prefill 的活，GPU 已经饱和了",
        ),
        "itl": (
            "Bigger chunks slow the decoding requests, which cancels the TTFT gain",
            "更大的块拖慢了正在 decode 的请求，抵消了 TTFT 上的收益",
        ),
    }
    return keyed(rows, "unused")


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
    moves = {
        "en": ", ".join(f"{v} {g:+.1%}" for v, g in tried),
        "zh": "、".join(f"{v} 为 {g:+.1%}" for v, g in tried),
    }
    run = run_name(root)
    u, bud = fmt_num(round(used)), fmt_num(budget)
    slo = str(base.slo).split(" @ ")[0]
    rate = fmt_num(w["request_rate"])
    ev_en = (
        f"p99 TTFT {float(ev['p99_ttft_ms']):.0f} ms, at most {fmt_num(ev['waiting_max'])} "
        f"waiting, up to {fmt_num(ev['running_max'])} running, KV use at most "
        f"{float(ev['kv_usage_max']):.0%}"
    )
    ev_zh = (
        f"p99 TTFT {float(ev['p99_ttft_ms']):.0f} ms，最多 {fmt_num(ev['waiting_max'])} 个在排队，"
        f"最多 {fmt_num(ev['running_max'])} 个在运行，KV 使用率最高 {float(ev['kv_usage_max']):.0%}"
    )
    return {
        "type": "single",
        "prompt": {
            "en": f"The recorded loop `{run}` ({prompt} in / {w['output_len']} out at {rate} "
            f"req/s, SLO `{slo}`) diagnosed prefill: {ev_en}. A step carried {u} tokens on "
            f"average against the budget of {bud}. Raising the budget changed goodput by "
            f"{moves['en']} (vs the defaults). Why can't a bigger budget help here?",
            "zh": f"已录制的闭环 `{run}`（输入 {prompt} / 输出 {w['output_len']} token，{rate} req/s，"
            f"SLO `{slo}`）诊断为 prefill 在卡：{ev_zh}。每步平均只带 {u} 个 token，预算是 {bud}。"
            f"调大预算后 goodput 的变化（相对默认配置）：{moves['zh']}。为什么更大的预算在这里帮不上忙？",
        },
        "choices": _budget_choices(u, bud),
        "explain": {
            "en": f"The budget caps the tokens one step may schedule. A step used {u} of {bud} on "
            f"average and each {prompt}-token prompt fit in one chunk, so a larger budget "
            "schedules the same steps: the changes are run-to-run spread. The budget reserves "
            f"no memory (KV use at most {float(ev['kv_usage_max']):.0%}), and an unfilled step "
            "is not a saturated GPU. What is left: fewer prompt tokens or a lower rate.",
            "zh": f"预算限制的是一步最多调度多少 token。每步平均只用了 {bud} 里的 {u} 个，{prompt} token "
            "的 prompt 一块就装得下，所以预算再大调度的也是同样的步：这些变化只是运行之间的波动。预算不占"
            f"显存（KV 使用率最高 {float(ev['kv_usage_max']):.0%}），没填满的步也说明 GPU 没有饱和。"
            "剩下的办法是减少 prompt token 或降低速率。",
        },
    }
