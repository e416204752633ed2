"""The direction map: every tuning knob of vLLM 0.26.0 (records in ``core.knob_table``), the
defaults a user really gets, vLLM's checks on the values, and the book's tables. Directions
are facts about the mechanism (conditions in ``Knob.when``); magnitudes are for your sweep.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from course_utils.core.knob_table import KNOB_LIST, Entry, Knob, Lang
from course_utils.core.knob_table import METRIC_ATTR as METRIC_ATTR
from course_utils.core.knob_table import RELIEF_WORD as RELIEF_WORD

GIB = 1024**3
LARGE_GPU_GIB = 70  # EngineArgs.get_batch_defaults: >= 70 GiB and not an A100


class KnobError(ValueError):
    """A knob name, value or combination that vLLM 0.26.0 would reject."""


KNOBS: dict[str, Knob] = {k.name: k for k in KNOB_LIST}
GROUPS: dict[str, dict[str, str]] = {
    "capacity": {"en": "capacity", "zh": "容量"},
    "batch_shape": {"en": "batch shape", "zh": "批形状"},
    "reuse_latency": {"en": "reuse & latency", "zh": "复用与延迟"},
    "scale": {"en": "scale", "zh": "扩展"},
}
# Symbols say good or bad for that metric, not up or down: "✗ worse" on ITL means ITL rises.
EFFECT_SYMBOL: dict[str, str] = {"better": "✓", "worse": "✗", "neutral": "≈", "depends": "±"}
NONE_DEFAULT: dict[str, dict[str, str]] = {
    "quantization": {"en": "none (read from the model's config)", "zh": "无（按模型 config）"},
    "max_model_len": {"en": "from the model's config", "zh": "取自模型 config"},
    "speculative_config": {"en": "off", "zh": "关闭"},
}
EFFECT_WORD: dict[str, dict[str, str]] = {
    "better": {"en": "better", "zh": "变好"},
    "worse": {"en": "worse", "zh": "变差"},
    "neutral": {"en": "about the same", "zh": "基本不变"},
    "depends": {"en": "depends", "zh": "看情况"},
}


def get(name: str) -> Knob:
    """The knob called ``name`` (LLM kwarg, or flag with or without dashes)."""
    key = name.strip().lstrip("-").replace("-", "_")
    if key not in KNOBS:
        raise KnobError(f"unknown knob {name!r}; known: {', '.join(KNOBS)}")
    return KNOBS[key]


def default(
    name: str, *, gpu_memory_gib: float = 24.0, entry: Entry = "serve", gpu_name: str = ""
) -> Any:
    """The value a user gets in 0.26.0 when the knob is not set (CUDA GPUs)."""
    knob = get(name)
    if entry not in ("serve", "llm"):
        raise KnobError(f"entry must be 'serve' or 'llm', not {entry!r}")
    large = gpu_memory_gib >= LARGE_GPU_GIB and "a100" not in gpu_name.lower()
    if knob.name == "max_num_seqs":
        return 1024 if large else 256
    if knob.name == "max_num_batched_tokens":
        if large:
            return 8192 if entry == "serve" else 16384
        return 2048 if entry == "serve" else 8192
    return {
        "gpu_memory_utilization": 0.92,
        "quantization": None,  # read from the model's quantization_config if present
        "kv_cache_dtype": "auto",
        "max_model_len": None,  # derived from the model config
        "enable_chunked_prefill": True,
        "enable_prefix_caching": True,
        "speculative_config": None,
        "enforce_eager": False,
        "tensor_parallel_size": 1,
    }[knob.name]


def effective(
    values: Mapping[str, Any],
    names: Iterable[str],
    *,
    gpu_memory_gib: float,
    entry: Entry = "serve",
    gpu_name: str = "",
) -> dict[str, Any]:
    """``values`` with vLLM's default filled in for each knob of ``names`` they leave unset:
    a configuration that spells a default out is the same server as one that leaves it."""
    kw: dict[str, Any] = dict(gpu_memory_gib=gpu_memory_gib, entry=entry, gpu_name=gpu_name)
    return {**{get(n).name: default(n, **kw) for n in names}, **values}


def human_readable_int(value: Any, name: str) -> int:
    """An int as vLLM 0.26.0's ``human_readable_int`` reads it: k/m/g/t decimal (25.6k too),
    K/M/G/T binary (whole numbers only), else a plain int."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise KnobError(f"{name}: {value!r} is not a valid int")
    if isinstance(value, int | float):
        return int(value)
    text = str(value).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text)
    if m:
        number, suffix = m.groups()
        if suffix.islower():
            return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        if "." in number:
            raise KnobError(
                f"{name}: {value!r}: decimals are not allowed with binary suffixes like "
                f"{suffix}; did you mean {number}{suffix.lower()}?"
            )
        return int(number) * 2 ** (10 * "KMGT".index(suffix) + 10)
    try:
        return int(text)
    except ValueError:
        raise KnobError(
            f"{name}: {value!r} is not an int or a size such as 1k (1000) or 1K (1024)"
        ) from None


