"""Lab 03's comparison, pure: one GPU, two replicas (``--data-parallel-size 2``) and one model
split over two GPUs (``--tensor-parallel-size 2``), each a short offered-rate scan on the same
workload and SLO. ``three_way`` re-derives the table and the verdicts from the knee records.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from course_utils.core.keep import as_point, latest_by_rate, pick_knee
from course_utils.core.records import KNEE_FILE, ServedPoint, read_jsonl
from course_utils.core.replicas import carried

__all__ = [
    "CONFIGS",
    "RUN_DIR",
    "RUN_FILE",
    "RateRow",
    "ScaleConfig",
    "ScaleoutRun",
    "ThreeWay",
    "config",
    "config_records",
    "markdown",
    "merge_runs",
    "rate_rows",
    "summary",
    "three_way",
]

RUN_FILE = "scaleout.jsonl"
# the recorded lab 03 run the book, lab 03's replay and the quiz read (from the repo root)
RUN_DIR = "labs/results/h200x2-2026-11-30"


@dataclass(frozen=True)
class ScaleConfig:
    """One way to use the GPUs: how many, which (CUDA_VISIBLE_DEVICES), the serve flags."""

    name: str
    gpus: int
    devices: str
    serve_args: tuple[str, ...]
    label: dict[str, str]


CONFIGS: dict[str, ScaleConfig] = {
    "one": ScaleConfig("one", 1, "0", (), {"en": "1 GPU", "zh": "1 张卡"}),
    "dp2": ScaleConfig(
        "dp2",
        2,
        "0,1",
        ("--data-parallel-size", "2"),
        {"en": "2 replicas (DP=2)", "zh": "2 个副本（DP=2）"},
    ),
    "tp2": ScaleConfig(
        "tp2",
        2,
        "0,1",
        ("--tensor-parallel-size", "2"),
        {"en": "1 model on 2 GPUs (TP=2)", "zh": "1 个模型切到 2 张卡（TP=2）"},
    ),
}


def config_records(folder: str | Path, name: str) -> list[dict[str, Any]]:
    """A config's knee records in a scale-out folder, the last of each rate."""
    return list(latest_by_rate(read_jsonl(Path(folder) / config(name).name / KNEE_FILE)).values())


def config(name: str) -> ScaleConfig:
    if name not in CONFIGS:
        raise ValueError(f"config must be one of {', '.join(CONFIGS)}, not {name!r}")
    return CONFIGS[name]


@dataclass
class ScaleoutRun:
    """One call of lab 03 for one config (``scaleout.jsonl``, last line wins). ``processes``:
    each vLLM process's start-up facts; ``knee``: ``pick_knee`` over the rates on disk."""

    config: str
    gpus: int
    devices: str
    serve_cmd: str
    rates: list[float]
    done_rates: list[str]
    status: str  # "ok": every rate measured; "partial": the budget left some; "failed"
    reason: str | None = None
    startup_s: float | None = None
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    knee: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float | None = None
    time: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ScaleoutRun:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class RateRow:
    """One config at one offered rate: what the client saw and what each engine saw."""

    config: str
    rate: float
    valid: bool
    done: float | None  # completed req/s
    goodput: float | None  # vLLM's per-request goodput, req/s
    p99_ttft_ms: float | None
    p99_tpot_ms: float | None
    meets_slo: bool
    constraint: str | None  # the deciding window's (with DP: the busiest engine's)
    engines: dict[str, dict[str, Any]]  # engine -> {"constraint", "waiting_mean", ...}
    issues: list[str]
    run: str = ""  # "": the config's main run; else the repeat run's name (a fresh server)

    @property
    def goodput_per_gpu(self) -> float | None:
        g = config(self.config).gpus
        return None if self.goodput is None else self.goodput / g


def rate_rows(
    name: str, records: Sequence[ServedPoint | Mapping[str, Any]], run: str = ""
) -> list[RateRow]:
    """The rows of one config's knee records, by rate (scores: the mean of valid windows)."""
    rows = []
    for p in sorted(map(as_point, records), key=lambda p: float(p.rate_key or 0)):
        if p.status != "ok" or p.rate_key in (None, "inf"):
            continue
        sc, dec = p.scores(), p.deciding
        bench = dec.bench if dec else {}
        engines = {
            e: {
                "constraint": ew.diagnosis.get("constraint"),
                "leaf": ew.diagnosis.get("leaf"),
                "waiting_mean": ew.load.get("waiting_mean"),
                "running_max": ew.load.get("running_max"),
                "kv_usage_max": ew.load.get("kv_usage_max"),
            }
            for e, ew in (dec.engines if dec else {}).items()
        }
        rows.append(
            RateRow(
                config=name,
                rate=float(p.rate_key or 0),
                valid=p.valid,
                done=sc.request_throughput if sc else None,
                goodput=sc.request_goodput if sc else None,
                p99_ttft_ms=bench.get("p99_ttft_ms"),
                p99_tpot_ms=bench.get("p99_tpot_ms"),
                meets_slo=p.meets_slo,
                constraint=p.diagnosis.get("constraint"),
                engines=engines,
                issues=p.validity_issues,
                run=run,
            )
        )
    return rows


