"""Generators that read the direction map (``course_utils.core.knobs``): directions,
recommendations, free wins, the knobs for a constraint, defaults and cross-knob rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from course_utils.core import capacity, knobs
from course_utils.quiz.data import option_list
from course_utils.quiz.engine import LANGS, QuizError, fmt_num, generator, listed, sep

AXES: dict[str, dict[str, str]] = {
    "throughput": {"en": "throughput", "zh": "吞吐"},
    "ttft": {"en": "TTFT", "zh": "TTFT"},
    "itl": {"en": "ITL/TPOT", "zh": "ITL/TPOT"},
}
CONSTRAINTS: dict[str, dict[str, str]] = {
    "queue": {"en": "queue (requests waiting)", "zh": "队列（请求在排队）"},
    "prefill": {"en": "prefill (TTFT)", "zh": "prefill（TTFT）"},
    "decode": {"en": "decode (TPOT/ITL)", "zh": "decode（TPOT/ITL）"},
    "kv": {"en": "KV cache capacity", "zh": "KV cache 容量"},
    "none": {"en": "nothing binds: the SLO holds", "zh": "没有约束在卡：SLO 已满足"},
}


def _knob_text(k: Any, move: bool = True) -> dict[str, str]:
    """Choice text: the flag and the map's move, or (move=False) the flag and its label,
    for questions where the right direction depends on the constraint."""
    if move:
        return {lg: f"`{k.flag}` — {k.move[lg]}" for lg in LANGS}
    return {"en": f"`{k.flag}` ({k.label['en']})", "zh": f"`{k.flag}`（{k.label['zh']}）"}


def _knob_choices(
    names: Sequence[str] | None, correct: set[str], move: bool = True
) -> list[dict[str, Any]]:
    ks = [knobs.get(n) for n in names] if names else list(knobs.KNOBS.values())
    return option_list([(_knob_text(k, move), k.name in correct, k.name) for k in ks])


MOVE_WORD = {
    "raise": {"en": "raise", "zh": "调高"},
    "lower": {"en": "lower", "zh": "调低"},
    "enable": {"en": "enable", "zh": "开启"},
    "fp8": {"en": "fp8", "zh": "改成 fp8"},
}


def move_word(move: str, lang: str) -> str:
    return MOVE_WORD.get(move, {"en": move, "zh": move})[lang]


def marked(k: Any, ok: bool, lang: str, *parts: str) -> str:
    """One knob's line of an explanation: ``flag ✓/✗: part; part`` (full-width in zh)."""
    clauses = ("，" if lang == "zh" else "; ").join(parts)
    return f"`{k.flag}` {'✓' if ok else '✗'}{sep(':', lang)}{clauses}"


def trade(k: Any, lang: str) -> str:
    return ("取舍" if lang == "zh" else "trade") + sep(":", lang) + k.trade[lang]


def effect_line(k: Any, axis: str, lang: str) -> str:
    """``flag ✓/✗: TTFT better (condition); trade: ...`` for per-option explanations."""
    eff, cond, ax = getattr(k, axis), k.condition(axis, lang), AXES[axis][lang]
    c = (f"（{cond}）" if lang == "zh" else f" ({cond})") if cond else ""
    gap = " " if lang == "en" or ax[-1:].isascii() else ""
    return marked(
        k, eff == "better", lang, ax + gap + knobs.EFFECT_WORD[eff][lang] + c, trade(k, lang)
    )


def each(lines: Sequence[str], lang: str) -> str:
    return ("；" if lang == "zh" else "; ").join(lines) + ("。" if lang == "zh" else ".")


