"""The rules the course teaches for deciding from measurements, written once.

- the objective: vLLM's per-request goodput (default) or the p99 gate;
- keep or revert a value: only on valid windows, and only when the gain is larger than
  the plateau and the measured run-to-run spread; a gain inside the spread is a tie;
- the knee of an offered-rate scan, as the range its valid data supports;
- lab 01's verdict for an offline sweep (the triple, the KV check, the same-batch spread).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.capacity import BLOCK_SIZE, get_gpu
from course_utils.core.records import ServedPoint
from course_utils.core.vllm_logs import EngineStatsLine, engine_stats

__all__ = [
    "OBJECTIVES",
    "KeepDecision",
    "as_point",
    "best_point",
    "check_objective",
    "choose",
    "decide",
    "early_stop_reason",
    "objective_label",
    "order_candidates",
    "judge",
    "kv_check",
    "kv_demand",
    "kv_timeline",
    "next_knob",
    "objective_value",
    "pick_knee",
    "same_batch_gap",
    "speed_pass_seqs",
    "verdict",
]

OBJECTIVES = ("request_goodput", "gate")


Point = ServedPoint | Mapping[str, Any]


def as_point(rec: Point) -> ServedPoint:
    """A served point from a record (``to_json()``, or a record of an older run)."""
    return rec if isinstance(rec, ServedPoint) else ServedPoint.from_json(rec)


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, not {objective!r}")
    return objective


def objective_value(rec: Point | None, objective: str = "request_goodput") -> float:
    """A point's score under ``objective``: the mean over its valid windows (0 for a failed
    point; an invalid one scores its last window, which no rule here uses to decide)."""
    if rec is None:
        return 0.0
    p = as_point(rec)
    check_objective(objective)
    if p.status != "ok":
        return 0.0
    if p.valid_windows:
        return p.objective(objective)
    sc = p.scores()
    return sc.objective(objective) if sc else 0.0


def objective_label(objective: str) -> str:
    return "gate goodput" if objective == "gate" else "request goodput"


def early_stop_reason(records: Iterable[Point], patience: int, min_gain: float,
                      objective: str = "request_goodput") -> str | None:
    """Stop a sweep: ``patience`` points without an objective gain > ``min_gain``; with the
    gate objective also when a point breaks the SLO after an earlier one met it."""
    best = 0.0
    since = 0
    seen_meet = False
    for rec in records:
        p = as_point(rec)
        if p.valid:
            g = p.objective(objective)
            if objective == "gate":
                if p.meets_slo:
                    seen_meet = True
                elif seen_meet:
                    sc = p.scores()
                    why = "; ".join(sc.violations) if sc else ""
                    return f"SLO broke at {p.knob}={p.value} ({why})"
            if g > 0 and g > best * (1.0 + min_gain):
                best, since = g, 0
                continue
        if best > 0:
            since += 1
            if since >= patience:
                return (f"{objective_label(objective)} stopped improving for {since} point(s) "
                        f"(best {best:.2f})")
    return None


def best_point(records: Iterable[Point], *, objective: str = "request_goodput",
               plateau: float = 0.0) -> ServedPoint | None:
    """The valid point with the highest ``objective`` (> 0; "gate": it meets the SLO).

    With ``plateau`` > 0, the first point in sweep order (the smallest move from the current
    value) that the best does not beat by more than ``plateau``: a further move must earn
    its keep like a kept value does. Invalid points never count.
    """
    check_objective(objective)
    ok = [p for p in map(as_point, records)
          if p.valid and (objective != "gate" or p.meets_slo) and p.objective(objective) > 0]
    if not ok:
        return None
    top = max(p.objective(objective) for p in ok)
    return next(p for p in ok if top <= p.objective(objective) * (1.0 + plateau))


@dataclass
class KeepDecision:
    """What the keep rule decided for one sweep: ``decision`` is "keep", "tie" (a gain, but
    inside the run-to-run spread), "revert" (no gain beyond the plateau) or "undecided" (no
    valid point: nothing is kept or rejected)."""

    decision: str
    best: ServedPoint | None
    gain: float | None
    margin: float
    spread: float | None
    why: str

    @property
    def kept(self) -> bool:
        return self.decision == "keep"


def decide(records: Sequence[Point], current: float, *, objective: str = "request_goodput",
           plateau: float = 0.02, current_spread: float | None = None) -> KeepDecision:
    """The keep rule of ``tune`` (and of replay): keep the best valid value only if it raises
    the objective by more than the plateau AND by more than the run-to-run spread measured
    on the current point and on the best (their repeated windows). A gain over a current
    score of 0 is infinite."""
    best = best_point(records, objective=objective, plateau=plateau)
    points = [as_point(r) for r in records]
    if best is None:
        bad = [p for p in points if p.status == "ok" and not p.valid]
        why = ("no valid point: " + "; ".join(p.validity_issues[0] for p in bad
                                              if p.validity_issues)
               if bad else "no point scored above 0")
        return KeepDecision("undecided" if bad else "revert", None, None, plateau, None, why)
    g = best.objective(objective)
    gain = math.inf if current <= 0 else (g - current) / current
    spreads = [s for s in (current_spread, best.spread(objective)) if s is not None]
    spread = max(spreads) if spreads else None
    margin = max([plateau, *spreads])
    label = f"{best.knob}={best.value}"
    if g > current and gain > margin:
        return KeepDecision("keep", best, gain, margin, spread,
                            f"{label}: {_pct(gain)} > margin {margin:.1%}")
    if g > current and gain > plateau:
        return KeepDecision("tie", best, gain, margin, spread,
                            f"{label}: {_pct(gain)} is inside the run-to-run spread "
                            f"{spread or 0:.1%}: a tie, the current value stays")
    return KeepDecision("revert", best, gain, margin, spread,
                        f"{label}: {_pct(gain)} <= plateau {plateau:.0%}")


def _pct(gain: float) -> str:
    return "+inf" if math.isinf(gain) else f"{gain:+.1%}"


def choose(records: Sequence[Point], current: float, *, objective: str = "request_goodput",
           plateau: float = 0.02, current_spread: float | None = None,
           ) -> tuple[ServedPoint | None, float | None, bool]:
    """``decide`` as (best point, relative gain, kept)."""
    d = decide(records, current, objective=objective, plateau=plateau,
               current_spread=current_spread)
    return d.best, d.gain, d.kept


def order_candidates(candidates: Sequence[Any], current: Any, move: str | None) -> list[Any]:
    """The values to try from ``current``: those in the direction of ``move``, nearest first."""
    vals = [v for v in candidates if v != current]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals)
    if numeric and current is not None and isinstance(current, int | float):
        if move == "raise":
            return sorted(v for v in vals if v > current)
        if move == "lower":
            return sorted((v for v in vals if v < current), reverse=True)
    return vals


def next_knob(diag: Mapping[str, Any] | None,
              candidates: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The knob the diagnosis names next, with its move: {"knob", "move", "has_candidates"}
    (the first named knob; None when it names none)."""
    if not diag or not diag.get("knobs"):
        return None
    k = diag["knobs"][0]
    return {"knob": k, "move": (diag.get("moves") or {}).get(k),
            "has_candidates": None if candidates is None else k in candidates}


