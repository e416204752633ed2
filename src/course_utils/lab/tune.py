"""The closed tuning loop: baseline -> diagnose -> sweep the knob the diagnosis names -> keep
the best value only beyond the plateau and the run-to-run spread (core.keep.decide) ->
diagnose again, until a plateau, a "not a tuning problem" diagnosis or the GPU-minute budget.
One line per step in ``out_dir/tune.jsonl``, a summary last; both objectives recorded.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.keep import (
    as_point,
    check_objective,
    decide,
    loop_outcome,
    next_knob,
    objective_label,
    objective_value,
    order_candidates,
    swept_knobs,
)
from course_utils.core.records import ServedPoint, append_jsonl, read_jsonl
from course_utils.core.store import TUNE_FILE, check_run_folder, set_aside
from course_utils.lab.server import VllmServer
from course_utils.lab.sweep import (
    BASELINE,
    POINTS_FILE,
    SweepConfig,
    check_values,
    progress_bar,
    sweep,
)

__all__ = ["TUNE_FILE", "TuneStep", "tune"]


@dataclass
class TuneStep:
    """One line of tune.jsonl: the baseline, a knob's sweep, or a skipped knob."""

    step: int
    kind: str  # baseline | sweep | skip
    objective: str
    knob: str | None = None
    move: str | None = None
    from_value: Any = None
    values_tried: list[Any] = field(default_factory=list)
    values_not_run: list[Any] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    point: str | None = None  # the baseline's point key
    knobs: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    reason: str | None = None
    score: float | None = None
    score_before: float | None = None
    spread_before: float | None = None
    best_value: Any = None
    score_best: float | None = None
    spread_best: float | None = None
    gain: float | str | None = None
    margin: float | None = None
    decision: str | None = None  # keep | tie | revert | undecided
    decision_why: str = ""
    kept: bool = False
    reverted: bool = False
    knobs_after: dict[str, Any] = field(default_factory=dict)
    diagnosis: dict[str, Any] = field(default_factory=dict)
    diagnosis_before: dict[str, Any] = field(default_factory=dict)
    diagnosis_after: dict[str, Any] = field(default_factory=dict)
    valid: bool | None = None
    validity_issues: list[str] = field(default_factory=list)
    gate_goodput: float | None = None
    request_goodput: float | None = None
    meets_slo: bool | None = None
    gpu_minutes_spent: float = 0.0
    gpu_minutes_left_est: float | None = None
    minutes_per_point_est: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _result(p: ServedPoint, objective: str) -> dict[str, Any]:
    sc = p.scores()
    return {
        "value": p.value,
        "status": p.status,
        "reason": p.reason,
        "gate_goodput": sc.gate_goodput if sc else None,
        "request_goodput": sc.request_goodput if sc else None,
        "meets_slo": p.meets_slo,
        "score": objective_value(p, objective),
        "spread": p.spread(objective),
        "valid": p.valid,
        "windows": [_window_result(w, objective) for w in p.windows],
        "validity_issues": p.validity_issues,
    }


def _window_result(w: Any, objective: str) -> dict[str, Any]:
    d = {k: getattr(w, k) for k in ("index", "purpose", "valid", "validity_issues")}
    return d | {"score": w.score.objective(objective) if w.score else None}


class _Budget:
    """GPU minutes spent and left; minutes per point measured in this run, else earlier."""

    def __init__(
        self,
        gpu_minutes: float | None,
        est_point_minutes: float,
        out: Path,
        on_point: Callable[[dict[str, Any]], None] | None,
        bar: Any,
    ) -> None:
        self.gpu_minutes, self.est = gpu_minutes, est_point_minutes
        self.on_point, self.bar = on_point, bar
        self.spent_s = 0.0
        self.measured: list[float] = []
        recs = read_jsonl(out / POINTS_FILE)
        self.earlier = [
            float(r["elapsed_s"]) for r in recs if r.get("status") == "ok" and r.get("elapsed_s")
        ]
        self.hit: list[str] = []

    def per_point_min(self) -> float:
        xs = self.measured or self.earlier
        return (sum(xs) / len(xs) / 60.0) if xs else self.est

    def left_min(self) -> float | None:
        return None if self.gpu_minutes is None else self.gpu_minutes - self.spent_s / 60.0

    def count(self, rec: dict[str, Any]) -> None:
        self.spent_s += float(rec.get("elapsed_s") or 0.0)
        if rec.get("status") == "ok":  # a failed start is quick: not a point's cost
            self.measured.append(float(rec.get("elapsed_s") or 0.0))
        if self.bar is not None:
            left = self.left_min()
            label = "baseline" if rec.get("knob") == BASELINE else f"{rec['knob']}={rec['value']}"
            budget = f" | GPU min left ~{left:.1f}" if left is not None else ""
            self.bar.set_postfix_str(f"{label}: {rec.get('status')}{budget}")
            self.bar.update(1)
        if self.on_point is not None:
            self.on_point(rec)

    def stop(self) -> str | None:
        left = self.left_min()
        if left is not None and left < self.per_point_min():
            why = f"GPU budget: {left:.1f} min left < {self.per_point_min():.1f} min per point"
            self.hit.append(why)
            return why
        return None

    def hooks(self, cfg: SweepConfig) -> dict[str, Any]:
        """The sweep() keywords that count its points against this budget."""
        return {"on_point": self.count, "stop_if": self.stop, "progress": False, "config": cfg}

    def stamp(self, step: TuneStep) -> TuneStep:
        left = self.left_min()
        step.gpu_minutes_spent = round(self.spent_s / 60.0, 2)
        step.gpu_minutes_left_est = None if left is None else round(left, 2)
        step.minutes_per_point_est = round(self.per_point_min(), 2)
        return step


