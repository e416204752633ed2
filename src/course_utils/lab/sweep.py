"""One-knob sweeps and lesson 000's closed tuning loop, with one JSON line per point.

`sweep()` runs, for each value of one knob: start `vllm serve` -> warm-up -> `vllm bench
serve` with a /metrics sampler running -> score against the SLO -> diagnose -> stop the
server; it appends one JSON line per point to `out_dir/points.jsonl` at once (fsync), so an
interrupted sweep resumes without losing or repeating a point. `tune()` is the loop:
baseline -> diagnose -> sweep the knob the diagnosis names -> keep the best value only if it
raises the objective by more than the plateau -> diagnose again -> next knob, until a
plateau, a "not a tuning problem" diagnosis, or the GPU-minute budget.

Objectives (`objective=`):
- "request_goodput" (default): vLLM's per-request goodput, the requests that met every
  target (ttft/tpot/e2el, `vllm bench serve --goodput`) per second: the goodput inside the
  SLO. It moves while the tail still breaks the SLO, so the loop can climb towards it.
- "gate": lesson 000's p99 gate, throughput if every p99 target holds, else 0. On the H200
  run (labs/results/h200-2026-11-29) every candidate at 55 req/s broke p99 TTFT, the gate was
  0 everywhere and the loop reverted max_num_seqs 64 -> 1024 although vLLM's goodput rose
  4.13 -> 10.10 -> 28.16 -> 35.92 req/s.
Every step records both scores.

Points of one sweep run on fresh servers with the same workload seed (the same prompts, so
values are compared on equal terms); a fresh server has an empty prefix cache, so nothing is
replayed. `run_point` still checks it (bench.prefix_cache_hit_rate from /metrics).

Coupling (`couple=True`): vLLM 0.26.0 rejects max_num_batched_tokens < max_num_seqs
(vllm/config/scheduler.py: "max_num_batched_tokens (..) must be greater than or equal to
max_num_seqs (..)"). With couple=True a point whose effective max_num_batched_tokens (set,
or the 0.26.0 default for this GPU) is below max_num_seqs gets max_num_batched_tokens raised
to max_num_seqs; when the swept knob is max_num_batched_tokens itself, max_num_seqs is
lowered to it instead. The point record says what was coupled (`coupled`).

Pre-validation (`prevalidate=True`, the default): `sweep()` checks every value with
`knobs.validate` (names, types, ranges and the cross-knob rules of 0.26.0) before any
server starts, so a bad combination raises KnobError and costs no GPU time. With
`prevalidate=False` only each knob on its own is checked (name, type, range: a flag must be
written); the cross-knob rules are left to vLLM, so e.g. max_num_batched_tokens <
max_num_seqs starts a server that fails with SchedulerConfig's own ValueError, recorded as a
failed point (tools/gpu/faults.sh records that on the real server).
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.keep import (
    OBJECTIVES,
    _check_objective,
    _early_stop,
    _label,
    _order_candidates,
    _scores,
    best_point,
    choose,
    next_knob,
    objective_value,
)
from course_utils.core.records import append_jsonl, jsonable, read_jsonl
from course_utils.core.validity import prefix_cache_hit_rate, validity_issues
from course_utils.lab.bench import (
    WARMUP_PROMPTS,
    BenchError,
    Workload,
    run_bench,
    warmup,
)
from course_utils.lab.server import ServerStartError, VllmServer, gpu_memory_gib

__all__ = [
    "OBJECTIVES",
    "POINTS_FILE",
    "TUNE_FILE",
    "best_point",
    "choose",
    "objective_value",
    "couple_knobs",
    "load_points",
    "next_knob",
    "point_key",
    "run_point",
    "sweep",
    "tune",
]

POINTS_FILE = "points.jsonl"
TUNE_FILE = "tune.jsonl"
BASELINE = "baseline"


# --------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------






def load_points(path: str | Path) -> list[dict[str, Any]]:
    """Records of a points.jsonl (or of the folder that holds one)."""
    p = Path(path)
    return read_jsonl(p / POINTS_FILE if p.is_dir() else p)


def point_key(
    model: str,
    knob: str,
    value: Any,
    base_knobs: Mapping[str, Any],
    workload: Workload,
    server_extra: Mapping[str, Any] | None = None,
    effective: Mapping[str, Any] | None = None,
) -> str:
    """Stable id of a point: model, knob=value, the other knobs, workload, load format
    (and the knobs actually served, e.g. after coupling)."""
    base = {k: v for k, v in sorted(base_knobs.items()) if k != knob}
    blob = json.dumps(
        jsonable({"model": model, "knob": knob, "value": value, "base": base,
                   "workload": workload.to_dict(), "server": dict(server_extra or {}),
                   "effective": dict(sorted((effective or {}).items()))}),
        sort_keys=True, default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _effective(name: str, values: Mapping[str, Any], gpu_gib: float) -> Any:
    v = values.get(name)
    return v if v is not None else knobs_mod.default(name, gpu_memory_gib=gpu_gib, entry="serve")


def couple_knobs(
    values: Mapping[str, Any], swept: str | None, gpu_gib: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Apply the couple=True policy; return (knobs, what was changed)."""
    out = dict(values)
    if "max_num_seqs" not in out and "max_num_batched_tokens" not in out:
        return out, {}
    seqs = int(_effective("max_num_seqs", out, gpu_gib))
    tokens = int(_effective("max_num_batched_tokens", out, gpu_gib))
    if tokens >= seqs:
        return out, {}
    if swept == "max_num_batched_tokens":
        out["max_num_seqs"] = tokens
        return out, {"max_num_seqs": tokens}
    out["max_num_batched_tokens"] = seqs
    return out, {"max_num_batched_tokens": seqs}