def _label_of(p: ServedPoint) -> str:
    return "baseline" if p.knob in (None, "baseline") else f"{p.knob}={p.value}"


@dataclass
class _Rate:
    rate: float
    met: bool | None  # True: met the SLO (and kept up) in every valid window; None: mixed
    windows: int


def _rate_verdict(p: ServedPoint, keep_up: float) -> _Rate:
    rate = float(p.rate_key or p.value)
    outcomes = []
    for w in p.valid_windows:
        assert w.score is not None
        keeps = w.score.request_throughput >= keep_up * rate
        queued = w.diagnosis.get("constraint") == "queue"
        outcomes.append(w.score.meets_slo and (keeps or not queued))
    met = True if all(outcomes) else False if not any(outcomes) else None
    return _Rate(rate, met, len(outcomes))


def pick_knee(records: Sequence[Point], keep_up: float = 0.8,
              points: Sequence[Point] = ()) -> dict[str, Any]:
    """The knee as the range the valid data supports.

    A rate met the SLO if it met it (while completing at least ``keep_up`` of the offered
    rate, or without a queue diagnosis) in every valid window measured at it; it missed if
    it missed in every one; repeated windows that disagree make it undecided. The knee lies
    between the highest rate that met (``knee_rate``) and the lowest rate above it that
    missed (``overloaded_rate``); undecided rates lie inside that range. Invalid rates are
    ignored and listed. ``points`` (the loop's points, each at its workload's rate on a
    fresh server) can supply the upper bound: a rate above the knee at which every valid
    loop point broke the SLO.
    """
    fin = [as_point(r) for r in records]
    fin = [p for p in fin if p.status == "ok" and str(p.rate_key) != "inf"]
    invalid = [{"rate": float(p.rate_key or 0),
                "issues": [i for w in p.windows for i in w.validity_issues]}
               for p in fin if not p.valid]
    verdicts = sorted((_rate_verdict(p, keep_up) for p in fin if p.valid), key=lambda v: v.rate)
    met = [v.rate for v in verdicts if v.met is True]
    knee = max(met) if met else None
    over = next((v.rate for v in verdicts if v.met is False and knee is not None
                 and v.rate > knee), None)
    undecided = [v.rate for v in verdicts if v.met is None]
    over_by = "knee scan" if over is not None else None
    evidence = ""
    for rate, ps in _loop_points_by_rate(points).items():
        if knee is not None and rate > knee and (over is None or rate < over) and not any(
                p.meets_slo for p in ps):
            over, over_by = rate, "loop points"
            evidence = (f"; {rate:g} req/s: all {len(ps)} valid loop point(s) "
                        f"({', '.join(_label_of(p) for p in ps)}; fresh servers) broke the SLO")
            break
    why = _knee_why(knee, over, over_by, evidence, undecided, verdicts)
    if invalid:
        first = next((i["issues"][0] for i in invalid if i["issues"]), "invalid")
        names = ", ".join(f"{i['rate']:g}" for i in invalid)
        why += f"; ignored invalid rate(s) {names} ({first})"
    return {"knee_rate": knee, "overloaded_rate": over, "overloaded_by": over_by,
            "undecided": undecided, "invalid": invalid, "why": why,
            "windows": {f"{v.rate:g}": v.windows for v in verdicts}}


