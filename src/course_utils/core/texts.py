"""What the labs print, in the page's language: verdicts, knees, why the loop stopped and what
it concluded, validity issues, the loop against vLLM's grid. English reuses the rules' ``why``;
Chinese is built from the structured fields (or the numbers inside ``why``)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from importlib.resources import files
from typing import Any

from course_utils.core import diagnose

LANGS = ("en", "zh")
DECISIONS = {
    "keep": {"en": "KEEP", "zh": "保留"},
    "revert": {"en": "REVERT", "zh": "回退到基线"},
    "recheck": {"en": "RECHECK", "zh": "先复测"},
    "none": {"en": "NO VERDICT", "zh": "无法判断"},
}


def package_texts(name: str) -> dict[str, dict[str, str]]:
    """A text table shipped as package data, ``data/<name>.json``."""
    return dict(json.loads((files("course_utils") / "data" / f"{name}.json").read_text("utf-8")))


def check_lang(lang: str) -> str:
    """``lang`` if it is one of LANGS, else ValueError."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, not {lang!r}")
    return lang


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def decision_word(decision: str, lang: str = "en") -> str:
    """KEEP / 保留 ... for a verdict's decision."""
    if decision not in DECISIONS:
        raise ValueError(f"unknown decision {decision!r} (one of {sorted(DECISIONS)})")
    return DECISIONS[decision][check_lang(lang)]


# ---- validity issues (validity.py) ---------------------------------------------------------

_ISSUES_ZH: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"^prefix cache hit rate (\S+) on a workload without a shared prefix: .*"),
        "prefix cache 命中率 {0}，而这份负载没有共享前缀：prompt 被重放了，结果偏好",
    ),
    (re.compile(r"^no request completed \((\d+) failed\)$"), "没有请求完成（失败 {0} 个）"),
    (re.compile(r"^(\d+) of (\d+) requests failed$"), "{1} 个请求中失败了 {0} 个"),
    (
        re.compile(r"^completed\+failed = (\d+), expected num_prompts (\d+)$"),
        "完成加失败共 {0} 个，应为 num_prompts {1} 个",
    ),
    (
        re.compile(r"^mean output (\S+) tokens/request < requested (\d+).*"),
        "平均每个请求只输出 {0} 个 token，少于要求的 {1} 个（提前遇到 EOS？请传 ignore_eos）",
    ),
    (
        re.compile(r"^offered rate (\S+) req/s vs requested (\S+) \(tolerance (\S+)\).*"),
        "实际到达率 {0} req/s，要求 {1}（容差 {2}）：压测客户端没跟上节奏",
    ),
    (
        re.compile(r"^vLLM JIT-compiled (\d+) kernel\(s\) inside the measured window \((.*)\).*"),
        "测量窗口内 vLLM JIT 编译了 {0} 个 kernel（{1}）：一次性的延迟尖峰，请在热身后的 server 上重测",
    ),
    (  # core.validity.trace_prompt_issue
        re.compile(r"^the server counted (\S+) x the trace's prompt tokens .*"),
        "服务端数到的 prompt token 是轨迹的 {0} 倍（timed_trace 的随机 prompt 被重新分词）："
        "按这台服务的分词器缩放后重测",
    ),
    (  # core.validity.warmup_issue
        re.compile(r"^the warm-up ran at most (\S+) requests at once, the window (\S+):.*"),
        "热身最多只有 {0} 个请求同时在跑，测量窗口到了 {1} 个：负载的批大小没有热身到",
    ),
]


def issue(text: str, lang: str = "en") -> str:
    """One validity issue in `lang` (an unknown issue is returned as recorded)."""
    return text if check_lang(lang) == "en" else _translate(text, _ISSUES_ZH)


def _translate(text: str, table: list[tuple[re.Pattern[str], str]]) -> str:
    """The first matching pattern's Chinese, filled with its groups; else ``text``."""
    for pat, zh in table:
        if m := pat.match(text):
            return zh.format(*m.groups())
    return text


# ---- lab 01's verdict (keep.verdict) --------------------------------------------------------

