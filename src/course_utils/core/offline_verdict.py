"""Lab 01's keep-or-revert for an offline sweep of one knob: the triple, whether the KV cache
bound at the baseline, and the same-batch spread from vLLM's engine stats."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.capacity import BLOCK_SIZE, get_gpu
from course_utils.core.records import is_present, read_text
from course_utils.core.vllm_logs import EngineStatsLine, engine_stats


def _same_batch_lines(stats: Sequence[EngineStatsLine], full: float = 0.99) -> dict[float, float]:
    """t_s -> generation tokens/s of the lines before the KV cache filled (usage >= ``full``)
    with no prompt work in the interval: the same batch, whatever the KV size."""
    full_at = next((s.t_s for s in stats if s.kv_usage >= full), None)
    return {
        s.t_s: s.gen_tok_s
        for s in stats
        if (full_at is None or s.t_s < full_at) and s.prompt_tok_s == 0.0
    }


def kv_timeline(stats: Sequence[EngineStatsLine], full: float = 0.99) -> dict[str, Any]:
    """When the KV cache filled (None: never), the mean generation tokens/s before that, and
    the most requests waiting (in an offline pass, waiting after the start means preempted)."""
    before = list(_same_batch_lines(stats, full).values())
    return {
        "lines": len(stats),
        "kv_full_at_s": next((s.t_s for s in stats if s.kv_usage >= full), None),
        "gen_tok_s_before_full": sum(before) / len(before) if before else None,
        "waiting_max": max((s.waiting for s in stats), default=None),
        "running_max": max((s.running for s in stats), default=None),
    }


def point_log(results_dir: str | Path, record: Mapping[str, Any]) -> Path | None:
    """A point's vLLM log: points/<key>/llm.log under `results_dir` (a run fetched from a GPU
    host lives elsewhere than the path it recorded), else the recorded path."""
    for cand in (
        Path(results_dir) / "points" / str(record.get("key")) / "llm.log",
        Path(str(record.get("log") or "")),
    ):
        if cand.name == "llm.log" and is_present(cand):
            return cand
    return None


def same_batch_gap(
    results_dir: str | Path, records: Sequence[Mapping[str, Any]], *, baseline: Any
) -> dict[str, Any] | None:
    """Each ok point's generation tokens/s relative to the baseline's over the same seconds
    before either KV cache filled, where a capacity knob cannot act: a gap there is the
    machine's run-to-run spread. None without the baseline's stats or a shared second."""
    lines, stats = {}, {}
    for r in records:
        log = point_log(results_dir, r) if r.get("status") == "ok" else None
        if log is not None:
            stats[r["value"]] = engine_stats(read_text(log, errors="replace"))
            lines[r["value"]] = kv_timeline(stats[r["value"]])
    if baseline not in stats:
        return None
    base = _same_batch_lines(stats[baseline])
    gaps, windows, shared_means = {}, {}, {}
    for v, st in stats.items():
        mine = _same_batch_lines(st)
        shared = sorted(set(base) & set(mine)) if v != baseline else []
        b = sum(base[t] for t in shared) / len(shared) if shared else 0.0
        if b > 0:
            m = sum(mine[t] for t in shared) / len(shared)
            gaps[v] = m / b - 1.0
            windows[v] = [shared[0], shared[-1]]
            shared_means[v] = {"baseline": b, "value": m, "lines": len(shared)}
    if not gaps:
        return None
    return {
        "timelines": lines,
        "stats": stats,
        "gaps": gaps,
        "windows_s": windows,
        "shared_means": shared_means,
        "max_abs_gap": max(abs(g) for g in gaps.values()),
    }


def kv_demand(
    load_prompts: int,
    prompt_tokens: int,
    out_tokens: int,
    max_num_seqs: int | None = None,
    block_size: int = BLOCK_SIZE,
) -> dict[str, int]:
    """KV tokens lab 01's speed pass holds at once: ``load_prompts`` requests (at most
    ``max_num_seqs``) of ``prompt_tokens + out_tokens``, each in whole KV blocks."""
    per_request = math.ceil((int(prompt_tokens) + int(out_tokens)) / block_size) * block_size
    at_once = int(load_prompts) if not max_num_seqs else min(int(load_prompts), int(max_num_seqs))
    return {
        "per_request_tokens": per_request,
        "at_once": at_once,
        "demand_tokens": at_once * per_request,
    }


def kv_check(
    records: Sequence[Mapping[str, Any]],
    *,
    baseline: Any,
    prompt_tokens_bound: int | None = None,
    max_num_seqs: int | None = None,
    block_size: int = BLOCK_SIZE,
) -> dict[str, Any] | None:
    """Did the KV cache limit the baseline's speed pass (``kv_demand`` above the logged KV
    size)? The prompt length is the recorded ``prompt_tokens_max``, else
    ``prompt_tokens_bound``. None when the baseline has no KV size or prompt length."""
    base = next(
        (r for r in records if r.get("status") == "ok" and r.get("value") == baseline), None
    )
    if base is None or not base.get("kv_cache_tokens") or not base.get("load_prompts"):
        return None
    exact = base.get("prompt_tokens_max")
    prompt = exact if exact is not None else prompt_tokens_bound
    out_tokens = base.get("load_max_tokens") or base.get("max_tokens")
    if prompt is None or out_tokens is None:
        return None
    d = kv_demand(base["load_prompts"], prompt, out_tokens, max_num_seqs, block_size)
    kv = int(base["kv_cache_tokens"])
    return {
        **d,
        "kv_tokens": kv,
        "binding": d["demand_tokens"] > kv,
        "prompt_tokens": int(prompt),
        "prompt_exact": exact is not None,
        "out_tokens": int(out_tokens),
        "load_prompts": int(base["load_prompts"]),
        "kv_concurrency": kv // d["per_request_tokens"],
    }


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
    """Keep the fastest point within the p99 latency SLO and ``max_accuracy_drop`` of the
    baseline's accuracy if it beats the baseline by ``min_gain``; else revert. With ``kv``
    (``kv_check``) or ``spread`` (``same_batch_gap``), a keep the KV cache or the run-to-run
    spread cannot explain becomes ``recheck``."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("output_tok_s")]
    base = next((r for r in ok if r.get("value") == baseline), None)
    if base is None:
        why = f"baseline {baseline!r} has no successful measurement"
        return {"decision": "none", "value": None, "why": why}
    candidates = [r for r in ok if not _unmet(r, base, p99_latency_slo_s, max_accuracy_drop)]
    best = max(candidates, key=lambda r: r["output_tok_s"], default=None)
    if best is None or best.get("value") == baseline:
        why = "the baseline is the fastest setting that meets the SLO and keeps quality"
        if best is None:
            unmet = _unmet(base, base, p99_latency_slo_s, max_accuracy_drop)
            why = (
                f"no setting meets the SLO, the baseline included ({unmet}): the SLO "
                "does not fit this load; keep the baseline, then change the load or the SLO"
            )
        met = [r["value"] for r in candidates]
        return {"decision": "revert", "value": baseline, "why": why, "gain": 0.0, "slo_met_by": met}
    gain = best["output_tok_s"] / base["output_tok_s"] - 1.0
    if gain < min_gain:
        why = f"best gain {gain:+.1%} < {min_gain:.0%}: not worth the change"
        return {"decision": "revert", "value": baseline, "gain": gain, "why": why}
    recheck = _recheck(best, gain, baseline, min_gain, kv, spread)
    if recheck is not None:
        return recheck
    why = f"{gain:+.1%} output tok/s over baseline within the SLO"
    return {"decision": "keep", "value": best["value"], "gain": gain, "why": why}