def _loop_points_by_rate(points: Sequence[Point]) -> dict[float, list[ServedPoint]]:
    by_rate: dict[float, list[ServedPoint]] = {}
    for p in map(as_point, points):
        rr = p.workload.get("request_rate")
        if p.valid and rr not in (None, "inf"):
            by_rate.setdefault(float(rr), []).append(p)
    return dict(sorted(by_rate.items()))


def _knee_why(knee: float | None, over: float | None, over_by: str | None, evidence: str,
              undecided: list[float], verdicts: Sequence[_Rate]) -> str:
    if knee is None:
        return "no valid tested rate met the SLO: lower the rates (or the SLO is out of reach)"
    if over is None:
        return f"every valid tested rate up to {knee:g} req/s met the SLO: the knee is higher"
    inside = [u for u in undecided if knee < u < over]
    mixed = (f"; {', '.join(f'{u:g}' for u in inside)} req/s met the SLO in some repeated "
             "windows and missed it in others" if inside else "")
    reps = ", ".join(f"{v.rate:g}: {v.windows}" for v in verdicts if v.windows > 1)
    repeated = f" (valid windows per rate {reps})" if reps else ""
    return (f"knee between {knee:g} req/s (the highest valid rate that met the SLO) and "
            f"{over:g} req/s ({over_by}){evidence}{mixed}{repeated}")