_SLO_MISS_RE = re.compile(r"\((p99 latency (\S+) s > (\S+) s|accuracy (\S+) < baseline (\S+))\)")
_MIN_GAIN_RE = re.compile(r"< (\d+(?:\.\d+)?)%")
_BASELINE_RE = re.compile(r"^baseline (.*) has no successful measurement$")


def _verdict_why_zh(v: Mapping[str, Any]) -> str:
    d = v.get("decision")
    why = str(v.get("why") or "")
    gain = v.get("gain")
    if d == "none":
        m = _BASELINE_RE.match(why)
        base = f"基线 {m.group(1)} " if m else "基线"
        return f"{base}没有一次成功的测量，无法比较"
    if d == "keep":
        return f"输出 tok/s 比基线高 {_pct(gain or 0.0)}，且满足 SLO"
    if d == "recheck":
        cand = v.get("candidate")
        if v.get("kv") is not None:
            kv = v["kv"]
            return (
                f"{cand!r} 的输出 tok/s 高了 {_pct(gain or 0.0)}，但在基线上 KV cache 并没有卡住"
                f"（速度测试最多只要 {kv['demand_tokens']:,} 个 token，池子有 "
                f"{kv['kv_tokens']:,} 个），更多 KV 解释不了这个提升：换个顺序"
                "（新的 output_dir）再测一次，再决定要不要保留"
            )
        gap = v.get("same_batch_gap")
        if gap is not None:
            return (
                f"{cand!r} 的输出 tok/s 高了 {_pct(gain or 0.0)}，但在 KV cache 填满之前"
                f"（旋钮还起不了作用）它和基线就已经差了 {_pct(gap)}：这个提升落在这台机器"
                "的运行间波动之内；换顺序、多测几次再决定"
            )
        return f"{cand!r} 的提升 {_pct(gain or 0.0)} 还需要复测"
    # revert
    if "slo_met_by" in v and not v["slo_met_by"]:
        m = _SLO_MISS_RE.search(why)
        miss = ""
        if m and m.group(2):
            miss = f"（p99 延迟 {m.group(2)} s > {m.group(3)} s）"
        elif m and m.group(4):
            miss = f"（准确率 {m.group(4)} 低于基线的 {m.group(5)}）"
        return (
            f"没有任何设置满足 SLO，基线也不满足{miss}：这个 SLO 不适合这份负载；"
            "先保持基线，再改负载或 SLO"
        )
    if v.get("slo_met_by"):
        return "基线本身就是满足 SLO、又不损失质量的最快设置"
    m = _MIN_GAIN_RE.search(why)
    if m and gain:
        return f"最好的提升只有 {_pct(gain)}，不到 {m.group(1)}%：不值得改"
    return "没有别的设置既满足 SLO、又比基线快"


def verdict(v: Mapping[str, Any], lang: str = "en", knob: str | None = None) -> str:
    """One line: the decision, the value it leaves in place (``knob=value``), and why, for
    ``keep.verdict(...)`` or ``keep.judge(...)``."""
    check_lang(lang)
    if "verdict" in v and isinstance(v["verdict"], Mapping):
        v = v["verdict"]
    if "decision" not in v:
        raise ValueError("not a verdict: no 'decision' key")
    word = decision_word(str(v["decision"]), lang)
    value = v.get("value")
    target = "" if value is None else (f" {knob}={value}" if knob else f" {value}")
    if lang == "en":
        return f"{word}{target}: {v.get('why', '')}"
    return f"{word}{target}：{_verdict_why_zh(v)}"


# ---- the knee (keep.pick_knee) --------------------------------------------------------------

_LOOP_RE = re.compile(r"; (\S+) req/s: all (\d+) valid loop point\(s\) \((.*?); fresh servers\)")


