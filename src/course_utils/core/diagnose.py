"""The decision tree of the SLO lesson, as data: from ``/metrics`` samples taken under load,
the bench result and the SLO, which constraint binds and which knobs (from ``knobs``) move it.
A deep queue has four causes: a full KV pool, the ``max_num_seqs`` cap, a spent step token
budget (v1/core/sched/scheduler.py admits waiting requests while ``token_budget > 0``), or no
engine limit (the rate is past one replica). The book's Mermaid diagram is drawn from ``TREE``.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from course_utils.core import knobs as knobs_mod
from course_utils.core.metrics import (
    ITERATION_TOKENS,
    LoadSummary,
    Snapshot,
    engine_series,
    summarize,
)
from course_utils.core.slo import SLO, BenchResult

Constraint = Literal["queue", "prefill", "decode", "kv", "none"]


@dataclass(frozen=True)
class Thresholds:
    """Named, overridable cut-offs of the tree (all read from samples taken under load)."""

    waiting_mean_min: float = 1.0
    kv_full: float = 0.90
    cap_fraction: float = 0.95
    preemptions_min: float = 1.0
    budget_fraction: float = 0.90

    @staticmethod
    def describe(lang: str = "en") -> list[dict[str, str]]:
        """Each cut-off: name, default and meaning (the samples are taken under load)."""
        docs = {
            "waiting_mean_min": (
                "平均排队请求数达到它即算队列深",
                "mean queue length that counts as deep",
            ),
            "kv_full": ("KV 使用率峰值达到它即算 KV 满", "peak KV usage that counts as full"),
            "cap_fraction": (
                "运行数峰值达到 max_num_seqs 的该比例即算被上限卡住",
                "peak running / max_num_seqs that counts as capped",
            ),
            "preemptions_min": (
                "负载期间抢占次数达到它即算 KV 压力",
                "preemptions that count as KV pressure",
            ),
            "budget_fraction": (
                "每步平均 token 数达到 max_num_batched_tokens 的该比例即算预算用尽",
                "mean tokens per step / max_num_batched_tokens that counts as spent",
            ),
        }
        return [
            {
                "name": f.name,
                "default": str(f.default),
                "meaning": docs[f.name][0 if lang == "zh" else 1],
            }
            for f in fields(Thresholds)
        ]


@dataclass
class Facts:
    """What the tree looks at, gathered from samples, bench result and SLO."""

    summary: LoadSummary
    slo: SLO
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    tokens_per_step: float | None  # mean of vllm:iteration_tokens_total during the load
    p99_ttft_ms: float | None
    p99_tpot_ms: float | None
    p99_itl_ms: float | None

    def ttft_over(self) -> bool:
        return _over(self.p99_ttft_ms, self.slo.ttft_ms)

    def tpot_over(self) -> bool:
        return _over(self.p99_tpot_ms, self.slo.tpot_ms) or _over(self.p99_itl_ms, self.slo.itl_ms)

    def kv_full(self, th: Thresholds) -> bool:
        return (
            self.summary.kv_usage_max >= th.kv_full
            or self.summary.preemptions >= th.preemptions_min
        )

    def capped(self, th: Thresholds) -> bool:
        return (
            self.max_num_seqs is not None
            and self.summary.running_max >= th.cap_fraction * self.max_num_seqs
        )

    def budget_spent(self, th: Thresholds) -> bool:
        return (
            self.max_num_batched_tokens is not None
            and self.tokens_per_step is not None
            and self.tokens_per_step >= th.budget_fraction * self.max_num_batched_tokens
        )


def _over(p99: float | None, target: float | None) -> bool:
    return p99 is not None and target is not None and p99 > target


@dataclass(frozen=True)
class Question:
    id: str
    text: dict[str, str]
    test: Callable[[Facts, Thresholds], bool]
    yes: str
    no: str


@dataclass(frozen=True)
class Leaf:
    id: str
    constraint: Constraint
    text: dict[str, str]
    knob_constraint: str | None  # knobs.for_constraint(...) key; None = no engine knob
    advice: dict[str, str] = field(default_factory=dict)


_NODES: list[Question | Leaf] = [
    Question(
        "waiting",
        {"en": "requests waiting during the load?", "zh": "负载期间有请求在排队？"},
        lambda f, th: f.summary.waiting_mean >= th.waiting_mean_min,
        yes="queue_kv",
        no="ttft",
    ),
    Question(
        "queue_kv",
        {"en": "KV cache full or preempting?", "zh": "KV cache 满或发生抢占？"},
        lambda f, th: f.kv_full(th),
        yes="kv",
        no="capped",
    ),
    Question(
        "capped",
        {"en": "running pinned at max_num_seqs?", "zh": "运行数顶在 max_num_seqs？"},
        lambda f, th: f.capped(th),
        yes="queue_cap",
        no="budget",
    ),
    Question(
        "budget",
        {
            "en": "steps using the whole max_num_batched_tokens?",
            "zh": "每步用满 max_num_batched_tokens？",
        },
        lambda f, th: f.budget_spent(th),
        yes="queue_budget",
        no="queue_replicas",
    ),
    Question(
        "ttft",
        {"en": "p99 TTFT over the SLO?", "zh": "p99 TTFT 超 SLO？"},
        lambda f, th: f.ttft_over(),
        yes="prefill",
        no="tpot",
    ),
    Question(
        "tpot",
        {"en": "p99 TPOT or ITL over the SLO?", "zh": "p99 TPOT 或 ITL 超 SLO？"},
        lambda f, th: f.tpot_over(),
        yes="decode",
        no="kv_idle",
    ),
    Question(
        "kv_idle",
        {"en": "KV cache near full?", "zh": "KV cache 接近满？"},
        lambda f, th: f.kv_full(th),
        yes="kv",
        no="none",
    ),
    Leaf(
        "queue_cap",
        "queue",
        {"en": "queue: the batch-width cap binds", "zh": "队列：批宽上限在卡"},
        "queue",
        {
            "en": "raise max_num_seqs (and max_num_batched_tokens with it)",
            "zh": "调高 max_num_seqs（必要时同时调高 max_num_batched_tokens）",
        },
    ),
    Leaf(
        "queue_budget",
        "queue",
        {"en": "queue: the step's token budget binds", "zh": "队列：每步 token 预算在卡"},
        "queue_budget",
        {"en": "raise max_num_batched_tokens", "zh": "调高 max_num_batched_tokens"},
    ),
    Leaf(
        "queue_replicas",
        "queue",
        {
            "en": "queue with no engine limit binding: at or past the knee",
            "zh": "有排队但没有引擎上限在卡：已到拐点",
        },
        None,
        {
            "en": "a queue that stays means the rate is at or past what one replica completes: "
            "add replicas or route load away, or lower the offered rate to the knee",
            "zh": "队列一直在，说明速率已到或超过一个副本能完成的量：加副本或分流，"
            "或把压测速率降到拐点",
        },
    ),
    Leaf("prefill", "prefill", {"en": "prefill binds", "zh": "prefill 在卡"}, "prefill"),
    Leaf("decode", "decode", {"en": "decode binds", "zh": "decode 在卡"}, "decode"),
    Leaf("kv", "kv", {"en": "KV capacity binds", "zh": "KV 容量在卡"}, "kv"),
    Leaf(
        "none",
        "none",
        {
            "en": "nothing binds inside the SLO: stop tuning here",
            "zh": "SLO 内没有约束在卡：调参到此为止",
        },
        None,
        {
            "en": "stop, or raise the offered rate to find the knee",
            "zh": "停下，或提高压测速率去找拐点",
        },
    ),
]
TREE: dict[str, Question | Leaf] = {n.id: n for n in _NODES}
ROOT = "waiting"
# The evidence each question reads, for ``Diagnosis.rows``.
EVIDENCE_KEYS: dict[str, tuple[str, ...]] = {
    "waiting": ("waiting_mean", "waiting_max"),
    "queue_kv": ("kv_usage_max", "preemptions"),
    "capped": ("running_max", "max_num_seqs"),
    "budget": ("tokens_per_step", "max_num_batched_tokens"),
    "ttft": ("p99_ttft_ms",),
    "tpot": ("p99_tpot_ms",),
    "kv_idle": ("kv_usage_max", "preemptions"),
}


@dataclass
class Diagnosis:
    constraint: Constraint
    leaf: str
    evidence: dict[str, float | None]
    knobs: list[str]
    moves: dict[str, str]
    path: list[tuple[str, bool]]

    def why(self, lang: str = "en") -> str:
        leaf = TREE[self.leaf]
        assert isinstance(leaf, Leaf)
        steps = [f"{TREE[q].text[lang]} {_yes_no(ans, lang)}" for q, ans in self.path]
        ev = ", ".join(f"{k}={_fmt(v)}" for k, v in self.evidence.items() if v is not None)
        if self.knobs:
            todo = ", ".join(
                f"{k} ({knobs_mod.RELIEF_WORD[self.moves[k]][lang]})" for k in self.knobs
            )
        else:
            todo = leaf.advice.get(lang, "")
        sep = "；" if lang == "zh" else "; "
        if caveat := budget_caveat(self, lang):
            todo += sep + caveat
        head = f"{leaf.text[lang]}{sep}" + " → ".join(steps)
        label = ("证据", "试试") if lang == "zh" else ("evidence", "try")
        return f"{head}{sep}{label[0]}: {ev}{sep}{label[1]}: {todo}"

    def rows(self, lang: str = "en") -> list[dict[str, str]]:
        """The evidence as table rows: each question asked, its answer and the numbers behind it."""
        cols = ("问题", "回答", "依据") if lang == "zh" else ("question", "answer", "evidence")
        out = []
        for qid, ans in self.path:
            nums = ", ".join(f"{k}={_fmt(self.evidence.get(k))}" for k in EVIDENCE_KEYS[qid])
            out.append(
                dict(zip(cols, (TREE[qid].text[lang], _yes_no(ans, lang), nums), strict=True))
            )
        return out

    def rows_markdown(self, lang: str = "en") -> str:
        return knobs_mod.markdown_table(self.rows(lang))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": [[q, a] for q, a in self.path]}


# A step that carries less than this share of max_num_batched_tokens leaves the budget unused.
BUDGET_IN_USE = 0.5


def budget_caveat(d: Diagnosis, lang: str = "en") -> str:
    """A warning when a diagnosis (not the budget leaf) says raise max_num_batched_tokens but
    the steps carried well under the budget; else ""."""
    tps = d.evidence.get("tokens_per_step")
    budget = d.evidence.get("max_num_batched_tokens")
    knob = "max_num_batched_tokens"
    raises = knob in d.knobs and d.moves.get(knob) == "raise" and d.leaf != "queue_budget"
    if not raises or not tps or not budget or tps >= BUDGET_IN_USE * budget:
        return ""
    if lang == "zh":
        return (
            f"但每步平均只有 {_fmt(tps)} 个 token，预算是 {_fmt(budget)}：预算没用满，"
            "调大它多半没用"
        )
    return (
        f"but a step carried {_fmt(tps)} tokens on average against a budget of "
        f"{_fmt(budget)}: the budget is not in use, so a larger one has little to add"
    )


def _yes_no(ans: bool, lang: str) -> str:
    return ("是" if ans else "否") if lang == "zh" else ("yes" if ans else "no")


def _fmt(v: float | None) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        if v.is_integer():
            return str(int(v))
        return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return str(v)


def tokens_per_step(samples: Sequence[Snapshot]) -> float | None:
    """Mean tokens per engine step between the first and last sample (None if not exposed)."""
    last = samples[-1].histogram(ITERATION_TOKENS) if samples else None
    if last is None:
        return None
    return last.minus(samples[0].histogram(ITERATION_TOKENS)).mean


def gather(
    samples: Sequence[Snapshot],
    bench: BenchResult | None,
    slo: SLO,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> Facts:
    summary = summarize(samples)

    def p99(metric: str, fallback_s: float | None = None) -> float | None:
        if bench is not None:
            v = bench.percentile(metric, slo.percentile)
            if v is not None:
                return v
        return None if fallback_s is None else fallback_s * 1000

    return Facts(
        summary=summary,
        slo=slo,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        tokens_per_step=tokens_per_step(samples),
        p99_ttft_ms=p99("ttft", summary.ttft_p99_s),
        p99_tpot_ms=p99("tpot"),
        p99_itl_ms=p99("itl"),
    )


def diagnose(
    samples: Sequence[Snapshot],
    bench: BenchResult | None,
    slo: SLO,
    thresholds: Thresholds | None = None,
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> Diagnosis:
    """Walk the tree on samples taken under load. ``max_num_seqs`` and
    ``max_num_batched_tokens``: the server's settings; without a budget that question says no."""
    th = thresholds or Thresholds()
    settings = {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens}
    for name, v in settings.items():
        if v is not None and v < 1:  # vLLM refuses both below 1
            raise ValueError(f"{name} must be >= 1, got {v!r}")
    f = gather(samples, bench, slo, max_num_seqs, max_num_batched_tokens)
    node = TREE[ROOT]
    path: list[tuple[str, bool]] = []
    while isinstance(node, Question):
        ans = bool(node.test(f, th))
        path.append((node.id, ans))
        node = TREE[node.yes if ans else node.no]
    s = f.summary
    evidence: dict[str, float | None] = {
        "samples_under_load": float(s.n_under_load),
        "waiting_mean": round(s.waiting_mean, 3),
        "waiting_max": s.waiting_max,
        "running_max": s.running_max,
        "max_num_seqs": None if max_num_seqs is None else float(max_num_seqs),
        "tokens_per_step": None if f.tokens_per_step is None else round(f.tokens_per_step, 1),
        "max_num_batched_tokens": (
            None if max_num_batched_tokens is None else float(max_num_batched_tokens)
        ),
        "kv_usage_max": round(s.kv_usage_max, 4),
        "preemptions": s.preemptions,
        "queue_time_mean_ms": _ms(s.queue_time_mean_s),
        "prefill_time_mean_ms": _ms(s.prefill_time_mean_s),
        "decode_time_mean_ms": _ms(s.decode_time_mean_s),
        "p99_ttft_ms": f.p99_ttft_ms,
        "p99_tpot_ms": f.p99_tpot_ms,
    }
    pairs = knobs_mod.for_constraint(node.knob_constraint) if node.knob_constraint else []
    return Diagnosis(
        constraint=node.constraint,
        leaf=node.id,
        evidence=evidence,
        knobs=[k.name for k, _ in pairs],
        moves={k.name: m for k, m in pairs},
        path=path,
    )


