"""Reasoning items from recorded loops: how a loop ended (``loop_ending``), and the loop
against vLLM's grid on the same workload past the knee (``knee_ranking``).

knee_ranking: what two windows on one server can rank when no value meets the SLO. The numbers are the
loop's valid windows (points.jsonl) and the grid's runs (vLLM's ``request_goodput`` in each
combo's run file); the spread between servers is ``core.records.relative_spread`` over both.
The generator refuses a pair where a value met the SLO, or where the grid orders the two
values as the loop did (then the ranking could be real)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from course_utils.quiz.data import option_list, resolve_path
from course_utils.quiz.engine import QuizError, fmt_num, generator


def _loop_windows(loop: Any) -> tuple[dict[str, list[float]], Any, Any]:
    """label -> the valid windows' request goodput, the kept point, the baseline point."""
    from course_utils.core.records import ServedPoint
    from course_utils.core.store import POINTS_FILE, read_jsonl, tune_summary

    pts = [ServedPoint.from_json(r) for r in read_jsonl(loop / POINTS_FILE)]
    summary = tune_summary(loop)
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


def _grid_runs(grid: Any) -> dict[str, float]:
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
    w = base.workload
    wl = f"{w['input_len']}/{w['output_len']} tokens at {fmt_num(w['request_rate'])} req/s"
    wl_zh = (
        f"输入 {w['input_len']} / 输出 {w['output_len']} token，{fmt_num(w['request_rate'])} req/s"
    )
    slo = str(base.slo).split(" @ ")[0]
    rows = "; ".join(f"{k} {', '.join(f'{v:.2f}' for v in vs)}" for k, vs in wins.items())
    rows_zh = "；".join(
        f"{'默认配置' if k == 'defaults' else k} 为 {'、'.join(f'{v:.2f}' for v in vs)}"
        for k, vs in wins.items()
    )
    grid_en = f"defaults {runs['defaults']:.2f} and {kept_label} {runs[kept_label]:.2f} req/s"
    grid_zh = f"默认配置 {runs['defaults']:.2f}、{kept_label} 为 {runs[kept_label]:.2f} req/s"
    worst = max(cross, key=lambda k: cross[k])
    run = loop.as_posix().split("labs/results/")[-1]
    opts = [
        (
            {
                "en": "Only the ending: with these knobs the rate is past the knee. The order of "
                "the values is inside the spread between servers.",
                "zh": "只有结局站得住：只靠这些旋钮，这个速率已过拐点。各取值的高下落在服务器之间的波动里。",
            },
            True,
            "ending_only",
        ),
        (
            {
                "en": f"{kept_label} is the better setting: its gain is far beyond its two-window "
                "spread.",
                "zh": f"{kept_label} 更好：它的提升远超两个窗口之间的波动。",
            },
            False,
            "kept_wins",
        ),
        (
            {
                "en": "The defaults are better: vLLM's grid is the ground truth.",
                "zh": "默认配置更好：vLLM 的网格就是标准答案。",
            },
            False,
            "grid_wins",
        ),
        (
            {
                "en": "The grid's runs are invalid, since they disagree with the loop.",
                "zh": "网格的结果无效，因为它和闭环不一致。",
            },
            False,
            "grid_invalid",
        ),
    ]
    return {
        "type": "single",
        "prompt": {
            "en": f"The recorded loop `{run}` ({wl}, SLO `{slo}`) served each value on its own "
            f"server and measured two windows of vLLM's request goodput (req/s): {rows}. No "
            f"value met the SLO, and it kept {kept_label}. vLLM's grid, on another host, "
            f"measured {grid_en}. What does the data support?",
            "zh": f"已录制的闭环 `{run}`（{wl_zh}，SLO `{slo}`）每个取值各起一台服务器，测两个窗口的"
            f"逐请求 goodput（req/s）：{rows_zh}。没有一个取值满足 SLO，闭环保留了 {kept_label}。"
            f"vLLM 的网格在另一台机器上测得{grid_zh}。这些数据支持什么结论？",
        },
        "choices": option_list(opts),
        "explain": {
            "en": "When every value misses the SLO, goodput counts the few requests that "
            "happened to meet it. Two windows on one server measure that server's spread, not "
            f"the spread between servers: {worst} moved {cross[worst]:.0%} ((max - min) / mean) "
            "between the loop's server and the grid's, and the grid put the two values in the opposite order. So neither "
            "side ranks the values, and a grid run is no more the truth than a window. Both "
            "agree on the ending: lower the rate to the knee or add replicas.",
            "zh": "所有取值都不达标时，goodput 只数到碰巧达标的那几个请求。同一台服务器上的两个窗口，"
            f"量到的只是这台服务器自己的波动，量不到服务器之间的波动：{worst} 在闭环那台和网格那台服务器之间"
            f"差了 {cross[worst]:.0%}（(最大 − 最小) / 均值），网格给出的高下还和闭环正好相反。所以哪一边都排不出"
            "这些取值的高下，网格的一次运行也不比一个窗口更可信。两边一致的只有结局：把速率降到拐点，或者加副本。",
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
    """params: run (a recorded loop folder: tune.jsonl + points). Answer: the loop's ending
    (``keep.loop_outcome`` on the recorded summary, steps and points, as run); refuses a run
    that did not end past the knee."""
    from course_utils.core.keep import loop_outcome, swept_knobs
    from course_utils.core.records import ServedPoint
    from course_utils.core.store import POINTS_FILE, TUNE_FILE, last_summary, read_jsonl

    root = resolve_path(p["run"])
    steps = read_jsonl(root / TUNE_FILE)
    summary = last_summary(steps)
    pts = [ServedPoint.from_json(x) for x in read_jsonl(root / POINTS_FILE)]
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
    run = root.as_posix().split("labs/results/")[-1]
    wl = f"{w['input_len']}/{w['output_len']} tokens at {fmt_num(w['request_rate'])} req/s"
    wl_zh = (
        f"输入 {w['input_len']} / 输出 {w['output_len']} token，{fmt_num(w['request_rate'])} req/s"
    )
    slo = str(b.slo).split(" @ ")[0]
    knobs = ", ".join(f"`{k}`" for k in o["tried"])
    knobs_zh = "、".join(f"`{k}`" for k in o["tried"])
    share = f"{o['goodput_share']:.0%}"
    named_en, named_zh = _named_knobs_note(o["untried"], o.get("in_effect") or [])
    best = f"{float(summary['request_goodput'] or 0):.2f}"
    opts = [
        (
            {
                "en": "With these knobs the rate is past the knee for this SLO: lower it or "
                "add replicas.",
                "zh": "只靠这些旋钮，对这个 SLO 这个速率已过拐点：降低速率或加副本。",
            },
            True,
            "past_knee",
        ),
        (
            {
                "en": "Try wider values of the same knobs until one meets the SLO.",
                "zh": "把同样的旋钮试更极端的取值，直到有一个达标。",
            },
            False,
            "more_values",
        ),
        (
            {
                "en": "Ship the value with the highest goodput: it is the best configuration.",
                "zh": "上线 goodput 最高的那个值：它就是最好的配置。",
            },
            False,
            "ship_best",
        ),
        (
            {
                "en": "The run is invalid: a finished loop always meets the SLO.",
                "zh": "这次运行无效：跑完的闭环一定满足 SLO。",
            },
            False,
            "invalid",
        ),
    ]
    return {
        "type": "single",
        "prompt": {
            "en": f"The recorded loop `{run}` ({wl}, SLO `{slo}`) started from vLLM's "
            f"defaults. It swept "
            f"{knobs} (the named knobs it had values for) and kept nothing: the defaults scored "
            f"{best} req/s of request goodput as run, {share} of the offered rate, and no value met "
            "the SLO. What does this ending tell you?",
            "zh": f"已录制的闭环 `{run}`（{wl_zh}，SLO `{slo}`）从 vLLM 默认配置起步，"
            f"扫了诊断点名、且给了候选值的 {knobs_zh}，"
            f"什么也没保留：按运行时的记录，默认配置的逐请求 goodput 是 {best} req/s，只有压测速率的 {share}，"
            "没有一个取值满足 SLO。这个结局说明什么？",
        },
        "choices": option_list(opts),
        "explain": {
            "en": f"Every knob it swept failed the SLO, so none of them fixes this load: with "
            "these knobs the rate is past what this server serves inside this SLO "
            "(keep.loop_outcome calls it past_knee). No value it tried beat the defaults by "
            f"more than the noise (it kept none), and the defaults serve only {share} of the "
            "offered rate inside the SLO. Wider values of the same knobs are a guess the run "
            "does not support. Find the knee (a lower rate) or add replicas, as in lab 03."
            f"{named_en}",
            "zh": "扫过的旋钮没有一个让 SLO 达标，说明它们都解决不了这份负载：只靠这些旋钮，对这个 SLO，"
            "这个速率已经超过这台服务器的服务能力（keep.loop_outcome 称之为 past_knee）。试过的取值没有一个"
            f"比默认值高出噪声以外（一个都没保留），而默认配置在 SLO 之内也只服务到压测速率的 {share}。"
            "同样旋钮再试更极端的取值，是这次运行支撑不了的猜测。"
            f"去找拐点（更低的速率），或者像实验 03 那样加副本。{named_zh}",
        },
    }


@generator("spread_scale")
def _g_spread_scale(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: loop (a tune folder), grid (its grid's vllm_sweep folder). The grid's best run
    against its run of the loop's kept value, weighed by core.keep.decide with the margin
    of the spread between servers (core.records.relative_spread over both sides' runs of each
    configuration both measured): the key is the rule's verdict where the gain over the lower
    score passes that margin but the difference measured like the spread does not. Refuses
    data where the two scales agree."""
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
    run = loop.as_posix().split("labs/results/")[-1]
    b, k = f"{runs[best]:.2f}", f"{runs[pick]:.2f}"
    opts = [
        (
            {
                "en": f"A tie: measured like the spread, the two runs are {apart:.0%} apart, "
                f"inside {margin:.0%}.",
                "zh": f"打平：按波动的同一算法算，两次运行相差 {apart:.0%}，在 {margin:.0%} 之内。",
            },
            True,
            "tie",
        ),
        (
            {
                "en": f"The grid's best wins: +{gain:.0%} is more than the {margin:.0%} margin.",
                "zh": f"网格最佳胜出：高出 {gain:.0%}，超过了 {margin:.0%} 的边界。",
            },
            False,
            "gain",
        ),
        (
            {
                "en": f"{pick} wins: the loop kept it after its own two windows.",
                "zh": f"{pick} 胜出：闭环凭自己的两个窗口保留了它。",
            },
            False,
            "loop",
        ),
        (
            {
                "en": "Nothing: runs from two hosts can never be compared at all.",
                "zh": "什么也说明不了：两台机器上的运行根本不能比。",
            },
            False,
            "hosts",
        ),
    ]
    return {
        "type": "single",
        "prompt": {
            "en": f"The recorded loop `{run}` kept {pick}. vLLM's grid, on the same workload, "
            f"measured {best} at {b} req/s and {pick} at {k} req/s. The same configuration, "
            f"measured by the loop and by the grid on two servers, moved up to {margin:.0%} "
            "((max - min) / mean). What is the verdict?",
            "zh": f"已录制的闭环 `{run}` 保留了 {pick}。vLLM 的网格在同一份负载上测得 {best} 为 "
            f"{b} req/s，{pick} 为 {k} req/s。同一配置由闭环和网格在两台服务器上分别测，最多相差 "
            f"{margin:.0%}（(最大 − 最小) / 均值）。结论是什么？",
        },
        "choices": option_list(opts),
        "explain": {
            "en": f"{b} against {k} is +{gain:.0%} over the lower number, but a spread is "
            f"(max - min) / mean, and on that scale the two are {apart:.0%} apart: inside the "
            f"{margin:.0%} one configuration moves between servers. A gain over the lower "
            "number grows without bound; (max - min) / mean of two numbers is at most 200 %. "
            "Weigh a difference the way the spread was measured (keep.decide's apart).",
            "zh": f"{b} 对 {k}，以小的为基准是高出 {gain:.0%}；可波动是按 (最大 − 最小) / 均值 算的，"
            f"按同一算法两者只差 {apart:.0%}，落在同一配置换台服务器就会有的 {margin:.0%} 之内。"
            "以小的为基准算提升，可以无限变大；两个数的 (最大 − 最小) / 均值 最多是 200%。"
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