def knee(k: Mapping[str, Any], lang: str = "en") -> str:
    """The knee sentence of ``keep.pick_knee(...)``."""
    if check_lang(lang) == "en":
        return str(k.get("why", ""))
    if "knee_rate" not in k:
        raise ValueError("not a knee: no 'knee_rate' key")
    rate, over = k.get("knee_rate"), k.get("overloaded_rate")
    if rate is None:
        out = "没有一个有效的测试速率满足 SLO：把速率降下来（或者这个 SLO 够不着）"
    elif over is None:
        out = f"直到 {rate:g} req/s 的每个有效测试速率都满足 SLO：拐点还在更高处"
    else:
        by = "拐点扫描" if k.get("overloaded_by") == "knee scan" else "闭环的测量点"
        out = f"拐点在 {rate:g} req/s（满足 SLO 的最高有效速率）和 {over:g} req/s（依据：{by}）之间"
        m = _LOOP_RE.search(str(k.get("why", "")))
        if k.get("overloaded_by") == "loop points" and m:
            pts = m.group(3).replace("baseline", "基线").replace(", ", "、")
            out += (
                f"；在 {m.group(1)} req/s，闭环的全部 {m.group(2)} 个有效点（{pts}；"
                "每个都在新启动的 server 上）都没满足 SLO"
            )
    invalid = list(k.get("invalid") or [])
    if invalid:
        names = "、".join(f"{i['rate']:g}" for i in invalid)
        first = next((i["issues"][0] for i in invalid if i.get("issues")), None)
        out += f"；忽略了无效的速率 {names}" + (f"（{issue(first, 'zh')}）" if first else "")
    return out


# ---- why tune() stopped (sweep.tune) --------------------------------------------------------

_STOPS_ZH: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            r"^plateau: no knob the diagnosis names \((.*)\) has candidates left that help$"
        ),
        "到平台了：诊断点名的旋钮（{0}）都没有还能带来提升的候选值",
    ),
    (
        re.compile(r"^GPU budget: (\S+) min left < (\S+) min per point$"),
        "GPU 预算到了：只剩 {0} 分钟，少于每个点约 {1} 分钟",
    ),
    (re.compile(r"^max_steps \((\d+)\) reached$"), "已走满 max_steps（{0} 步）"),
    (re.compile(r"^baseline failed: (.*)$"), "基线没能启动：{0}"),
    (re.compile(r"^baseline not run$"), "基线没有运行"),
    (re.compile(r"^(\S+): no point ran$"), "{0}：一个点也没跑"),
]
_NO_KNOB_RE = re.compile(r"^diagnosis '([^']*)' \(([^)]*)\) names no engine knob: (.*)$")


def _no_knob_zh(leaf: str, constraint: str) -> str:
    node = diagnose.TREE.get(leaf)
    name = node.text["zh"] if isinstance(node, diagnose.Leaf) else leaf
    tail = "加副本或降低到达率，这不是调参问题" if constraint == "queue" else "已经到头了"
    return f"诊断「{name}」没有点名任何引擎旋钮：{tail}"


def stop_reason(summary: Mapping[str, Any] | str, lang: str = "en") -> str:
    """Why ``tune`` stopped: its summary (or the ``stop_reason`` string) in `lang`."""
    reason = summary if isinstance(summary, str) else str(summary.get("stop_reason") or "")
    if check_lang(lang) == "en" or not reason:
        return reason
    if m := _NO_KNOB_RE.match(reason):
        return _no_knob_zh(m.group(1), m.group(2))
    return _translate(reason, _STOPS_ZH)


def loop_outcome(o: Mapping[str, Any], lang: str = "en") -> str:
    """What a finished loop concluded (``keep.loop_outcome``'s dict) in `lang`."""
    if check_lang(lang) == "en":
        return str(o.get("why") or "")
    share = o.get("goodput_share")
    share_zh = "" if share is None else f"（goodput 只有压测速率的 {float(share):.0%}）"
    knobs = "、".join(o.get("tried") or []) or "无"
    rest = "、".join(o.get("untried") or [])
    also = f"；没试的：{rest}" if rest else ""
    on = "、".join(o.get("in_effect") or [])
    also += f"；本来就已开启：{on}" if on else ""
    return {
        "meets_slo": "保留的配置在这个速率下满足 SLO",
        "past_knee": (
            f"试过的设置都没能满足 SLO{share_zh}；试过的旋钮：{knobs}。只靠这些旋钮，对这个 SLO "
            f"来说，这个速率已经超过服务器的拐点：把速率降到拐点，或者加副本{also}"
        ),
        "untested": f"SLO 未满足{share_zh}，而诊断点名的旋钮一个也没扫（{rest or '无'}）："
        "什么也没试，也就得不出结论",
        "unfinished": f"还没到平台期就停了，SLO 仍未满足{share_zh}：加预算后续跑",
        "no_result": "没有结果：基线没有有效的测量",
    }.get(str(o.get("outcome")), str(o.get("why") or ""))