def kv_timeline(stats: Sequence[EngineStatsLine], full: float = 0.99) -> dict[str, Any]:
    """When the KV cache filled (first stats line at >= `full` usage; None: never), the mean
    generation tokens/s of the lines before that (the same batch at any KV size) and the
    most requests waiting (in an offline pass that submits everything at once, waiting
    requests after the start are preempted ones: scheduler.py _preempt_request)."""
    full_at = next((s.t_s for s in stats if s.kv_usage >= full), None)
    before = [s.gen_tok_s for s in stats
              if (full_at is None or s.t_s < full_at) and s.prompt_tok_s == 0.0]
    return {"lines": len(stats), "kv_full_at_s": full_at,
            "gen_tok_s_before_full": sum(before) / len(before) if before else None,
            "waiting_max": max((s.waiting for s in stats), default=None),
            "running_max": max((s.running for s in stats), default=None)}


def point_log(results_dir: str | Path, record: Mapping[str, Any]) -> Path | None:
    """A point's vLLM log: points/<key>/llm.log under `results_dir` (a run fetched from a GPU
    host lives elsewhere than the path it recorded), else the recorded path."""
    for cand in (Path(results_dir) / "points" / str(record.get("key")) / "llm.log",
                 Path(str(record.get("log") or ""))):
        if cand.name == "llm.log" and cand.is_file():
            return cand
    return None


def _same_batch_lines(stats: Sequence[EngineStatsLine], full: float = 0.99) -> dict[float, float]:
    """t_s -> generation tokens/s of the lines before the KV cache filled with no prompt
    work in the interval (the same batch, whatever the KV size)."""
    full_at = next((s.t_s for s in stats if s.kv_usage >= full), None)
    return {s.t_s: s.gen_tok_s for s in stats
            if (full_at is None or s.t_s < full_at) and s.prompt_tok_s == 0.0}


def same_batch_gap(results_dir: str | Path, records: Sequence[Mapping[str, Any]], *,
                   baseline: Any) -> dict[str, Any] | None:
    """Each ok point's engine stats and KV timeline, and its generation tokens/s before
    either KV cache filled relative to the baseline's, both averaged over the SAME seconds
    of the pass (the stats lines both points logged before either cache filled). Before
    the cache fills, every point runs the same batch at the same context lengths, so a
    capacity knob cannot make a difference there: a gap is this machine's run-to-run spread
    (or order). None without the baseline's stats or a shared second."""
    lines, stats = {}, {}
    for r in records:
        log = point_log(results_dir, r) if r.get("status") == "ok" else None
        if log is not None:
            stats[r["value"]] = engine_stats(log.read_text(errors="replace"))
            lines[r["value"]] = kv_timeline(stats[r["value"]])
    if baseline not in stats:
        return None
    base = _same_batch_lines(stats[baseline])
    gaps, windows, shared_means = {}, {}, {}
    for v, st in stats.items():
        if v == baseline:
            continue
        mine = _same_batch_lines(st)
        shared = sorted(set(base) & set(mine))
        if not shared:
            continue
        b = sum(base[t] for t in shared) / len(shared)
        m = sum(mine[t] for t in shared) / len(shared)
        if b > 0:
            gaps[v] = m / b - 1.0
            windows[v] = [shared[0], shared[-1]]
            shared_means[v] = {"baseline": b, "value": m, "lines": len(shared)}
    if not gaps:
        return None
    return {"timelines": lines, "stats": stats, "gaps": gaps, "windows_s": windows,
            "shared_means": shared_means, "max_abs_gap": max(abs(g) for g in gaps.values())}


def kv_demand(load_prompts: int, prompt_tokens: int, out_tokens: int,
              max_num_seqs: int | None = None, block_size: int = BLOCK_SIZE) -> dict[str, int]:
    """KV tokens lab 01's speed pass can hold at once: ``load_prompts`` requests (at most
    ``max_num_seqs`` running) of ``prompt_tokens + out_tokens``, each rounded up to whole
    KV blocks (vLLM allocates per block; 16 tokens is its default for this model)."""
    per_request = math.ceil((int(prompt_tokens) + int(out_tokens)) / block_size) * block_size
    at_once = int(load_prompts) if not max_num_seqs else min(int(load_prompts), int(max_num_seqs))
    return {"per_request_tokens": per_request, "at_once": at_once,
            "demand_tokens": at_once * per_request}