def merge_runs(
    main: Sequence[ServedPoint | Mapping[str, Any]],
    *repeats: Sequence[ServedPoint | Mapping[str, Any]],
) -> list[ServedPoint]:
    """One config's rates over several runs, each on a fresh server: a rate measured in more
    than one run holds all their windows (renumbered after the main run's, purpose
    "repeat"), so ``pick_knee`` calls a rate whose runs disagree undecided."""
    by_rate: dict[str, ServedPoint] = {}
    for run in (main, *repeats):
        for p in map(as_point, run):
            key = str(p.rate_key)
            if key not in by_rate:
                by_rate[key] = ServedPoint.from_json(p.to_json())
                continue
            into = by_rate[key]
            if into.status != "ok":  # a failed main record gives way to a measured repeat
                by_rate[key] = ServedPoint.from_json(p.to_json())
                continue
            first = 1 + max((w.index for w in into.windows), default=-1)
            for i, w in enumerate(p.windows):
                into.windows.append(replace(w, index=first + i, purpose="repeat"))
    return sorted(by_rate.values(), key=lambda p: float(p.rate_key or 0))


_TABLE_COLS = {
    "en": "config|rate|done|goodput|goodput/GPU|p99 TTFT|p99 TPOT|meets SLO|constraint".split("|"),
    "zh": "配置|速率|完成|goodput|每卡 goodput|p99 TTFT|p99 TPOT|达标|约束".split("|"),
}
_SUMMARY_COLS = {
    "en": "config|GPUs|knee (req/s)|best goodput at the SLO|per GPU|p99 TPOT, lowest rate".split(
        "|"
    ),
    "zh": "配置|GPU|拐点 (req/s)|达标时最高 goodput|每卡|最低速率下 p99 TPOT".split("|"),
}


@dataclass
class ThreeWay:
    """The three configs side by side, and what the data supports."""

    knees: dict[str, dict[str, Any]]  # config -> pick_knee
    rows: list[RateRow]
    predicted_dp2: tuple[float, float | None] | None  # 2 x one's knee range
    verdicts: dict[str, dict[str, str]]  # name -> {"en", "zh", "key"}

    def table(self, lang: str = "en") -> list[dict[str, Any]]:
        zh = lang == "zh"
        cols = _TABLE_COLS["zh" if zh else "en"]
        out = []
        for r in self.rows:
            label = config(r.config).label[lang]
            if r.run:
                label += f"（重复：{r.run}）" if zh else f" (repeat: {r.run})"
            vals = (
                label,
                f"{r.rate:g}",
                _f(r.done),
                _f(r.goodput),
                _f(r.goodput_per_gpu),
                _f(r.p99_ttft_ms, 0),
                _f(r.p99_tpot_ms, 1),
                ("是" if r.meets_slo else "否") if zh else ("yes" if r.meets_slo else "no"),
                (r.constraint or "") if r.valid else ("无效" if zh else "INVALID"),
            )
            out.append(dict(zip(cols, vals, strict=True)))
        return out