def _gpu_gib(gpu_memory_gib_: float | None) -> float:
    if gpu_memory_gib_ is not None:
        return float(gpu_memory_gib_)
    found = gpu_memory_gib()
    return found if found is not None else 24.0


def _progress(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    return tqdm(total=total, desc=desc, leave=True)


# --------------------------------------------------------------------------------------
# one point
# --------------------------------------------------------------------------------------


def _bench_summary(raw: Mapping[str, Any]) -> dict[str, Any]:
    keys = ["duration", "completed", "failed", "num_prompts", "request_rate",
            "request_throughput", "request_goodput", "output_throughput",
            "total_token_throughput", "max_concurrent_requests", "total_output_tokens"]
    out = {k: raw.get(k) for k in keys}
    for m in ("ttft", "tpot", "itl", "e2el"):
        for p in ("mean", "p50", "p90", "p99"):
            k = f"{p}_{m}_ms"
            if k in raw:
                out[k] = raw[k]
    return out


def run_point(
    model: str,
    knob_values: Mapping[str, Any],
    *,
    workload: Workload,
    slo: Any,
    point_dir: str | Path,
    server_kwargs: Mapping[str, Any] | None = None,
    bench_kwargs: Mapping[str, Any] | None = None,
    warmup_prompts: int = WARMUP_PROMPTS,
    metrics_interval_s: float = 0.5,
    gpu_gib: float = 24.0,
    prevalidate: bool = True,
) -> dict[str, Any]:
    """Serve `knob_values`, warm up, bench with a sampler, score, diagnose, stop.

    Returns the measurement part of a point record; a failure gives
    {"status": "failed", "reason": one line}. KeyboardInterrupt propagates (server stopped).
    """
    from course_utils.core.diagnose import diagnose
    from course_utils.core.metrics import MetricsSampler
    from course_utils.core.slo import score

    pdir = Path(point_dir)
    pdir.mkdir(parents=True, exist_ok=True)
    skw = dict(server_kwargs or {})
    bkw = dict(bench_kwargs or {})
    vllm_cmd = skw.get("vllm_cmd", ("vllm",))
    bkw.setdefault("vllm_cmd", vllm_cmd)
    files = {"server_log": str(pdir / "serve.log"), "bench_json": str(pdir / "bench.json"),
             "bench_log": str(pdir / "bench.log"), "metrics": str(pdir / "metrics.jsonl")}
    rec: dict[str, Any] = {"files": files}
    t0 = time.monotonic()
    # prevalidate=False: each knob checked on its own, vLLM itself judges the combination
    srv = VllmServer(model, knob_values, log_path=pdir / "serve.log", check_knobs=prevalidate,
                     **skw)
    rec["serve_cmd"] = shlex.join(srv.argv)
    try:
        with srv:
            rec["startup_s"] = round(srv.startup_s or 0.0, 2)
            warmup(srv.base_url, model, workload, num_prompts=warmup_prompts)
            sampler = MetricsSampler(srv.metrics_url, interval_s=metrics_interval_s)
            try:
                with sampler:
                    result = run_bench(
                        srv.base_url, model, workload, slo, pdir, "bench.json",
                        log_path=pdir / "bench.log", **bkw,
                    )
            except BenchError as exc:
                sampler.save_jsonl(pdir / "metrics.jsonl")
                why = exc.reason
                if not srv.alive():
                    why = f"server died during the bench: {srv.failure_reason()}"
                return {**rec, "status": "failed", "reason": f"bench failed: {why}",
                        "elapsed_s": round(time.monotonic() - t0, 2)}
            sampler.save_jsonl(pdir / "metrics.jsonl")
            if not srv.alive():
                return {**rec, "status": "failed",
                        "reason": f"server died during the bench: {srv.failure_reason()}",
                        "elapsed_s": round(time.monotonic() - t0, 2)}
    except ServerStartError as exc:
        return {**rec, "status": "failed", "reason": exc.reason,
                "elapsed_s": round(time.monotonic() - t0, 2)}
    elapsed = time.monotonic() - t0
    sc = score(result, slo)
    mns = int(_effective("max_num_seqs", knob_values, gpu_gib))
    diag = diagnose(sampler.samples, result, slo, max_num_seqs=mns)
    hit_rate = prefix_cache_hit_rate(sampler.samples)
    issues = validity_issues(result.raw, workload, prefix_cache_hit_rate=hit_rate)
    if not sampler.samples:
        issues.append("no /metrics sample was taken during the bench")
    from course_utils.core.metrics import summarize

    return {
        **rec,
        "status": "ok",
        "reason": None,
        "valid": not issues,
        "validity_issues": issues,
        "prefix_cache_hit_rate": hit_rate,
        "score": {"gate_goodput": sc.gate_goodput, "request_goodput": sc.request_goodput,
                  "request_throughput": sc.request_throughput, "meets_slo": sc.meets_slo,
                  "violations": list(sc.violations)},
        "bench": _bench_summary(result.raw),
        "load": summarize(sampler.samples).as_dict(),
        "diagnosis": {**diag.as_dict(), "why_en": diag.why("en"), "why_zh": diag.why("zh")},
        "elapsed_s": round(elapsed, 2),
    }


# --------------------------------------------------------------------------------------
# sweep
# --------------------------------------------------------------------------------------


def _validate_each(values: Mapping[str, Any]) -> dict[str, Any]:
    """knobs.validate one knob at a time: names, types, ranges; no cross-knob rule."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        out.update(knobs_mod.validate({k: v}, entry="serve"))
    return out


def _check_values(
    knob: str, values: Sequence[Any], base: Mapping[str, Any], couple: bool, gpu_gib: float,
    prevalidate: bool = True,
) -> list[tuple[Any, dict[str, Any], dict[str, Any]]]:
    """knobs.validate every point before any server starts; raise KnobError (one line).
    prevalidate=False: each knob on its own only (see the module docstring)."""
    name = knobs_mod.get(knob).name if knob != BASELINE else BASELINE
    out = []
    for v in values:
        merged = dict(base)
        if name != BASELINE:
            merged[name] = v
        coupled: dict[str, Any] = {}
        try:
            if not prevalidate:
                checked = _validate_each(merged)
                if couple:
                    checked, coupled = couple_knobs(checked, name, gpu_gib)
                out.append((checked.get(name, v) if name != BASELINE else None, checked,
                            coupled))
                continue
            checked = knobs_mod.validate(merged, entry="serve")
            if couple:
                checked, coupled = couple_knobs(checked, name, gpu_gib)
            checked = knobs_mod.validate(checked, gpu_memory_gib=gpu_gib, entry="serve")
        except knobs_mod.KnobError as exc:
            label = f"{name}={v!r}" if name != BASELINE else "base knobs"
            hint = (" (couple=True raises max_num_batched_tokens with max_num_seqs)"
                    if not couple and "max_num_batched_tokens" in str(exc) else "")
            raise knobs_mod.KnobError(f"{label}: {exc}{hint}") from None
        value = checked.get(name, v) if name != BASELINE else None
        out.append((value, checked, coupled))
    return out










def sweep(
    model: str,
    knob: str,
    values: Sequence[Any],
    *,
    workload: Workload,
    slo: Any,
    out_dir: str | Path,
    base_knobs: Mapping[str, Any] | None = None,
    resume: bool = True,
    retry_failed: bool = False,
    early_stop: bool = True,
    patience: int = 2,
    min_gain: float = 0.0,
    couple: bool = False,
    server_kwargs: Mapping[str, Any] | None = None,
    bench_kwargs: Mapping[str, Any] | None = None,
    warmup_prompts: int = WARMUP_PROMPTS,
    metrics_interval_s: float = 0.5,
    gpu_memory_gib: float | None = None,
    on_point: Callable[[dict[str, Any]], None] | None = None,
    stop_if: Callable[[], str | None] | None = None,
    progress: bool = True,
    tag: str | None = None,
    objective: str = "request_goodput",
    prevalidate: bool = True,
) -> list[dict[str, Any]]:
    """Sweep one knob; return the point records in value order (resumed ones included).

    Every value is validated (with the base knobs merged) before any server starts: a bad
    value raises knobs.KnobError. `prevalidate=False` checks each knob on its own only and
    lets vLLM judge the combination (the point fails with vLLM's own reason). Each point is
    appended to `out_dir/points.jsonl` at once; with `resume`, points already there (same key) are not run again. `early_stop` stops
    after `patience` points without a gain > `min_gain` in `objective` ("request_goodput"
    or "gate"), or (gate) when a point breaks the SLO after an earlier one met it. `on_point(record)` runs after each new
    record is written; `stop_if()` is asked before each new point (a reason str stops).
    """
    if isinstance(values, (str, bytes)) or not values:
        raise knobs_mod.KnobError(f"{knob}: give a non-empty list of values")
    _check_objective(objective)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gpu_gib = _gpu_gib(gpu_memory_gib)
    name = knobs_mod.get(knob).name if knob != BASELINE else BASELINE
    base = (knobs_mod.validate(dict(base_knobs or {}), entry="serve") if prevalidate
            else _validate_each(dict(base_knobs or {})))
    planned = _check_values(name, values, base, couple, gpu_gib, prevalidate)
    skw = dict(server_kwargs or {})
    server_extra = {"load_format": skw.get("load_format"),
                    "extra_args": list(skw.get("extra_args", ()))}
    points_path = out / POINTS_FILE
    done: dict[str, dict[str, Any]] = {}
    if resume:
        for r in load_points(points_path):
            if retry_failed and r.get("status") == "failed":
                continue
            done[r["key"]] = r
    records: list[dict[str, Any]] = []
    bar = _progress(len(planned), f"sweep {name}", progress)
    try:
        for value, checked, coupled in planned:
            key = point_key(model, name, value, base, workload, server_extra, checked)
            if key in done:
                records.append(done[key])
            else:
                reason = stop_if() if stop_if else None
                if reason:
                    if bar is not None:
                        bar.set_postfix_str(f"stopped: {reason}")
                    break
                res = run_point(
                    model, checked, workload=workload, slo=slo,
                    point_dir=out / "points" / key, server_kwargs=skw,
                    bench_kwargs=bench_kwargs, warmup_prompts=warmup_prompts,
                    metrics_interval_s=metrics_interval_s, gpu_gib=gpu_gib,
                    prevalidate=prevalidate,
                )
                rec = {
                    "key": key, "tag": tag, "model": model, "knob": name, "value": value,
                    "knobs": checked, "base_knobs": base, "coupled": coupled,
                    "workload": workload.to_dict(), "slo": str(slo),
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **res,
                }
                append_jsonl(points_path, rec)
                done[key] = rec
                records.append(rec)
                if on_point is not None:
                    on_point(rec)
            if bar is not None:
                last = records[-1]
                bar.set_postfix_str(
                    f"{name}={value} " + (f"{_label(objective)}="
                                          f"{objective_value(last, objective):.2f}"
                                          if last["status"] == "ok" else last["status"])
                )
                bar.update(1)
            if early_stop:
                why = _early_stop(records, patience, min_gain, objective)
                if why:
                    if bar is not None:
                        bar.set_postfix_str(f"early stop: {why}")
                    break
    finally:
        if bar is not None:
            bar.close()
    return records






# --------------------------------------------------------------------------------------
# tune: the closed loop
# --------------------------------------------------------------------------------------






def tune(
    model: str,
    candidates: Mapping[str, Sequence[Any]],
    *,
    workload: Workload,
    slo: Any,
    out_dir: str | Path,
    base_knobs: Mapping[str, Any] | None = None,
    objective: str = "request_goodput",
    plateau: float = 0.02,
    gpu_minutes: float | None = None,
    est_point_minutes: float = 3.0,
    max_steps: int = 6,
    couple: bool = True,
    resume: bool = True,
    patience: int = 2,
    server_kwargs: Mapping[str, Any] | None = None,
    bench_kwargs: Mapping[str, Any] | None = None,
    warmup_prompts: int = WARMUP_PROMPTS,
    metrics_interval_s: float = 0.5,
    gpu_memory_gib: float | None = None,
    progress: bool = True,
    on_point: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Lesson 000's loop. Returns a summary with the `vllm serve` command to ship.

    `candidates`: values to try per knob, e.g. {"max_num_seqs": [64, 128, 256, 384]}; the
    knob to sweep next is the first one the diagnosis names that has candidates left. The
    best valid value under `objective` ("request_goodput": vLLM's per-request goodput;
    "gate": lesson 000's p99 gate, see the module docstring) is kept only if it raises the
    objective by more than `plateau` (relative, 2 %); otherwise the knob is reverted and the
    next knob the same diagnosis names is tried. The loop stops when the diagnosis names no
    engine knob ("queue" past the knee: add replicas; "none": at the limit), when no named
    knob helps (plateau), after `max_steps`, or when the GPU-minute budget would be
    overspent by a point that still has to run (minutes per point are measured; points
    resumed from points.jsonl cost nothing). A stop on the budget is a normal end: the
    summary says so in `stop_reason` and `tune.jsonl` always ends with it. Every step
    records both scores. Writes `out_dir/tune.jsonl` (one record per step).
    """
    _check_objective(objective)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gpu_gib = _gpu_gib(gpu_memory_gib)
    cand = {knobs_mod.get(k).name: list(v) for k, v in candidates.items()}
    for k, vals in cand.items():  # every candidate value checked before any GPU time
        _check_values(k, vals, dict(base_knobs or {}), couple, gpu_gib)
    current = knobs_mod.validate(dict(base_knobs or {}), entry="serve")
    tune_path = out / TUNE_FILE
    tune_path.write_text("")
    spent_s = 0.0
    # minutes per point: measured in this run; until then, from points recorded earlier
    earlier = [float(r["elapsed_s"]) for r in load_points(out)
               if r.get("status") == "ok" and r.get("elapsed_s")]
    measured: list[float] = []
    common = dict(workload=workload, slo=slo, out_dir=out, resume=resume, couple=couple,
                  server_kwargs=server_kwargs, bench_kwargs=bench_kwargs,
                  warmup_prompts=warmup_prompts, metrics_interval_s=metrics_interval_s,
                  gpu_memory_gib=gpu_gib, progress=False, objective=objective)

    def per_point_min() -> float:
        xs = measured or earlier
        return (sum(xs) / len(xs) / 60.0) if xs else est_point_minutes

    def left_min() -> float | None:
        return None if gpu_minutes is None else gpu_minutes - spent_s / 60.0

    def count(rec: dict[str, Any]) -> None:
        nonlocal spent_s
        spent_s += float(rec.get("elapsed_s") or 0.0)
        if rec.get("status") == "ok":  # a failed start is quick: not a point's cost
            measured.append(float(rec.get("elapsed_s") or 0.0))
        if on_point is not None:
            on_point(rec)

    budget_hit: list[str] = []  # set when the budget refused a point

    def budget_stop() -> str | None:
        # asked by sweep() only before a point that has to run (not for resumed ones)
        left = left_min()
        if left is not None and left < per_point_min():
            why = f"GPU budget: {left:.1f} min left < {per_point_min():.1f} min per point"
            budget_hit.append(why)
            return why
        return None

    def log(step: dict[str, Any]) -> None:
        step = {**step, "objective": objective, "gpu_minutes_spent": round(spent_s / 60.0, 2),
                "gpu_minutes_left_est": None if left_min() is None else round(left_min(), 2),
                "minutes_per_point_est": round(per_point_min(), 2)}
        append_jsonl(tune_path, step)

    bar = _progress(max_steps + 1, "tune", progress)

    def tick(msg: str) -> None:
        if bar is not None:
            left = left_min()
            bar.set_postfix_str(msg + (f" | GPU min left ~{left:.1f}" if left is not None else ""))
            bar.update(1)

    steps: list[dict[str, Any]] = []
    stop_reason = ""
    kept_rec: dict[str, Any] | None = None
    diag: dict[str, Any] | None = None
    try:
        base_recs = sweep(model, BASELINE, [None], base_knobs=current, on_point=count,
                          stop_if=budget_stop, early_stop=False, **common)
        if not base_recs:
            raise _Stop(budget_hit[-1] if budget_hit else "baseline not run")
        baseline = base_recs[0]
        if baseline["status"] != "ok":
            log({"step": 0, "kind": "baseline", "knobs": current, "status": "failed",
                 "reason": baseline["reason"]})
            raise _Stop(f"baseline failed: {baseline['reason']}")
        kept_rec = baseline
        score = objective_value(baseline, objective)
        diag = baseline["diagnosis"]
        step0 = {"step": 0, "kind": "baseline", "knobs": current, "point": baseline["key"],
                 **_scores(baseline), "score": score, "valid": baseline.get("valid"),
                 "validity_issues": baseline.get("validity_issues", []), "diagnosis": diag}
        log(step0)
        steps.append(step0)
        tick(f"baseline {_label(objective)} {score:.2f} [{diag['constraint']}]")
        tried: set[str] = set()
        step_no = 0
        while step_no < max_steps:
            named = [k for k in diag["knobs"] if k in cand and k not in tried]
            if not diag["knobs"]:
                raise _Stop(f"diagnosis '{diag['leaf']}' ({diag['constraint']}) names no engine "
                            "knob: " + ("add replicas / lower the rate, not a tuning problem"
                                        if diag["constraint"] == "queue" else "at the limit"))
            if not named:
                raise _Stop("plateau: no knob the diagnosis names "
                            f"({', '.join(diag['knobs'])}) has candidates left that help")
            knob = named[0]
            tried.add(knob)
            step_no += 1
            cur_val = current.get(knob)
            if cur_val is None:
                cur_val = knobs_mod.default(knob, gpu_memory_gib=gpu_gib, entry="serve")
            move = diag.get("moves", {}).get(knob)
            values = _order_candidates(knob, cand[knob], cur_val, move)
            if not values:
                log({"step": step_no, "kind": "skip", "knob": knob, "current": cur_val,
                     "move": move, "reason": f"no candidate to {move} {knob} from {cur_val}"})
                continue
            try:
                recs = sweep(model, knob, values, base_knobs=current, on_point=count,
                             stop_if=budget_stop, patience=patience,
                             tag=f"tune-step-{step_no}", **common)
            except knobs_mod.KnobError as exc:
                log({"step": step_no, "kind": "skip", "knob": knob, "reason": str(exc)})
                continue
            if not recs:  # the budget stopped the sweep before its first new point
                raise _Stop(budget_hit[-1] if budget_hit else f"{knob}: no point ran")
            best, gain, kept = choose(recs, score, objective=objective, plateau=plateau)
            before = _scores(kept_rec)
            step = {"step": step_no, "kind": "sweep", "knob": knob, "move": move,
                    "from_value": cur_val, "values_tried": [r["value"] for r in recs],
                    "results": [{"value": r["value"], "status": r["status"],
                                 "reason": r.get("reason"), **_scores(r),
                                 "score": objective_value(r, objective),
                                 "valid": r.get("valid"),
                                 "validity_issues": r.get("validity_issues", [])}
                                for r in recs],
                    "score_before": score,
                    "goodput_before": before["gate_goodput"],
                    "request_goodput_before": before["request_goodput"],
                    "best_value": best["value"] if best else None,
                    "score_best": objective_value(best, objective) if best else None,
                    "goodput_best": _scores(best)["gate_goodput"] if best else None,
                    "request_goodput_best": _scores(best)["request_goodput"] if best else None,
                    "gain": None if gain is None else (str(gain) if math.isinf(gain) else gain),
                    "kept": kept, "diagnosis_before": diag}
            if len(recs) < len(values):
                step["values_not_run"] = [v for v in values
                                          if v not in {r["value"] for r in recs}]
            if kept and best is not None:
                current = dict(best["knobs"])
                kept_rec = best
                score = objective_value(best, objective)
                diag = best["diagnosis"]
                step["knobs_after"] = current
                step["diagnosis_after"] = diag
            else:
                step["knobs_after"] = current
                step["reverted"] = True
            log(step)
            steps.append(step)
            tick(f"{knob}: {'kept ' + str(best['value']) if kept and best else 'reverted'}"
                 f" {_label(objective)} {score:.2f}")
            if budget_hit:  # a sweep cut short: no conclusion from part of it; rerun to resume
                raise _Stop(budget_hit[-1])
        else:
            raise _Stop(f"max_steps ({max_steps}) reached")
    except _Stop as stop:
        stop_reason = str(stop)
    finally:
        if bar is not None:
            bar.close()
    skw = dict(server_kwargs or {})
    ship = VllmServer(model, current, vllm_cmd=skw.get("vllm_cmd", ("vllm",)), port=0)
    kept_scores = _scores(kept_rec) if kept_rec else {}
    summary = {
        "kind": "summary",
        "model": model,
        "objective": objective,
        "plateau": plateau,
        "knobs": current,
        "score": objective_value(kept_rec, objective) if kept_rec else None,
        "gate_goodput": kept_scores.get("gate_goodput"),
        "request_goodput": kept_scores.get("request_goodput"),
        "diagnosis": diag,
        "next_knob": next_knob(diag, cand),
        "stop_reason": stop_reason,
        "stopped_on_budget": stop_reason.startswith("GPU budget"),
        "steps": len(steps),
        "gpu_minutes_spent": round(spent_s / 60.0, 2),
        "serve_command": shlex.join(ship.ship_argv()),
    }
    append_jsonl(tune_path, summary)
    return summary






class _Stop(Exception):
    pass


# --------------------------------------------------------------------------------------
# CLI: python -m course_utils sweep|tune ...
# --------------------------------------------------------------------------------------
