def _max_model_len(value: Any) -> int | None:
    """``--max-model-len`` as 0.26.0 parses it (human_readable_int_or_auto): a size, or -1 /
    'auto'; ModelConfig then needs >= 1 (-1: the longest context memory allows)."""
    if value is None:
        return None
    if str(value).strip() == "-1" or str(value).strip().lower() == "auto":
        return -1
    n = human_readable_int(value, "max_model_len")
    if n < 1:
        raise KnobError(f"max_model_len must be >= 1, or -1/'auto', got {value!r}")
    return n


_BOOL_WORDS = dict.fromkeys(("true", "1", "yes", "on"), True)
_BOOL_WORDS |= dict.fromkeys(("false", "0", "no", "off"), False)


def _coerce(knob: Knob, value: Any) -> Any:
    t = knob.value_type
    if knob.name == "max_model_len":
        return _max_model_len(value)
    if knob.name == "max_num_batched_tokens" and value is not None:
        return human_readable_int(value, knob.name)
    try:
        if t == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if t == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if t == "bool":
            return value if isinstance(value, bool) else _BOOL_WORDS[str(value).lower()]
        if t == "json":
            out = value if value is None or isinstance(value, dict) else json.loads(str(value))
            if out is not None and not isinstance(out, dict):
                raise ValueError  # vLLM reads a config object, e.g. {"method": "ngram"}
            return out
        return None if value is None else str(value)
    except (ValueError, TypeError, KeyError, json.JSONDecodeError):
        raise KnobError(f"{knob.name}: {value!r} is not a valid {t}") from None