def diagnose_engines(
    samples: Sequence[Snapshot],
    bench: BenchResult | None,
    slo: SLO,
    thresholds: Thresholds | None = None,
    **settings: int | None,
) -> dict[str, Diagnosis]:
    """``diagnose`` on each engine's own series (data parallelism: one scheduler, queue and
    KV pool per engine); {} for one engine. Latency percentiles are the client's, shared."""
    series = engine_series(samples).items()
    return {e: diagnose(s, bench, slo, thresholds, **settings) for e, s in series if s}


def busiest_engine(diags: dict[str, Diagnosis]) -> str | None:
    """The engine with the deepest mean queue (the first on a tie), whose diagnosis stands
    for the whole server: a queue on one engine is a queue of the server."""
    if not diags:
        return None
    return max(
        diags, key=lambda e: (diags[e].evidence.get("waiting_mean") or 0.0, -list(diags).index(e))
    )


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


def mermaid(lang: str = "en", with_knobs: bool = True) -> str:
    """Mermaid flowchart source of ``TREE``, labels in ``lang`` (knob flags stay as written)."""
    lines = ["flowchart TB"]
    yes, no = _yes_no(True, lang), _yes_no(False, lang)
    for node in TREE.values():
        label = node.text[lang]
        if isinstance(node, Question):
            lines.append(f'    {node.id}{{"{_esc(label)}"}}')
        else:
            extra = ""
            if with_knobs:
                if node.knob_constraint:
                    extra = "<br/>" + " · ".join(
                        f"{k.flag} {knobs_mod.RELIEF_WORD[m][lang]}"
                        for k, m in knobs_mod.for_constraint(node.knob_constraint)
                    )
                elif node.advice:
                    extra = "<br/>" + _esc(node.advice[lang])
            lines.append(f'    {node.id}["{_esc(label)}{extra}"]')
    for node in TREE.values():
        if isinstance(node, Question):
            lines.append(f'    {node.id} -->|"{yes}"| {node.yes}')
            lines.append(f'    {node.id} -->|"{no}"| {node.no}')
    return "\n".join(lines)


def _esc(s: str) -> str:
    return s.replace('"', "#quot;")


def mermaid_html(lang: str = "en", with_knobs: bool = True) -> Any:
    """The tree as ``<pre class="mermaid">`` for a notebook cell (rendered by local Mermaid)."""
    src = f'<pre class="mermaid">\n{html.escape(mermaid(lang, with_knobs), quote=False)}\n</pre>'
    try:
        from IPython.display import HTML
    except ImportError:  # pragma: no cover - outside Jupyter
        return src
    return HTML(src)