# ---- the loop against vLLM's grid (lab.grid.compare) ------------------------------------

_LVG_HEAD = {
    "en": ["", "vLLM's grid (`vllm bench sweep serve`)", "the loop (`tune()`)", "loop / grid"],
    "zh": ["", "vLLM 网格（`vllm bench sweep serve`）", "调优循环（`tune()`）", "循环 / 网格"],
}
_LVG = package_texts("loop_vs_grid_texts")
_OBJ = {
    "request_goodput": {"en": "vLLM request goodput", "zh": " vLLM 请求 goodput"},
    "gate": {"en": "p99-gate goodput", "zh": " p99 门槛 goodput"},
}
_WARM_ZH = {
    "gridbench (lab.measure's warm-up)": "与 measure() 相同的热身（按负载速率发一部分请求）",
    "vllm --num-warmups": "vLLM 自带的 --num-warmups（同时发 N 个相同请求）",
}


def _gain_text(v: Mapping[str, Any], lang: str) -> str:
    """The verdict's gain, and, where it reads larger, the difference on the spread's own
    scale ((max - min) / mean), which is what the margin is weighed against."""
    if v.get("gain") is None:
        return "n/a"
    gain, apart = float(v["gain"]), v.get("apart")
    if apart is None or abs(float(apart) - gain) < 0.001:
        return f"{gain:+.1%}"
    if lang == "zh":
        return f"{gain:+.1%}（按 (最大 - 最小) / 平均 算，相差 {float(apart):.1%}）"
    return f"{gain:+.1%} ({float(apart):.1%} apart as (max - min) / mean)"


def _num(x: Any, nd: int = 2) -> str:
    return "n/a" if x is None else f"{float(x):.{nd}f}"


def _label(label: Any, lang: str) -> str:
    return "vLLM 默认值" if lang == "zh" and label == "defaults" else str(label)


def _cell(value: Any, label: Any, lang: str) -> str:
    """ "1.61 (defaults)" / "1.61（vLLM 默认值）"."""
    lab = _label(label, lang)
    return f"{_num(value)}（{lab}）" if lang == "zh" else f"{_num(value)} ({lab})"