def validate(
    values: Mapping[str, Any],
    *,
    gpu_memory_gib: float | None = None,
    entry: Entry = "serve",
    gpu_name: str = "",
) -> dict[str, Any]:
    """The values coerced to their types after vLLM 0.26.0's checks of names, types, ranges
    and cross-knob rules (with the defaults of ``gpu_memory_gib`` when given); KnobError."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        knob = get(name)
        v = _coerce(knob, value)
        n = knob.name
        if n == "gpu_memory_utilization" and not 0 < v <= 1:
            raise KnobError(f"gpu_memory_utilization must be in (0, 1], got {v}")
        if n in ("max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size") and v < 1:
            raise KnobError(f"{n} must be >= 1, got {v}")
        if knob.choices and v is not None and v not in knob.choices:
            raise KnobError(f"{n}: {v!r} is not one of {', '.join(knob.choices)}")
        out[n] = v
    seqs = out.get("max_num_seqs")
    tokens = out.get("max_num_batched_tokens")
    if gpu_memory_gib is not None:
        # EngineArgs._set_default_max_num_seqs_and_batched_tokens_args: an unset
        # max_num_seqs is clamped to the token budget; an unset token budget is not raised
        # to meet an explicit max_num_seqs (SchedulerConfig then rejects the pair).
        kw: dict[str, Any] = dict(gpu_memory_gib=gpu_memory_gib, entry=entry, gpu_name=gpu_name)
        if tokens is None:
            tokens = default("max_num_batched_tokens", **kw)
        if seqs is None:
            seqs = min(default("max_num_seqs", **kw), tokens)
    if seqs is not None and tokens is not None and tokens < seqs:
        # SchedulerConfig.verify_max_model_len in vllm/config/scheduler.py
        raise KnobError(
            f"max_num_batched_tokens ({tokens}) must be >= max_num_seqs ({seqs}); "
            "raise max_num_batched_tokens with max_num_seqs"
        )
    mml = out.get("max_model_len") or 0  # -1 (auto) and unset set no bound here
    if out.get("enable_chunked_prefill") is False and tokens is not None and tokens < mml:
        raise KnobError(
            f"with chunked prefill off, max_num_batched_tokens ({tokens}) must be "
            f">= max_model_len ({mml})"
        )
    return out


def to_cli_args(values: Mapping[str, Any], *, check: bool = True) -> list[str]:
    """``vllm serve`` argv for validated knob values. ``check=False`` checks each knob alone,
    not the cross-knob rules, so vLLM itself judges the combination."""
    if check:
        checked = validate(values)
    else:
        checked = {}
        for name, value in values.items():
            checked.update(validate({name: value}))
    args: list[str] = []
    for name, value in checked.items():
        knob = KNOBS[name]
        if value is None:
            continue
        if knob.value_type == "bool":
            # 0.26.0 flags are BooleanOptionalAction: --x / --no-x
            args.append(knob.flag if value else "--no-" + knob.flag[2:])
        elif knob.value_type == "json":
            args += [knob.flag, json.dumps(value, separators=(",", ":"))]
        else:
            args += [knob.flag, str(value)]
    return args


def recommend(goal: str) -> list[Knob]:
    """Knobs whose move pushes ``goal`` the right way: the rows that show ✓ for ``goal`` in
    ``table``, conditional ones included (``Knob.condition`` says what they need)."""
    if goal == "capacity":
        return [k for k in KNOB_LIST if "kv" in k.relieves]
    if goal not in METRIC_ATTR:
        raise KnobError(f"goal must be throughput, ttft, itl, tpot or capacity, not {goal!r}")
    return [k for k in KNOB_LIST if k.effect(goal) == "better"]


def moves(goal: str, lang: Lang = "en") -> list[tuple[Knob, str, str]]:
    """(knob, move, condition) for every move that helps ``goal``, the reverse moves included
    (lowering ``max_num_batched_tokens`` helps ITL because raising it hurts ITL)."""
    if goal not in METRIC_ATTR:
        raise KnobError(f"goal must be throughput, ttft, itl or tpot, not {goal!r}")
    out = [(k, k.move[lang], k.condition(goal, lang)) for k in recommend(goal)]
    # the reverse move helps where the move hurts
    out += [(k, k.reverse[lang], "") for k in KNOB_LIST if k.reverse and k.effect(goal) == "worse"]
    return out


def display_width(text: str) -> int:
    """Columns in a CJK monospace font: wide and fullwidth characters take 2."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


_SPECTRUM_WORDS: list[tuple[str, str]] = [  # (en, zh)
    ("throughput", "吞吐"),
    ("latency", "延迟"),
    ("(tokens/s, many requests at once)", "（tokens/s，同时跑很多请求）"),
    ("(short steps: low ITL/TPOT)", "（每步短：ITL/TPOT 低）"),
    ("<- toward throughput", "<- 推向吞吐"),
    ("toward low latency ->", "推向低延迟 ->"),
    ("close to free on both ends:", "两端都几乎免费："),
    ("conditions and costs: the direction map in section 4", "条件与代价：见第 4 节的方向图"),
]


def spectrum_text(lang: Lang = "en") -> str:
    """The knob spectrum for a monospace block: the throughput end left, the ITL/TPOT end
    right, near-free wins below; ASCII and wide CJK only, so the columns line up."""
    words = [w[("en", "zh").index(lang)] for w in _SPECTRUM_WORDS]

    def item(k: Knob, move: str) -> str:
        short = re.split(r" \(|（", move)[0]
        return f"{k.name} {short}"

    thr = [item(k, m) for k, m, _ in moves("throughput", lang) if not k.free_win]
    lat = [item(k, m) for k, m, _ in moves("itl", lang) if not k.free_win]
    free = [item(k, k.move[lang]) for k in free_wins()]
    lefts = [("    " + s) for s in [*thr, free[0]]] + ["  " + words[2], "  " + words[4]]
    col = 3 + max(display_width(s) for s in lefts)
    rights = [*lat, *free[1:], words[3], words[5]]
    end = col + max(display_width(s) for s in rights)

    def line(left: str, right: str, indent: str = "  ") -> str:
        pad = col - display_width(indent + left)
        return (indent + left + " " * pad + right).rstrip()

    dashes = end - display_width(f"  {words[0]}  <>  {words[1]}")
    out = [f"  {words[0]}  <{'-' * dashes}>  {words[1]}", line(words[2], words[3]), ""]
    out.append(line(words[4], words[5]))
    for i in range(max(len(thr), len(lat))):
        out.append(line(thr[i] if i < len(thr) else "", lat[i] if i < len(lat) else "", "    "))
    out += ["", "  " + words[6]]
    out.append(line(free[0], free[1] if len(free) > 1 else "", "    "))
    out += ["", "  " + words[7]]
    return "\n".join(out)