def summary(tw: ThreeWay, lang: str = "en") -> list[dict[str, str]]:
    """One row per config: its GPUs, knee range, the best goodput among the rates that met
    the SLO (and per GPU), and p99 TPOT at its lowest valid rate (light load)."""
    cols = _SUMMARY_COLS["zh" if lang == "zh" else "en"]
    out = []
    for name, k in tw.knees.items():
        rows = [r for r in tw.rows if r.config == name and r.valid]
        top = k.get("knee_rate")  # an undecided rate above it does not count as met
        met = [
            r.goodput
            for r in rows
            if r.meets_slo and r.goodput is not None and top is not None and r.rate <= top
        ]
        best = max(met) if met else None
        g = config(name).gpus
        low = min(rows, key=lambda r: r.rate) if rows else None
        vals = (
            config(name).label[lang],
            str(g),
            _rng_text(k.get("knee_rate"), k.get("overloaded_rate"), lang),
            _f(best),
            _f(None if best is None else best / g),
            "n/a" if low is None else f"{_f(low.p99_tpot_ms, 1)} ms @ {low.rate:g}",
        )
        out.append(dict(zip(cols, vals, strict=True)))
    return out


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows of ``summary`` or ``ThreeWay.table`` as a Markdown table."""
    if not rows:
        return ""
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[c]).replace("|", "\\|") for c in head) + " |" for r in rows]
    return "\n".join(lines)


def _f(x: float | None, nd: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def _rng_text(lo: float | None, hi: float | None, lang: str = "en") -> str:
    if lo is None:
        if hi is not None:
            return f"< {hi:g}"
        return "低于最低测试速率" if lang == "zh" else "below the lowest rate tested"
    return f"{lo:g}-{'?' if hi is None else f'{hi:g}'}"


def three_way(
    records: Mapping[str, Sequence[ServedPoint | Mapping[str, Any]]],
    repeats: Mapping[str, Mapping[str, Sequence[ServedPoint | Mapping[str, Any]]]] | None = None,
) -> ThreeWay:
    """Knees, rows and verdicts from each config's knee records (configs may be missing).
    ``repeats``: run name -> config -> records of a repeat run on a fresh server; its windows
    join the main run's in the knee (``merge_runs``) and its rows are listed after them."""
    reps = repeats or {}
    merged = {
        n: merge_runs(recs, *(r[n] for r in reps.values() if n in r))
        for n, recs in records.items()
        if n in CONFIGS
    }
    knees = {n: pick_knee(list(recs)) for n, recs in merged.items()}
    rows = [r for n in CONFIGS if n in records for r in rate_rows(n, records[n])]
    rows += [
        r
        for run, by_cfg in sorted(reps.items())
        for n in CONFIGS
        if n in by_cfg
        for r in rate_rows(n, by_cfg[n], run)
    ]
    pred = None
    one = knees.get("one")
    if one and one["knee_rate"] is not None:
        pred = carried(2, one["knee_rate"], one["overloaded_rate"])
    verdicts: dict[str, dict[str, str]] = {}
    if pred is not None and "dp2" in knees:
        verdicts["dp_vs_prediction"] = _dp_vs_prediction(pred, knees["dp2"])
    if "dp2" in knees and "tp2" in knees:
        verdicts["dp_vs_tp"] = _dp_vs_tp(knees["dp2"], knees["tp2"])
    tpot = _tpot_at_shared_rate(rows)
    if tpot:
        verdicts["tpot"] = tpot
    cleared = _queue_cleared(rows)
    if cleared:
        verdicts["queue_cleared"] = cleared
    return ThreeWay(knees, rows, pred, verdicts)


_DP_VS_PREDICTION = {
    "agrees": (
        "the measured DP=2 knee range overlaps 2x one GPU's: two replicas add up",
        "实测 DP=2 的拐点区间与单卡的 2 倍重叠：两个副本的容量可以相加",
    ),
    "below": (
        "the measured DP=2 knee lies below 2x one GPU's: the replicas do not add up "
        "(a shared bottleneck: the API server, the client, the CPU)",
        "实测 DP=2 的拐点低于单卡的 2 倍：副本没能相加（有共享瓶颈：API 服务器、压测客户端、CPU）",
    ),
    "above": ("the measured DP=2 knee lies above 2x one GPU's", "实测 DP=2 的拐点高于单卡的 2 倍"),
}


def _dp_vs_prediction(pred: tuple[float, float | None], dp: Mapping[str, Any]) -> dict[str, str]:
    lo, hi = dp.get("knee_rate"), dp.get("overloaded_rate")
    p_lo, p_hi = pred
    if lo is None:
        key = "below"
    elif p_hi is not None and lo >= p_hi:
        key = "above"
    elif hi is not None and hi <= p_lo:
        key = "below"
    else:
        key = "agrees"
    en, zh = _DP_VS_PREDICTION[key]
    pr, ms, ms_zh = _rng_text(p_lo, p_hi), _rng_text(lo, hi), _rng_text(lo, hi, "zh")
    return {
        "key": key,
        "en": f"predicted {pr} req/s, measured {ms} req/s: {en}",
        "zh": f"预测 {pr} req/s，实测 {ms_zh} req/s：{zh}",
    }


def _missed(k: Mapping[str, Any]) -> float | None:
    """The lowest rate a config was measured to miss the SLO at (its knee's upper bound; its
    lowest valid rate when no rate met the SLO)."""
    if k.get("overloaded_rate") is not None:
        return float(k["overloaded_rate"])
    if k.get("knee_rate") is None and k.get("windows"):
        return min(float(r) for r in k["windows"])
    return None