def loop_vs_grid(cmp: Mapping[str, Any], lang: str = "en") -> str:
    """The "loop vs the grid" table (Markdown) and its verdict, in `lang`."""
    t = _LVG[check_lang(lang)]
    g, lp, r, v = cmp["grid"], cmp["loop"], cmp["ratios"], cmp["verdict"]
    obj = _OBJ.get(cmp.get("objective", "request_goodput"), _OBJ["request_goodput"])[lang]
    best = g.get("best")
    pick = cmp.get("loop_pick_in_grid")
    loop_label = lp.get("label") or ", ".join(f"{k}={x}" for k, x in lp["knobs"].items())
    best_cell = _cell(best["score"], best["label"], lang) if best else t["none"]
    rows = [
        "| " + " | ".join(_LVG_HEAD[lang]) + " |",
        "|---|---|---|---|",
        f"| {t['starts']} | {g['server_starts']} | {lp['server_starts']} | "
        f"{_num(r['server_starts_loop_over_grid'])} |",
        f"| {t['minutes']} | {_num(g['gpu_minutes'], 1)} | {_num(lp['gpu_minutes'], 1)} | "
        f"{_num(r['gpu_minutes_loop_over_grid'])} |",
        f"| {t['best'].format(obj=obj)} | {best_cell} | {_cell(lp['score'], loop_label, lang)} | "
        f"{_num(r['loop_over_grid_best'], 3)} |",
    ]
    if pick is not None:
        rows.append(
            f"| {t['pick']} | {_cell(pick['score'], pick['label'], lang)} | "
            f"| {_num(r['pick_in_grid_over_grid_best'], 3)} |"
        )
    fill = {
        "best": _label(best["label"], lang) if best else t["none"],
        "pick": _label(pick["label"], lang) if pick else loop_label,
        "gain": _gain_text(v, lang),
        "margin": "n/a" if v.get("margin") is None else f"{float(v['margin']):.1%}",
    }
    lines = [
        t["slo"].format(slo=cmp["slo"], obj=obj.strip()),
        "",
        *rows,
        "",
        t[v["decision"]].format(**fill),
    ]
    want = g.get("combos_planned") or []
    done = {c["label"] for c in g["combos"] if c["valid_runs"]}  # a rejected run decides nothing
    if want and len(done) < len(want):
        left = ", ".join(_label(w, lang) for w in want if w not in done)
        lines.append(t["partial"].format(done=len(done), want=len(want), left=left))
    cross = cmp.get("cross_spread") or {}
    if cross:
        rows_ = ("；" if lang == "zh" else "; ").join(
            f"{_label(k, lang)} {float(x):.1%}" for k, x in cross.items()
        )
        lines.append(t["cross"].format(rows=rows_))
    warm = (g.get("warmup") or {}).get("kind")
    if warm:
        lines.append(t["warm"].format(warm=_WARM_ZH.get(warm, warm) if lang == "zh" else warm))
    bad = [c for c in g["combos"] if c["valid_runs"] < c["runs"]]
    if bad:
        why = "; ".join(
            f"{_label(c['label'], lang)}: {issue(c['issues'][0], lang)}" for c in bad if c["issues"]
        )
        lines.append(t["invalid"].format(n=sum(c["runs"] - c["valid_runs"] for c in bad), why=why))
    return "\n".join(lines)


# ---- the loop against vLLM's grid, one row per constraint (lab.grid) ---------------------

_CASE: dict[str, tuple[str, str]] = {  # (en, zh), as every table below
    "prefill": ("prefill (long prompts, tight TTFT)", "prefill（长 prompt，TTFT 目标紧）"),
    "decode": ("decode (tight TPOT)", "decode（TPOT 目标紧）"),
    "kv": ("KV capacity", "KV 容量"),
    "knee": ("queue past the knee", "过了拐点的排队"),
    "prefix": ("shared prefix", "共享前缀"),
    "queue_cap": ("queue: batch-width cap", "排队：批宽上限"),
}
_CT_HEAD = [
    ("constraint", "约束"),
    ("workload · SLO", "负载 · SLO"),
    ("vLLM's defaults (grid)", "vLLM 默认配置（网格）"),
    ("the loop's final", "闭环最终"),
    ("the grid's best", "网格最佳"),
    ("loop ÷ grid best", "闭环 ÷ 网格最佳"),
    ("servers loop : grid", "服务器启动 闭环 : 网格"),
    ("verdict", "结论"),
    ("the loop ended", "闭环的结局"),
]
_CT: dict[str, tuple[str, str]] = {
    "not_run": ("not run yet", "尚未运行"),
    "partial": (
        "partial: the grid measured {m} of {n} combos",
        "不完整：网格测了 {n} 个组合中的 {m} 个",
    ),
    "no_loop": ("; the loop not recorded", "；闭环没有记录"),
    "handicap": (" (from {start}, a handicap)", "（从 {start} 起步，人为设障）"),
    "cross": (" (one config {x} apart on two servers)", "（同一配置在两台服务器上差 {x}）"),
    "wl": (
        "{i}→{o} tokens{pre}, {r} req/s; {slo}",
        "输入 {i} / 输出 {o} token{pre}，{r} req/s；{slo}",
    ),
    "pre": (" ({p} shared)", "（其中 {p} 共享）"),
    "note": ("**{case}**: {note}", "**{case}**：{note}"),
    "sep": ("; ", "；"),
    "label": (" (`{x}`)", "（`{x}`）"),
}
_CT_VERDICT = {
    "same": ("the same pick", "选的相同"),
    "tie": ("tie", "打平"),
    "grid_better": ("the grid is better", "网格更好"),
    "undecided": ("undecided", "无法判断"),
    "loop_unfinished": ("none yet: the loop is unfinished", "暂无：闭环没跑完"),
}
_CT_OUTCOME = {
    "meets_slo": ("meets the SLO", "满足 SLO"),
    "past_knee": ("past the knee", "已过拐点"),
    "untested": ("nothing tried", "什么也没试"),
    "unfinished": ("unfinished", "没跑完"),
    "no_result": ("no result", "无结果"),
}