class _Stop(Exception):
    pass


@dataclass
class _State:
    knobs: dict[str, Any]
    kept: ServedPoint
    score: float
    diag: dict[str, Any]


def tune(
    model: str,
    candidates: Mapping[str, Sequence[Any]],
    *,
    base_knobs: Mapping[str, Any] | None = None,
    plateau: float = 0.02,
    gpu_minutes: float | None = None,
    est_point_minutes: float = 3.0,
    max_steps: int = 6,
    couple: bool = True,
    patience: int = 2,
    progress: bool = True,
    on_point: Callable[[dict[str, Any]], None] | None = None,
    config: SweepConfig | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """The loop; returns its summary (with the `vllm serve` command to ship).

    ``candidates``: values to try per knob, e.g. {"max_num_seqs": [64, 128, 256]}; the next
    knob is the first the diagnosis names with candidates left. Served-point options go in
    ``config`` or as keywords (``SweepConfig.make``). It stops when the diagnosis names no
    engine knob, no named knob helps, after ``max_steps``, or before a point the GPU-minute
    budget cannot pay for (rerun to resume from points.jsonl).
    """
    cfg = config or SweepConfig.make(couple=couple, **kw)
    check_objective(cfg.objective)
    if not (math.isfinite(plateau) and plateau >= 0):
        raise ValueError(f"plateau must be a finite share >= 0, got {plateau}")
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    out = cfg.out_dir
    check_run_folder(out, resume=cfg.resume)  # --no-resume: refused on finished points
    cfg = replace(cfg, resume=True)  # so this run's own points are reused within it
    out.mkdir(parents=True, exist_ok=True)
    cand = {knobs_mod.get(k).name: list(v) for k, v in candidates.items()}
    for k, vals in cand.items():  # every candidate value checked before any GPU time
        check_values(k, vals, dict(base_knobs or {}), cfg.couple, cfg.gpu_gib())
    tune_path = out / TUNE_FILE
    set_aside(tune_path)  # an earlier experiment's log keeps its bytes under a new name
    bar = progress_bar(1 + sum(len(v) for v in cand.values()), "tune", progress)
    budget = _Budget(gpu_minutes, est_point_minutes, out, on_point, bar)
    state: _State | None = None
    steps = 0
    try:
        state = _baseline(
            model, knobs_mod.validate(dict(base_knobs or {}), entry="serve"), cfg, budget, tune_path
        )
        steps = 1
        tried: set[str] = set()
        while steps <= max_steps:
            knob = _next(state, cand, tried)
            tried.add(knob)
            step = _sweep_step(
                model, knob, steps, cand[knob], state, cfg, budget, patience, plateau
            )
            append_jsonl(tune_path, budget.stamp(step))
            steps += 1
            if budget.hit:  # a sweep cut short: no conclusion from part of it; rerun to resume
                raise _Stop(budget.hit[-1])
        raise _Stop(f"max_steps ({max_steps}) reached")
    except _Stop as stop:
        stop_reason = str(stop)
    finally:
        if bar is not None:
            bar.close()
    return _summary(model, cfg, state, cand, plateau, stop_reason, steps, budget, tune_path)


def _baseline(
    model: str, knobs: dict[str, Any], cfg: SweepConfig, budget: _Budget, tune_path: Path
) -> _State:
    recs = sweep(model, BASELINE, [None], base_knobs=knobs, early_stop=False, **budget.hooks(cfg))
    if not recs:
        raise _Stop(budget.hit[-1] if budget.hit else "baseline not run")
    p = as_point(recs[0])
    step = TuneStep(0, "baseline", cfg.objective, knobs=knobs, point=p.key, status=p.status)
    step.reason = p.reason
    if p.status != "ok":
        append_jsonl(tune_path, budget.stamp(step))
        raise _Stop(f"baseline failed: {p.reason}")
    r = _result(p, cfg.objective)
    step.score, step.spread_before = r["score"], r["spread"]
    step.valid, step.validity_issues, step.diagnosis = p.valid, p.validity_issues, p.diagnosis
    step.gate_goodput, step.request_goodput = r["gate_goodput"], r["request_goodput"]
    step.meets_slo = p.meets_slo
    append_jsonl(tune_path, budget.stamp(step))
    if not p.valid:
        raise _Stop("baseline has no valid window: " + "; ".join(p.validity_issues))
    return _State(knobs=knobs, kept=p, score=step.score, diag=p.diagnosis)


def _next(state: _State, cand: Mapping[str, Any], tried: set[str]) -> str:
    diag = state.diag
    if not diag.get("knobs"):
        queue = diag.get("constraint") == "queue"
        why = "add replicas / lower the rate, not a tuning problem" if queue else "at the limit"
        raise _Stop(
            f"diagnosis '{diag.get('leaf')}' ({diag.get('constraint')}) names no engine knob: {why}"
        )
    named = [k for k in diag["knobs"] if k in cand and k not in tried]
    if not named:
        raise _Stop(
            "plateau: no knob the diagnosis names "
            f"({', '.join(diag['knobs'])}) has candidates left that help"
        )
    return named[0]


def _sweep_step(
    model: str,
    knob: str,
    n: int,
    values: Sequence[Any],
    state: _State,
    cfg: SweepConfig,
    budget: _Budget,
    patience: int,
    plateau: float,
) -> TuneStep:
    obj = cfg.objective
    cur = state.knobs.get(knob)
    if cur is None:
        cur = knobs_mod.default(knob, gpu_memory_gib=cfg.gpu_gib(), entry="serve")
    move = (state.diag.get("moves") or {}).get(knob)
    step = TuneStep(n, "sweep", obj, knob=knob, move=move, from_value=cur)
    step.score_before, step.spread_before = state.score, state.kept.spread(obj)
    step.diagnosis_before, step.knobs_after = state.diag, dict(state.knobs)
    todo = order_candidates(values, cur, move)
    if not todo:
        step.kind, step.reason = "skip", f"no candidate to {move} {knob} from {cur}"
        return step
    try:
        tag = f"tune-step-{n}"
        kw = {"base_knobs": state.knobs, "patience": patience, "tag": tag, **budget.hooks(cfg)}
        recs = sweep(model, knob, todo, **kw)
    except knobs_mod.KnobError as exc:
        step.kind, step.reason = "skip", str(exc)
        return step
    if not recs:  # the budget stopped the sweep before its first new point
        raise _Stop(budget.hit[-1] if budget.hit else f"{knob}: no point ran")
    points = [as_point(r) for r in recs]
    d = decide(
        points, state.score, objective=obj, plateau=plateau, current_spread=state.kept.spread(obj)
    )
    step.values_tried = [p.value for p in points]
    step.values_not_run = [v for v in todo if v not in step.values_tried]
    step.results = [_result(p, obj) for p in points]
    step.decision, step.decision_why, step.kept = d.decision, d.why, d.kept
    step.gain = None if d.gain is None else (str(d.gain) if math.isinf(d.gain) else d.gain)
    step.margin, step.spread_best = d.margin, d.best.spread(obj) if d.best else None
    if d.best is not None:
        step.best_value, step.score_best = d.best.value, d.best.objective(obj)
    if d.kept and d.best is not None:
        state.knobs, state.kept, state.score = dict(d.best.knobs), d.best, d.best.objective(obj)
        state.diag = d.best.diagnosis
        step.diagnosis_after = state.diag
    else:
        step.reverted = True
    step.knobs_after = dict(state.knobs)
    return step


def _summary(
    model: str,
    cfg: SweepConfig,
    state: _State | None,
    cand: Mapping[str, Any],
    plateau: float,
    stop_reason: str,
    steps: int,
    budget: _Budget,
    tune_path: Path,
) -> dict[str, Any]:
    knobs = state.knobs if state else {}
    ship = VllmServer(model, knobs, vllm_cmd=cfg.server_kwargs.get("vllm_cmd", ("vllm",)), port=0)
    sc = state.kept.scores() if state else None
    summary: dict[str, Any] = {
        "kind": "summary",
        "model": model,
        "objective": cfg.objective,
        "plateau": plateau,
        "knobs": knobs,
        "score": state.score if state else None,
        "spread": state.kept.spread(cfg.objective) if state else None,
        "gate_goodput": sc.gate_goodput if sc else None,
        "request_goodput": sc.request_goodput if sc else None,
        "diagnosis": state.diag if state else None,
        "next_knob": next_knob(state.diag if state else None, cand),
        "stop_reason": stop_reason,
        "stopped_on_budget": stop_reason.startswith("GPU budget"),
        "steps": steps,
        "gpu_minutes_spent": round(budget.spent_s / 60.0, 2),
        "serve_command": shlex.join(ship.ship_argv()),
        "label": objective_label(cfg.objective),
    }
    meets = summary["meets_slo"] = state.kept.meets_slo if state else None
    diag = state.diag if state else {}
    summary["outcome"] = loop_outcome(
        stop_reason,
        meets,
        summary["request_goodput"],
        cfg.workload.request_rate,
        swept_knobs(read_jsonl(tune_path)),
        list(diag.get("knobs") or []),
        moves=diag.get("moves") or {},
        kept_knobs=state.knobs if state else None,
    )
    append_jsonl(tune_path, summary)
    return summary