def _dp_vs_tp(dp: Mapping[str, Any], tp: Mapping[str, Any]) -> dict[str, str]:
    """DP wins when it met the SLO at a rate TP was measured to miss it at, and the other way
    round; otherwise the ranges overlap and it is a tie."""
    d_lo, t_lo = dp.get("knee_rate"), tp.get("knee_rate")
    d_miss, t_miss = _missed(dp), _missed(tp)
    if d_lo is not None and t_miss is not None and d_lo >= t_miss:
        key, en, zh = (
            "dp",
            "DP=2 carries more req/s at the SLO than TP=2",
            "DP=2 在 SLO 下撑住的到达率高于 TP=2",
        )
    elif t_lo is not None and d_miss is not None and t_lo >= d_miss:
        key, en, zh = (
            "tp",
            "TP=2 carries more req/s at the SLO than DP=2",
            "TP=2 在 SLO 下撑住的到达率高于 DP=2",
        )
    else:
        key = "tie"
        en = "a tie: the knee ranges overlap, this scan cannot rank DP=2 and TP=2"
        zh = "平局：两个拐点区间重叠，这次扫描分不出 DP=2 与 TP=2 的高下"

    def rng(lang: str) -> str:
        return (
            f"DP=2 {_rng_text(d_lo, dp.get('overloaded_rate'), lang)}"
            + ("，" if lang == "zh" else ", ")
            + f"TP=2 {_rng_text(t_lo, tp.get('overloaded_rate'), lang)} req/s"
        )

    return {"key": key, "en": f"{rng('en')}: {en}", "zh": f"{rng('zh')}：{zh}"}


def _tpot_at_shared_rate(rows: Sequence[RateRow]) -> dict[str, str] | None:
    """p99 TPOT of TP=2 and DP=2 at every rate both measured validly; the key is the winner
    at the lowest one (light load: the time per token of one step decides, which TP
    shortens; at high load DP's smaller batch per engine can win instead)."""
    by = {
        (r.config, r.rate): r
        for r in rows
        if r.valid and r.p99_tpot_ms is not None and not r.run  # main runs only
    }
    shared = sorted({r for c, r in by if c == "dp2"} & {r for c, r in by if c == "tp2"})
    if not shared:
        return None
    pairs = [
        (rate, by[("tp2", rate)].p99_tpot_ms, by[("dp2", rate)].p99_tpot_ms) for rate in shared
    ]
    _, t0, d0 = pairs[0]
    assert t0 is not None and d0 is not None
    key = "tp" if t0 < d0 else "dp" if d0 < t0 else "tie"
    en = "; ".join(f"{r:g} req/s: TP=2 {t:.1f} ms, DP=2 {d:.1f} ms" for r, t, d in pairs)
    zh = "；".join(f"{r:g} req/s：TP=2 {t:.1f} ms，DP=2 {d:.1f} ms" for r, t, d in pairs)
    who_en = {"tp": "TP=2", "dp": "DP=2", "tie": "neither"}[key]
    who_zh = {"tp": "TP=2 更低", "dp": "DP=2 更低", "tie": "两者相同"}[key]
    return {
        "key": key,
        "rate": f"{pairs[0][0]:g}",
        "en": f"p99 TPOT at the shared rates ({en}); at the lowest, lower with {who_en}",
        "zh": f"共同速率下的 p99 TPOT（{zh}）；在最低的共同速率下，{who_zh}",
    }


def _queue_cleared(rows: Sequence[RateRow]) -> dict[str, str] | None:
    """A rate where one GPU queued (add replicas) and every DP=2 engine did not, at the same
    or a higher rate: the queue diagnosis cleared per engine."""
    queued = [r for r in rows if r.config == "one" and r.valid and r.constraint == "queue"]
    dp = [r for r in rows if r.config == "dp2" and r.valid and r.engines]
    for q in queued:
        for d in sorted(dp, key=lambda r: r.rate, reverse=True):
            if d.rate >= q.rate and all(e["constraint"] != "queue" for e in d.engines.values()):
                waits = ", ".join(
                    f"{e}: {_f(v['waiting_mean'])}" for e, v in sorted(d.engines.items())
                )
                return {
                    "key": "cleared",
                    "en": f"one GPU at {q.rate:g} req/s: queue; DP=2 at {d.rate:g} req/s: no "
                    f"engine queues (mean waiting per engine {waits})",
                    "zh": f"单卡 {q.rate:g} req/s：排队；DP=2 在 {d.rate:g} req/s：没有一个引擎"
                    f"排队（各引擎平均排队数 {waits}）",
                }
    return None