def _gp(x: Any) -> str:
    return "—" if x is None else f"{float(x):.2f} req/s"


def _pick(table: Mapping[str, tuple[str, str]], key: Any, lang: str, default: str = "—") -> str:
    """``table[key]`` in ``lang``; ``default`` for a key it does not have."""
    return table[key][LANGS.index(lang)] if key in table else default


def _ct_row(r: Mapping[str, Any], lang: str) -> list[str]:
    t = {k: v[LANGS.index(lang)] for k, v in _CT.items()}
    case = _pick(_CASE, r["case"], lang, str(r["case"]))
    if r.get("handicapped_start"):
        case += t["handicap"].format(start=f"`{r['handicapped_start']}`")
    w = r.get("workload") or {}
    wl = "—"
    if w:
        pre = t["pre"].format(p=w["prefix_len"]) if w.get("prefix_len") else ""
        wl = t["wl"].format(
            i=w["input_len"],
            o=w["output_len"],
            pre=pre,
            r=f"{float(w['request_rate']):g}",
            slo=f"`{r.get('slo')}`",
        )
    if r["status"] == "not_run":
        return [case, wl, *[t["not_run"]] + ["—"] * 6]
    verdict = _pick(_CT_VERDICT, r.get("verdict"), lang)
    if r.get("cross_spread") is not None and r.get("verdict") == "tie":
        verdict += t["cross"].format(x=f"{float(r['cross_spread']):.0%}")
    if r["status"] == "partial":
        verdict = t["partial"].format(m=r["combos_measured"], n=r["combos_planned"]) + (
            t["no_loop"] if r.get("loop") is None else f"{t['sep']}{verdict}"
        )
    ratio = r.get("loop_over_grid_best")
    best = _gp(r.get("grid_best"))
    if r.get("grid_best_label"):
        best += t["label"].format(x=r["grid_best_label"])
    starts = "—"
    if r.get("restarts_grid") is not None:
        starts = f"{r.get('restarts_loop') if r.get('restarts_loop') is not None else '—'} : "
        starts += str(r["restarts_grid"])
    return [
        case,
        wl,
        _gp(r.get("defaults")),
        _gp(r.get("loop")),
        best,
        "—" if ratio is None else f"{float(ratio):.2f}",
        starts,
        verdict,
        _pick(_CT_OUTCOME, r.get("outcome"), lang),
    ]


def constraint_table(rows: list[Mapping[str, Any]], lang: str = "en") -> str:
    """The loop against vLLM's grid, one row per constraint (``lab.grid.CaseRow``
    dicts), then each row's note, in `lang`."""
    lang = check_lang(lang)
    head = [h[LANGS.index(lang)] for h in _CT_HEAD]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [
        "| " + " | ".join(c.replace("|", "\\|") for c in _ct_row(r, lang)) + " |" for r in rows
    ]
    notes = [
        _pick(_CT, "note", lang).format(
            case=_pick(_CASE, r["case"], lang, str(r["case"])), note=r["note"][lang]
        )
        for r in rows
        if (r.get("note") or {}).get(lang)
    ]
    return "\n".join(lines + ([""] + [f"- {n}" for n in notes] if notes else []))