def effect_cell(k: Knob, metric: str, lang: Lang = "en") -> str:
    """One cell of the direction map: symbol, word and the condition when there is one."""
    e = k.effect(metric)
    cond = k.condition(metric, lang)
    return f"{EFFECT_SYMBOL[e]} {EFFECT_WORD[e][lang]}" + _paren(cond, lang)


def _paren(text: str, lang: Lang) -> str:
    if not text:
        return ""
    return f"（{text}）" if lang == "zh" else f" ({text})"


def free_wins() -> list[Knob]:
    """Knobs that help both ends of the curve and trade something other than the curve."""
    return [k for k in KNOB_LIST if k.free_win]


# The order in which to try the knobs for a binding constraint: cheapest, most direct first
# (no restart-heavy or quality-moving knob before a pure scheduler knob).
PRIORITY: dict[str, tuple[str, ...]] = {
    "queue": ("max_num_seqs",),
    "queue_budget": ("max_num_batched_tokens",),
    "prefill": ("max_num_batched_tokens", "enable_prefix_caching"),
    "decode": (
        "max_num_seqs",
        "max_num_batched_tokens",
        "enable_chunked_prefill",
        "quantization",
        "speculative_config",
        "tensor_parallel_size",
    ),
    "kv": ("gpu_memory_utilization", "kv_cache_dtype", "quantization", "tensor_parallel_size"),
}


def in_effect(name: str, move: str, value: Any = None) -> bool:
    """Whether a relieving move is already the knob's state (``value``, else vLLM's default):
    ``enable`` on a knob that is on, ``fp8`` on an fp8 KV cache; never ``raise``/``lower``."""
    v = default(name) if value is None else value
    if move == "enable":
        return v is True
    if move == "fp8":
        return str(v).startswith("fp8")
    return False


def for_constraint(constraint: str) -> list[tuple[Knob, str]]:
    """(knob, which way) pairs that relieve a binding constraint, in the order to try them."""
    order = PRIORITY.get(constraint, ())
    assert all(constraint in KNOBS[n].relieves for n in order), constraint
    assert {k.name for k in KNOB_LIST if constraint in k.relieves} == set(order), constraint
    return [(KNOBS[n], KNOBS[n].relieves[constraint]) for n in order]


def table(
    lang: Lang = "en", gpu_memory_gib: float = 24.0, entry: Entry = "serve", gpu_name: str = ""
) -> list[dict[str, str]]:
    """One row per knob for the book, in ``lang``."""
    zh = lang == "zh"
    cols = (
        ("旋钮", "默认", "组", "动作", "吞吐", "TTFT", "ITL/TPOT", "代价")
        if zh
        else ("knob", "default", "group", "move", "throughput", "TTFT", "ITL/TPOT", "trade")
    )
    rows = []
    for k in KNOB_LIST:
        d = default(k.name, gpu_memory_gib=gpu_memory_gib, entry=entry, gpu_name=gpu_name)
        dtext = NONE_DEFAULT[k.name][lang] if d is None else str(d)
        cells = (
            f"`{k.flag}`",
            dtext,
            GROUPS[k.group][lang],
            k.move[lang],
            *(effect_cell(k, m, lang) for m in ("throughput", "ttft", "itl")),
            k.trade[lang],
        )
        rows.append(dict(zip(cols, cells, strict=True)))
    return rows


def table_markdown(
    lang: Lang = "en", gpu_memory_gib: float = 24.0, entry: Entry = "serve", gpu_name: str = ""
) -> str:
    return markdown_table(table(lang, gpu_memory_gib, entry, gpu_name))


def markdown_table(rows: list[dict[str, str]]) -> str:
    """Rows of equal keys as a Markdown table (the keys are the header)."""
    head = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r[c].replace("|", "\\|") for c in head) + " |" for r in rows]
    return "\n".join(lines)
