"""One-knob sweeps: for each value, a fresh `vllm serve`, ``measure()`` on it, one record
appended to ``out_dir/points.jsonl`` at once, so an interrupted sweep resumes.

``couple=True``: vLLM 0.26.0 rejects max_num_batched_tokens < max_num_seqs, so a point's
effective max_num_batched_tokens is raised to max_num_seqs (when max_num_batched_tokens is
swept, max_num_seqs is lowered to it). ``prevalidate=True``: every value passes
``knobs.validate`` (cross-knob rules included) before any server starts; False: each knob
alone, and vLLM judges the combination.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.diagnose import diagnose
from course_utils.core.keep import early_stop_reason, objective_label
from course_utils.core.metrics import load_series
from course_utils.core.records import (
    PointPaths,
    Scores,
    ServedPoint,
    Workload,
    append_jsonl,
    point_key,
)
from course_utils.core.slo import SLO, BenchResult, score
from course_utils.core.store import (
    POINTS_FILE,
    RUN_CHECKS,
    check_run_folder,
    is_present,
    read_records,
    read_text,
    set_aside,
)
from course_utils.lab.measure import MeasureConfig, diag_dict, measure
from course_utils.lab.server import ServerStartError, VllmServer, gpu_gib

__all__ = [
    "BASELINE",
    "POINTS_FILE",
    "SweepConfig",
    "check_values",
    "couple_knobs",
    "limits",
    "load_points",
    "progress_bar",
    "rescore",
    "run_point",
    "sweep",
]

BASELINE = "baseline"
_LIMITS = ("max_num_seqs", "max_num_batched_tokens")


@dataclass
class SweepConfig:
    """Everything a served point needs besides its knobs; ``SweepConfig.make(**kw)`` takes
    the keyword names the labs use."""

    workload: Workload
    slo: SLO | None
    out_dir: Path
    server_kwargs: dict[str, Any] = field(default_factory=dict)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    couple: bool = False
    resume: bool = True
    retry_failed: bool = False
    objective: str = "request_goodput"
    gpu_memory_gib: float | None = None
    prevalidate: bool = True

    @classmethod
    def make(
        cls,
        *,
        bench_kwargs: Mapping[str, Any] | None = None,
        warmup_prompts: int | None = None,
        warmup_share: float | None = None,
        repeats: int | None = None,
        remeasure: int | None = None,
        metrics_interval_s: float | None = None,
        **kw: Any,
    ) -> SweepConfig:
        unknown = sorted(set(kw) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"unknown sweep option(s): {', '.join(unknown)}")
        m: dict[str, Any] = {
            "warmup_min_prompts": warmup_prompts,
            "warmup_share": warmup_share,
            "repeats": repeats,
            "remeasure": remeasure,
            "metrics_interval_s": metrics_interval_s,
        }
        m = {k: v for k, v in m.items() if v is not None}
        m["bench_kwargs"] = dict(bench_kwargs or {})
        kw["out_dir"] = Path(kw["out_dir"])
        kw["server_kwargs"] = dict(kw.get("server_kwargs") or {})
        kw.setdefault("measure", MeasureConfig(**m))
        return cls(**kw)

    def gpu_gib(self) -> float:
        return gpu_gib(self.gpu_memory_gib)


def load_points(path: str | Path) -> list[dict[str, Any]]:
    """Records of a points.jsonl (or its folder); a bad line raises BadInput naming it."""
    p = Path(path)
    return read_records(
        p / POINTS_FILE if p.is_dir() else p, need="key", check=RUN_CHECKS[POINTS_FILE]
    )


def limits(knobs: Mapping[str, Any], gpu_gib: float) -> tuple[int, int]:
    """max_num_seqs and max_num_batched_tokens as served (set, else vLLM's `serve` default)."""
    given = {k: v for k, v in knobs.items() if v is not None}
    eff = knobs_mod.effective(given, _LIMITS, gpu_memory_gib=gpu_gib)
    return int(eff["max_num_seqs"]), int(eff["max_num_batched_tokens"])


def couple_knobs(
    values: Mapping[str, Any], swept: str | None, gpu_gib: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Apply the couple=True policy; return (knobs, what was changed)."""
    out = dict(values)
    if "max_num_seqs" not in out and "max_num_batched_tokens" not in out:
        return out, {}
    seqs, tokens = limits(out, gpu_gib)
    if tokens >= seqs:
        return out, {}
    if swept == "max_num_batched_tokens":
        out["max_num_seqs"] = tokens
        return out, {"max_num_seqs": tokens}
    out["max_num_batched_tokens"] = seqs
    return out, {"max_num_batched_tokens": seqs}


def progress_bar(total: int, desc: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=True) if enabled else None


def validate_each(values: Mapping[str, Any]) -> dict[str, Any]:
    """knobs.validate one knob at a time: names, types, ranges; no cross-knob rule."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        out.update(knobs_mod.validate({k: v}, entry="serve"))
    return out


def check_values(
    knob: str,
    values: Sequence[Any],
    base: Mapping[str, Any],
    couple: bool,
    gpu_gib: float,
    prevalidate: bool = True,
) -> list[tuple[Any, dict[str, Any], dict[str, Any]]]:
    """knobs.validate every point before any server starts; raise KnobError (one line)."""
    name = knobs_mod.get(knob).name if knob != BASELINE else BASELINE
    out = []
    for v in values:
        merged = {**base, name: v} if name != BASELINE else dict(base)
        coupled: dict[str, Any] = {}
        try:
            if prevalidate:
                checked = knobs_mod.validate(merged, entry="serve")
            else:
                checked = validate_each(merged)
            if couple:
                checked, coupled = couple_knobs(checked, name, gpu_gib)
            if prevalidate:
                checked = knobs_mod.validate(checked, gpu_memory_gib=gpu_gib, entry="serve")
        except knobs_mod.KnobError as exc:
            label = f"{name}={v!r}" if name != BASELINE else "base knobs"
            hint = (
                " (couple=True raises max_num_batched_tokens with max_num_seqs)"
                if not couple and "max_num_batched_tokens" in str(exc)
                else ""
            )
            raise knobs_mod.KnobError(f"{label}: {exc}{hint}") from None
        value = checked.get(name, v) if name != BASELINE else None
        out.append((value, checked, coupled))
    return out


def run_point(
    model: str, point: ServedPoint, cfg: SweepConfig, on_window: Callable[[Any], None] | None = None
) -> ServedPoint:
    """Serve ``point.knobs`` on a fresh server, ``measure()`` it, stop the server; fill in and
    return ``point`` (a failure sets status "failed" and a one-line reason; never raises for
    a bad point; KeyboardInterrupt propagates after the server is stopped)."""
    paths = PointPaths.of(cfg.out_dir, point.key)
    paths.dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    kw = dict(log_path=paths.server_log, check_knobs=cfg.prevalidate, **cfg.server_kwargs)
    srv = VllmServer(model, point.knobs, **kw)
    point.serve_cmd = shlex.join(srv.argv)
    mns, mnbt = limits(point.knobs, cfg.gpu_gib())
    bench_kw = {"vllm_cmd": srv.vllm_cmd, **dict(cfg.measure.bench_kwargs)}
    mcfg = replace(cfg.measure, bench_kwargs=bench_kw)
    try:
        with srv:
            point.startup_s = round(srv.startup_s or 0.0, 2)
            point.warmup, point.windows = measure(
                srv,
                model,
                cfg.workload,
                cfg.slo,
                paths,
                cfg=mcfg,
                max_num_seqs=mns,
                max_num_batched_tokens=mnbt,
                on_window=on_window,
            )
    except ServerStartError as exc:
        point.status, point.reason = "failed", exc.reason
    else:
        ok = any(w.ok for w in point.windows)
        last = point.windows[-1].reason if point.windows else None
        warm = point.warmup.reason if point.warmup else None
        point.status = "ok" if ok else "failed"
        point.reason = None if ok else last or warm or "no window"
    point.elapsed_s = round(time.monotonic() - t0, 2)
    return point


def _done_points(
    points_path: Path, cfg: SweepConfig
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The records on disk to resume from, by key: those scored under cfg.slo, and those
    scored under another SLO (to re-score). None without cfg.resume; failed ones left out
    with cfg.retry_failed. A bad line raises BadInput naming the file and line."""
    if not cfg.resume:
        return {}, {}
    slo = str(cfg.slo)
    same: dict[str, dict[str, Any]] = {}
    other: dict[str, dict[str, Any]] = {}
    for r in read_records(points_path, need="key", torn_ok=True, check=RUN_CHECKS[POINTS_FILE]):
        if cfg.retry_failed and r.get("status") == "failed":
            continue
        (same if r.get("slo", slo) == slo else other)[r["key"]] = r
    return same, other


def rescore(rec: Mapping[str, Any], cfg: SweepConfig) -> dict[str, Any] | None:
    """A point scored under another SLO, scored under ``cfg.slo`` from its saved bench JSONs
    and /metrics series; None when they cannot give the score (then it is measured again)."""
    if rec.get("status") != "ok" or cfg.slo is None:
        return None
    p = ServedPoint.from_json(rec)
    paths = PointPaths.of(cfg.out_dir, p.key)
    mns, mnbt = limits(p.knobs, cfg.gpu_gib())
    sources = set()
    for w in p.windows:
        if w.status != "ok":
            continue
        path = paths.bench_json(w.index)
        if not is_present(path):
            return None
        try:
            res = BenchResult.from_json(json.loads(read_text(path)))
        except (ValueError, OSError):
            return None
        sc = score(res, cfg.slo)
        if sc.request_goodput is None:
            return None
        sources.add(sc.request_goodput_source)
        w.score = Scores.from_json(vars(sc))
        series = paths.metrics(w.index)
        samples = load_series(series) if is_present(series) else []
        if samples:
            d = diagnose(samples, res, cfg.slo, max_num_seqs=mns, max_num_batched_tokens=mnbt)
            w.diagnosis = diag_dict(d)
    p.slo = str(cfg.slo)
    out = p.to_json()
    out["rescored"] = {
        "from_slo": rec.get("slo"),
        "how": "re-scored from the saved bench JSON (percentiles, per-request lists) and "
        "/metrics series; not measured again",
        "request_goodput_source": sorted(sources),
    }
    return out


def sweep(
    model: str,
    knob: str,
    values: Sequence[Any],
    *,
    base_knobs: Mapping[str, Any] | None = None,
    early_stop: bool = True,
    patience: int = 2,
    min_gain: float = 0.0,
    on_point: Callable[[dict[str, Any]], None] | None = None,
    stop_if: Callable[[], str | None] | None = None,
    progress: bool = True,
    tag: str | None = None,
    config: SweepConfig | None = None,
    **kw: Any,
) -> list[dict[str, Any]]:
    """Sweep one knob; return the point records in value order, resumed ones included.

    Served-point options go in ``config`` or as keywords (``SweepConfig.make``). Every value
    is validated before any server starts (knobs.KnobError). ``early_stop``: stop after
    ``patience`` points without an objective gain > ``min_gain``. ``on_point(record)`` runs
    after each new record; ``stop_if()`` is asked before each new point (a reason stops)."""
    cfg = config or SweepConfig.make(**kw)
    if isinstance(values, str | bytes) or not values:
        raise knobs_mod.KnobError(f"{knob}: give a non-empty list of values")
    if cfg.objective not in ("request_goodput", "gate"):
        raise ValueError(f"objective must be request_goodput or gate, not {cfg.objective!r}")
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    gpu_gib = cfg.gpu_gib()
    name = knobs_mod.get(knob).name if knob != BASELINE else BASELINE
    given = dict(base_knobs or {})
    base = knobs_mod.validate(given, entry="serve") if cfg.prevalidate else validate_each(given)
    planned = check_values(name, values, base, cfg.couple, gpu_gib, cfg.prevalidate)
    points_path = cfg.out_dir / POINTS_FILE
    check_run_folder(cfg.out_dir, resume=cfg.resume)
    done, other = _done_points(points_path, cfg)
    records: list[dict[str, Any]] = []
    bar = progress_bar(len(planned), f"sweep {name}", progress)
    try:
        for value, checked, coupled in planned:
            pt = _new_point(model, name, value, checked, base, coupled, cfg, tag)
            key = pt.key
            again = rescore(other[key], cfg) if key in other and key not in done else None
            if again is not None:  # another SLO's point: a new line, the old one stays
                append_jsonl(points_path, again)
                done[key] = again
            if key not in done:
                reason = stop_if() if stop_if else None
                if reason:
                    if bar is not None:
                        bar.set_postfix_str(f"stopped: {reason}")
                    break
                set_aside(PointPaths.of(cfg.out_dir, key).dir)  # an earlier attempt's files
                rec = run_point(model, pt, cfg).to_json()
                append_jsonl(points_path, rec)
                done[key] = rec
                if on_point is not None:
                    on_point(rec)
            records.append(done[key])
            _tick(bar, name, value, ServedPoint.from_json(done[key]), cfg.objective)
            why = early_stop and early_stop_reason(records, patience, min_gain, cfg.objective)
            if why:
                if bar is not None:
                    bar.set_postfix_str(f"early stop: {why}")
                break
    finally:
        if bar is not None:
            bar.close()
    return records


def _new_point(
    model: str,
    name: str,
    value: Any,
    checked: dict[str, Any],
    base: dict[str, Any],
    coupled: dict[str, Any],
    cfg: SweepConfig,
    tag: str | None,
) -> ServedPoint:
    """A point to measure; its key hashes everything that changes what is measured."""
    w = cfg.workload.to_dict()
    key = point_key(
        {
            "model": model,
            "knob": name,
            "value": value,
            "base": {k: v for k, v in sorted(base.items()) if k != name},
            "workload": w,
            "server": {
                "load_format": cfg.server_kwargs.get("load_format"),
                "extra_args": list(cfg.server_kwargs.get("extra_args", ())),
            },
            "effective": dict(sorted(checked.items())),
        }
    )
    p = ServedPoint(key, name, value, checked, w, str(cfg.slo), "running", tag=tag, model=model)
    p.base_knobs, p.coupled, p.time = base, coupled, time.strftime("%Y-%m-%dT%H:%M:%S")
    return p


def _tick(bar: Any, name: str, value: Any, p: ServedPoint, objective: str) -> None:
    if bar is None:
        return
    what = f"{objective_label(objective)}={p.objective(objective):.2f}" if p.ok else p.status
    bar.set_postfix_str(f"{name}={value} {what}")
    bar.update(1)