def kv_check(
    records: Sequence[Mapping[str, Any]],
    *,
    baseline: Any,
    prompt_tokens_bound: int | None = None,
    max_num_seqs: int | None = None,
    block_size: int = BLOCK_SIZE,
) -> dict[str, Any] | None:
    """Did the KV cache limit the baseline's speed pass?

    If every request the pass runs at once (``kv_demand``) fits in the KV cache vLLM logged
    for the baseline, the pool never bound: a capacity knob (more KV) cannot speed that pass
    up. The prompt length is the one the run recorded (``prompt_tokens_max``) or, for runs
    recorded before it did, ``prompt_tokens_bound`` (evalset.prompt_tokens_bound).
    None when the baseline has no KV size or prompt length to go on.
    """
    base = next((r for r in records if r.get("status") == "ok"
                 and r.get("value") == baseline), None)
    if base is None or not base.get("kv_cache_tokens") or not base.get("load_prompts"):
        return None
    exact = base.get("prompt_tokens_max")
    prompt = exact if exact is not None else prompt_tokens_bound
    out_tokens = base.get("load_max_tokens") or base.get("max_tokens")
    if prompt is None or out_tokens is None:
        return None
    d = kv_demand(base["load_prompts"], prompt, out_tokens, max_num_seqs, block_size)
    kv = int(base["kv_cache_tokens"])
    return {**d, "kv_tokens": kv, "binding": d["demand_tokens"] > kv,
            "prompt_tokens": int(prompt), "prompt_exact": exact is not None,
            "out_tokens": int(out_tokens), "load_prompts": int(base["load_prompts"]),
            "kv_concurrency": kv // d["per_request_tokens"]}


def verdict(
    records: Sequence[Mapping[str, Any]],
    *,
    baseline: Any,
    p99_latency_slo_s: float | None = None,
    min_gain: float = 0.05,
    max_accuracy_drop: float = 0.02,
    kv: Mapping[str, Any] | None = None,
    spread: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Keep or revert: the fastest point that meets the SLO and keeps quality, if it beats
    ``baseline`` by at least ``min_gain`` in output tokens/s; otherwise keep the baseline.

    SLO: per-request p99 latency <= ``p99_latency_slo_s`` (None: no latency limit).
    Quality: accuracy may not drop more than ``max_accuracy_drop`` below the baseline's
    (ignored when not measured, i.e. dummy weights).
    ``kv``: pass ``kv_check(...)`` when the knob is a capacity knob. If the KV cache did not
    bind at the baseline, a gain cannot come from the knob's mechanism, so a would-be keep
    becomes ``recheck`` (stay on the baseline, measure again in another order first).
    ``spread``: pass ``same_batch_gap(...)``. If the kept value already differed from the
    baseline by ``min_gain`` or more before its KV cache filled (where the knob cannot act),
    the gain is within the run-to-run spread: ``recheck`` too.
    """
    ok = [r for r in records if r.get("status") == "ok" and r.get("output_tok_s")]
    base = next((r for r in ok if r.get("value") == baseline), None)
    if base is None:
        return {"decision": "none", "value": None,
                "why": f"baseline {baseline!r} has no successful measurement"}

    def meets(r: Mapping[str, Any]) -> tuple[bool, str]:
        if p99_latency_slo_s is not None and (r.get("latency_p99_s") or math.inf) > p99_latency_slo_s:
            return False, f"p99 latency {r.get('latency_p99_s') or math.inf:.1f} s > {p99_latency_slo_s:g} s"
        a, b = r.get("accuracy"), base.get("accuracy")
        if a is not None and b is not None and a < b - max_accuracy_drop:
            return False, f"accuracy {a:.1%} < baseline {b:.1%}"
        return True, ""

    candidates = [r for r in ok if meets(r)[0]]
    best = max(candidates, key=lambda r: r["output_tok_s"], default=None)
    if best is None:
        why = (f"no setting meets the SLO, the baseline included ({meets(base)[1]}): the SLO "
               "does not fit this load; keep the baseline, then change the load or the SLO")
        return {"decision": "revert", "value": baseline, "why": why, "gain": 0.0,
                "slo_met_by": []}
    if best.get("value") == baseline:
        why = "the baseline is the fastest setting that meets the SLO and keeps quality"
        return {"decision": "revert", "value": baseline, "why": why, "gain": 0.0,
                "slo_met_by": [r["value"] for r in candidates]}
    gain = best["output_tok_s"] / base["output_tok_s"] - 1.0
    if gain < min_gain:
        return {"decision": "revert", "value": baseline, "gain": gain,
                "why": f"best gain {gain:+.1%} < {min_gain:.0%}: not worth the change"}
    if kv is not None and not kv.get("binding", True):
        return {"decision": "recheck", "value": baseline, "gain": gain, "candidate": best["value"],
                "kv": dict(kv),
                "why": (f"{best['value']!r} gave {gain:+.1%} output tok/s, but the KV cache did "
                        f"not bind at the baseline (the speed pass needs at most "
                        f"{kv['demand_tokens']:,} of {kv['kv_tokens']:,} tokens), so more KV "
                        "cannot explain the gain: measure again with the values in another "
                        "order (a new output_dir) before keeping it")}
    gap = (spread or {}).get("gaps", {}).get(best["value"])
    if gap is not None and abs(gap) >= min_gain:
        return {"decision": "recheck", "value": baseline, "gain": gain, "candidate": best["value"],
                "same_batch_gap": gap,
                "why": (f"{best['value']!r} gave {gain:+.1%} output tok/s, but it already ran "
                        f"{gap:+.1%} against the baseline before its KV cache filled, where the "
                        "knob cannot act: the gain is within this machine's run-to-run spread; "
                        "measure again (other order, repeats) before keeping it")}
    return {"decision": "keep", "value": best["value"], "gain": gain,
            "why": f"{gain:+.1%} output tok/s over baseline within the SLO"}


def speed_pass_seqs(base_knobs: Mapping[str, Any], gpu: str) -> int:
    """The max_num_seqs an ``LLM(...)`` point runs its speed pass with: the sweep's own, else
    vLLM 0.26.0's default for the LLM entry on that GPU."""
    return int(base_knobs.get("max_num_seqs") or knobs_mod.default(
        "max_num_seqs", gpu_memory_gib=get_gpu(gpu).memory_gib, entry="llm"))


def judge(results_dir: str | Path, records: Sequence[Mapping[str, Any]],
          params: Mapping[str, Any], *, prompt_tokens_bound: int | None = None
          ) -> dict[str, Any]:
    """Lab 01's keep-or-revert with its checks, from a sweep's records and parameters (the
    lab's, or a run's params.json): for a capacity knob the engine-stats spread
    (``same_batch_gap``) and, with ``capacity_check``, whether the KV cache bound
    (``kv_check``); then ``verdict``. Returns baseline, max_num_seqs, kv, spread, verdict."""
    values = params.get("values") or []
    base = params.get("baseline")
    base = values[0] if base is None and values else base
    capacity_knob = knobs_mod.get(params["knob"]).group == "capacity"
    check = bool(params.get("capacity_check", True)) and capacity_knob
    seqs = speed_pass_seqs(params.get("base_knobs") or {}, params["gpu"])
    kv = (kv_check(records, baseline=base, prompt_tokens_bound=prompt_tokens_bound,
                   max_num_seqs=seqs) if check else None)
    spread = same_batch_gap(results_dir, records, baseline=base) if capacity_knob else None
    decision = verdict(records, baseline=base, p99_latency_slo_s=params.get("p99_latency_slo_s"),
                       min_gain=params.get("min_gain", 0.05), kv=kv,
                       spread=spread if check else None)
    return {"baseline": base, "max_num_seqs": seqs, "kv": kv, "spread": spread,
            "verdict": decision}