@generator("knob_direction")
def _g_knob_direction(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: knob, axis (throughput|ttft|itl), given ({zh, en}: the situation, stated in
    the prompt so 'depends' is settled). Answer: the Effect in knobs.KNOBS."""
    k = knobs.get(p["knob"])
    axis = p["axis"]
    if axis not in AXES:
        raise QuizError(f"axis must be one of {', '.join(AXES)}, got {axis!r}")
    eff = getattr(k, axis)
    order = ("better", "worse", "neutral", "depends")
    return {
        "type": "single",
        "choices": option_list([(knobs.EFFECT_WORD[e], e == eff, e) for e in order]),
        "values": {
            "given": p.get("given") or "",
            "label": k.label,
            "flag": k.flag,
            "move": k.move,
            "axis": AXES[axis],
            "effect": knobs.EFFECT_WORD[eff],
            "trade": k.trade,
            "note": {lg: k.note.get(lg, "") for lg in LANGS},
        },
    }


@generator("knob_recommend")
def _g_knob_recommend(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: goal (throughput|ttft|itl|capacity), knobs (the options shown, in order).
    Answer: knobs.recommend(goal) among them; the explanation says why each is in or out."""
    goal = p["goal"]
    good = [k.name for k in knobs.recommend(goal)]
    choices = _knob_choices(p.get("knobs"), set(good))
    if not any(c["correct"] for c in choices):
        raise QuizError(f"none of the listed knobs helps {goal}")
    axis = goal if goal in AXES else "throughput"
    shown = [knobs.get(c["key"]) for c in choices]
    flags = [f"`{knobs.get(n).flag}`" for n in good]
    return {
        "type": "multiple",
        "choices": choices,
        "values": {
            "lines": {lg: each([effect_line(k, axis, lg) for k in shown], lg) for lg in LANGS},
            "goal": goal,
            "n": len(flags),
            "flags": listed(flags),
        },
    }


def helps_both(k: Any) -> bool:
    """Throughput better, a latency better and none marked worse, by the direction map (a
    "depends" is a condition the explanation names, not a latency the move pays with)."""
    return (
        k.throughput == "better" and "worse" not in (k.ttft, k.itl) and "better" in (k.ttft, k.itl)
    )


DEPENDS_NOTE = {
    "en": ' ({ax} "depends": it can also get worse, so measure it too)',
    "zh": "（{ax}「看情况」：也可能变差，所以也要测）",
}


@generator("knob_free_wins")
def _g_knob_free_wins(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: knobs (the options shown). Answer: those whose move helps throughput and
    leaves no latency worse in the direction map (they trade something off the curve)."""
    shown = [knobs.get(n) for n in p["knobs"]]
    choices = option_list([(_knob_text(k), helps_both(k), k.name) for k in shown])

    def line(k: Any, lg: str) -> str:
        effs = "/".join(knobs.EFFECT_WORD[e][lg] for e in (k.throughput, k.ttft, k.itl))
        head = "吞吐/TTFT/ITL " if lg == "zh" else "throughput/TTFT/ITL "
        out = marked(k, helps_both(k), lg, head + effs, trade(k, lg))
        for ax in ("ttft", "itl"):
            if getattr(k, ax) == "depends" and helps_both(k):
                out += DEPENDS_NOTE[lg].format(ax=AXES[ax][lg])
        return out

    return {
        "type": "multiple",
        "choices": choices,
        "values": {"lines": {lg: each([line(k, lg) for k in shown], lg) for lg in LANGS}},
    }


@generator("default_cap")
def _g_default_cap(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: gpu, small_gpu, field_default, rate, e2e_s. Answer: by Little's law, whether
    the cap vLLM logs on ``gpu`` without the flag (knobs.default) holds the load."""

    def cap(key: str) -> int:
        g = capacity.get_gpu(key)
        return int(knobs.default("max_num_seqs", gpu_memory_gib=g.memory_gib, gpu_name=g.name))

    gpu, sgpu = capacity.get_gpu(p["gpu"]), capacity.get_gpu(p["small_gpu"])
    logged, small, fd = cap(p["gpu"]), cap(p["small_gpu"]), int(p["field_default"])
    rate, e2e = float(p["rate"]), float(p["e2e_s"])
    n = rate * e2e
    if not fd < small < n < logged:
        raise QuizError("default_cap: needs field default < small-GPU default < load < cap")
    return {
        "type": "single",
        "right": "fits",
        "values": {
            "gpu": gpu.name,
            "sgpu": sgpu.name,
            "logged": logged,
            "small": small,
            "fd": fd,
            "rate": fmt_num(rate),
            "e2e": fmt_num(e2e),
            "n": fmt_num(n),
        },
    }


@generator("knob_constraint")
def _g_knob_constraint(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: constraint, knobs (optional subset). Answer: knobs.for_constraint()."""
    c = p["constraint"]
    pairs = knobs.for_constraint(c)
    if c not in CONSTRAINTS or not pairs:
        raise QuizError(f"no knob relieves constraint {c!r}")
    names = {k.name for k, _ in pairs}
    shown = [knobs.get(n) for n in p["knobs"]] if p.get("knobs") else list(knobs.KNOBS.values())

    def line(k: Any, lg: str) -> str:
        if k.name not in names:
            return marked(k, False, lg, k.label[lg])
        return marked(k, True, lg, move_word(k.relieves[c], lg), k.trade[lg])

    return {
        "type": "multiple",
        "choices": _knob_choices(p.get("knobs"), names, move=False),
        "values": {
            "constraint": CONSTRAINTS[c],
            "lines": {lg: each([line(k, lg) for k in shown], lg) for lg in LANGS},
        },
    }


@generator("knob_validate")
def _g_knob_validate(p: Mapping[str, Any]) -> dict[str, Any]:
    """params: values (knob -> value), gpu_memory_gib. Answer: knobs.validate() accepts?"""
    values = dict(p["values"])
    gib = p.get("gpu_memory_gib")
    argv = " ".join(f"{knobs.get(n).flag} {v}" for n, v in values.items())
    try:
        knobs.validate(values, gpu_memory_gib=gib)
        ok, why = True, None
    except knobs.KnobError as e:
        ok, why = False, str(e)
    hit = [kk for kk in knobs.KNOBS.values() if why and kk.name in why]
    where = sorted({f"{kk.config.split('.')[0]} ({kk.source})" for kk in hit})
    return {
        "type": "single",
        "right": "starts" if ok else "rejected",
        "values": {
            "argv": argv,
            "on": ["gpu"] if gib else [],
            "gib": fmt_num(gib) if gib else "",
            "why": why or "",
            "where": listed(where),
            "verdict": ["raises" if why else "accepts"],
        },
    }