def _unmet(
    r: Mapping[str, Any],
    base: Mapping[str, Any],
    p99_latency_slo_s: float | None,
    max_accuracy_drop: float,
) -> str:
    """Why point ``r`` misses the SLO or the quality bar ("" when it meets both)."""
    p99 = r.get("latency_p99_s") or math.inf
    if p99_latency_slo_s is not None and p99 > p99_latency_slo_s:
        return f"p99 latency {p99:.1f} s > {p99_latency_slo_s:g} s"
    a, b = r.get("accuracy"), base.get("accuracy")
    if a is not None and b is not None and a < b - max_accuracy_drop:
        return f"accuracy {a:.1%} < baseline {b:.1%}"
    return ""


def _recheck(
    best: Mapping[str, Any],
    gain: float,
    baseline: Any,
    min_gain: float,
    kv: Mapping[str, Any] | None,
    spread: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """A would-be keep that the KV check or the same-batch spread sends back to measure."""
    gap = (spread or {}).get("gaps", {}).get(best["value"])
    head = f"{best['value']!r} gave {gain:+.1%} output tok/s, but "
    out = {"decision": "recheck", "value": baseline, "gain": gain, "candidate": best["value"]}
    if kv is not None and not kv.get("binding", True):
        why = (
            f"the KV cache did not bind at the baseline (the speed pass needs at most "
            f"{kv['demand_tokens']:,} of {kv['kv_tokens']:,} tokens), so more KV "
            "cannot explain the gain: measure again with the values in another "
            "order (a new output_dir) before keeping it"
        )
        return {**out, "kv": dict(kv), "why": head + why}
    if gap is not None and abs(gap) >= min_gain:
        why = (
            f"it already ran {gap:+.1%} against the baseline before its KV cache filled, where "
            "the knob cannot act: the gain is within this machine's run-to-run spread; "
            "measure again (other order, repeats) before keeping it"
        )
        return {**out, "same_batch_gap": gap, "why": head + why}
    return None


def speed_pass_seqs(base_knobs: Mapping[str, Any], gpu: str) -> int:
    """The max_num_seqs an ``LLM(...)`` point runs its speed pass with: the sweep's own, else
    vLLM 0.26.0's default for the LLM entry on that GPU."""
    return int(
        base_knobs.get("max_num_seqs")
        or knobs_mod.default("max_num_seqs", gpu_memory_gib=get_gpu(gpu).memory_gib, entry="llm")
    )


def judge(
    results_dir: str | Path,
    records: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    *,
    prompt_tokens_bound: int | None = None,
) -> dict[str, Any]:
    """Lab 01's ``verdict`` from a sweep's records and parameters, with ``kv_check`` and
    ``same_batch_gap`` for a capacity knob. Returns baseline, max_num_seqs, kv, spread, verdict."""
    values = params.get("values") or []
    base = params.get("baseline")
    base = values[0] if base is None and values else base
    capacity_knob = knobs_mod.get(params["knob"]).group == "capacity"
    check = bool(params.get("capacity_check", True)) and capacity_knob
    seqs = speed_pass_seqs(params.get("base_knobs") or {}, params["gpu"])
    kv = (
        kv_check(records, baseline=base, prompt_tokens_bound=prompt_tokens_bound, max_num_seqs=seqs)
        if check
        else None
    )
    spread = same_batch_gap(results_dir, records, baseline=base) if capacity_knob else None
    decision = verdict(
        records,
        baseline=base,
        p99_latency_slo_s=params.get("p99_latency_slo_s"),
        min_gain=params.get("min_gain", 0.05),
        kv=kv,
        spread=spread if check else None,
    )
    return {"baseline": base, "max_num_seqs": seqs, "kv": kv, "spread": spread, "verdict": decision}
