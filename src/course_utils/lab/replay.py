"""Replay of recorded runs, what the lab pages and CI read back: records with their validity
re-checked from the recorded /metrics series (``load_knee``, ``load_points_checked``), the
loop's kept configuration re-derived under either objective (``replay_tune``), a run's device
minutes, and the environment record.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core.keep import (
    as_point,
    decide,
    loop_outcome,
    next_knob,
    objective_value,
    pick_knee,
    tied,
)
from course_utils.core.metrics import load_series
from course_utils.core.records import PointPaths, ServedPoint, Workload, is_present
from course_utils.core.records import read_jsonl as load_jsonl
from course_utils.core.store import POINTS_FILE, TUNE_FILE, read_records, tune_summary
from course_utils.core.validate import BadInput
from course_utils.core.validity import (
    prefix_cache_hit_rate,
    prefix_cache_issue,
    warmed_peak,
    warmup_issue,
)
from course_utils.core.workload import workload_from_dict
from course_utils.lab.knee import BATCH1_FILE, KNEE_FILE, latest_by_rate, rate_key

__all__ = [
    "BATCH1_FILE",
    "KNEE_FILE",
    "recheck",
    "load_knee",
    "load_points_checked",
    "model_shape",
    "MODEL_CONFIG_FILE",
    "recorded_objective",
    "replay_tune",
    "tune_summary",
    "point_files",
    "environment",
    "repo_root",
    "measured_minutes",
    "device_calls",
    "run_label",
]


def recheck(rec: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """``rec`` with its windows' prefix-cache and warm-up coverage checks re-derived from the
    series and peaks recorded in ``folder``; other recorded issues stay."""
    out = dict(rec)
    if out.get("status") != "ok":
        out["valid"] = False
        return out
    paths = PointPaths(folder)
    wl = workload_from_dict(out["workload"]) if out.get("workload") else None
    if "windows" in out:
        warm = out.get("warmup") or {}
        covered = warm.get("running_max") if warm.get("status") == "ok" else None
        windows = []
        for w in out["windows"]:  # as measure() does: each window warms the next one
            windows.append(_recheck_window(dict(w), paths.metrics(int(w["index"])), wl, covered))
            if w.get("status") == "ok":
                peak = (w.get("load") or {}).get("running_max") or 0.0
                covered = warmed_peak(covered, peak)
        out["windows"] = windows
        return ServedPoint.from_json(out).to_json()
    return _recheck_window(out, paths.metrics(0), wl)


def _recheck_window(
    w: dict[str, Any], series: Path, wl: Workload | None, covered: float | None = None
) -> dict[str, Any]:
    if w.get("status") != "ok":
        return w
    issues = [
        i
        for i in (w.get("validity_issues") or [])
        if not str(i).startswith(("prefix cache hit rate", "the warm-up ran at most"))
    ]
    cover = warmup_issue(covered, (w.get("load") or {}).get("running_max"))
    if cover:
        issues.append(cover)
    hit = w.get("prefix_cache_hit_rate")
    if is_present(series):
        hit = prefix_cache_hit_rate(load_series(series))
    why = prefix_cache_issue(hit, wl) if wl else None
    if why:
        issues.append(why)
    w.update(valid=not issues, validity_issues=issues, prefix_cache_hit_rate=hit)
    return w


def load_knee(
    results_dir: str | Path, rates: Sequence[float] | None = None
) -> list[dict[str, Any]]:
    """knee.jsonl records, the last of each rate (only ``rates`` when given), validity
    re-checked from each rate's recorded /metrics series (``knee/rate-<r>/``)."""
    d = Path(results_dir)
    want = None if rates is None else {rate_key(r) for r in rates}
    return [
        recheck(r, d / "knee" / f"rate-{rk}")
        for rk, r in latest_by_rate(read_records(d / KNEE_FILE, need="rate_key")).items()
        if want is None or rk in want
    ]


def load_points_checked(results_dir: str | Path) -> list[dict[str, Any]]:
    """points.jsonl records, validity re-checked from each point's recorded series."""
    from course_utils.lab.sweep import load_points

    d = Path(results_dir)
    return [recheck(p, PointPaths.of(d, str(p.get("key"))).dir) for p in load_points(d)]


MODEL_CONFIG_FILE = "model_config.json"


def model_shape(
    model: str,
    results_dir: str | Path | None = None,
    resolve: Callable[[str], Path] = Path,
    save: bool = False,
) -> Any:
    """The model's shape (``core.capacity``) from a local folder (``resolve`` turns a parameter
    into a path), a shipped config name or HF id ending in one, or on replay the
    ``model_config.json`` a GPU run saved in ``results_dir`` (``save=True`` writes it)."""
    from course_utils.core import capacity

    local = resolve(model)
    saved = Path(results_dir) / MODEL_CONFIG_FILE if results_dir is not None else None
    if local.is_dir() and (local / "config.json").is_file():
        if save and saved is not None:
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_bytes((local / "config.json").read_bytes())
        return capacity.load_model(str(local))
    try:
        return capacity.load_model(model)  # a shipped config name or HF id ending in one
    except ValueError:
        if saved is None or not saved.is_file():
            raise ValueError(
                f"model {model!r}: no local folder with config.json, not a "
                f"shipped config ({', '.join(capacity.MODELS)}), and no "
                f"{MODEL_CONFIG_FILE} in {results_dir}"
            ) from None
    import dataclasses

    return dataclasses.replace(capacity.load_model(str(saved)), name=Path(model).name or "model")


def point_files(results_dir: str | Path, rec: Mapping[str, Any]) -> dict[str, Path]:
    """A point's files, found by key under ``results_dir``."""
    pp = PointPaths.of(results_dir, str(rec.get("key")))
    return {
        "server_log": pp.server_log,
        "bench_json": pp.bench_json(),
        "bench_log": pp.bench_log(),
        "metrics": pp.metrics(),
    }


def recorded_objective(results_dir: str | Path) -> str:
    """The objective a recorded loop ran under: the summary's, else params.json's, else
    "gate" (the only one before the parameter existed)."""
    params = Path(results_dir) / "params.json"
    recorded = json.loads(params.read_text()) if params.is_file() else {}
    summary = tune_summary(results_dir) or {}
    return str(summary.get("objective") or recorded.get("objective") or "gate")


def replay_tune(
    results_dir: str | Path, plateau: float = 0.02, objective: str = "request_goodput"
) -> dict[str, Any]:
    """The kept knobs re-derived from tune.jsonl's steps and the re-checked points with
    ``keep.decide`` (tune's keep rule) under ``objective``: under the run's own objective it
    gives what the run chose; under another the path may leave the recorded one, and the
    replay stops there (``diverged``). Each step has its "decision"; "outcome" is
    ``keep.loop_outcome`` (no_result when diverged or the run recorded no summary)."""
    d = Path(results_dir)
    points = [as_point(r) for r in load_points_checked(d)]
    steps = [
        s
        for s in read_records(d / TUNE_FILE, need="kind")
        if s.get("kind") in ("baseline", "sweep")
    ]
    kept = _baseline(d, points, steps)
    trail = [{"step": 0, **_state(kept, objective)}]
    diverged = None
    for s in steps[1:]:
        recs = _step_points(points, s)
        diverged = _divergence(s, kept, recs)
        if diverged:
            break
        dec = decide(
            recs,
            objective_value(kept, objective),
            objective=objective,
            plateau=plateau,
            current_spread=kept.spread(objective),
        )
        if dec.kept and dec.best is not None:
            kept = dec.best
        gain = str(dec.gain) if dec.gain is not None and math.isinf(dec.gain) else dec.gain
        trail.append(
            {
                "step": s["step"],
                "knob": s["knob"],
                "kept": dec.kept,
                "decision": dec.decision,
                "why": dec.why,
                "best_value": dec.best.value if dec.best else None,
                "gain": gain,
                "results": [_result_row(p, objective) for p in recs],
                **_state(kept, objective),
            }
        )
    diag = kept.diagnosis
    scores = _scores(kept, objective)
    summary = tune_summary(d) or {}
    rate = kept.workload.get("request_rate")
    tried = [str(s["knob"]) for s in steps[1 : len(trail)]]
    outcome = loop_outcome(
        str(summary.get("stop_reason") or ""),
        kept.meets_slo if diverged is None and summary else None,
        scores["request_goodput"],
        None if rate is None else float(rate),
        tried,
        diag.get("knobs") or [],
        moves=diag.get("moves") or {},
        kept_knobs=kept.knobs,
    )
    return {
        "objective": objective,
        "plateau": plateau,
        "knobs": dict(kept.knobs),
        **scores,
        "diagnosis": {
            k: diag.get(k) for k in ("constraint", "leaf", "knobs", "moves", "why_en", "why_zh")
        },
        "next_knob": next_knob(diag),
        "diverged": diverged,
        "outcome": outcome,
        "steps": trail,
    }


def run_findings(results_dir: str | Path, objective: str = "request_goodput") -> dict[str, Any]:
    """What one lab 02 run found, to set beside a run on another workload: the knee (the
    range its valid rates support), the binding constraint at the loop's baseline, the kept
    knobs with their score and spread, every configuration measured, and those tied with
    the kept one (``keep.tied``)."""
    d = Path(results_dir)
    points = [as_point(r) for r in load_points_checked(d) if r.get("status") == "ok"]
    knee = pick_knee(load_knee(d), points=points) if is_present(d / KNEE_FILE) else None
    found: dict[str, Any] = {
        "knee": None if knee is None else [knee["knee_rate"], knee["overloaded_rate"]],
        "knee_why": None if knee is None else knee["why"],
    }
    if not is_present(d / TUNE_FILE):  # the knee scan ran, the loop did not (yet)
        none = ("rate", "baseline_constraint", "knobs", "score", "spread")
        return {**found, **dict.fromkeys(none), "measured": [], "tied_with": [], "outcome": None}
    rep = replay_tune(d, objective=objective)
    valid = [p for p in points if p.valid]
    kept = next((p for p in valid if p.knobs == rep["knobs"]), None)
    return {
        **found,
        "rate": None if kept is None else kept.workload.get("request_rate"),
        "baseline_constraint": rep["steps"][0]["constraint"],
        "knobs": rep["knobs"],
        "score": rep["score"],
        "spread": None if kept is None else kept.spread(objective),
        "measured": [p.knobs for p in valid],
        "tied_with": [
            p.knobs
            for p in valid
            if kept is not None and p.key != kept.key and tied(p, kept, objective)
        ],
        "outcome": rep["outcome"]["outcome"],
    }


def _baseline(d: Path, points: list[ServedPoint], steps: list[dict[str, Any]]) -> ServedPoint:
    """The loop's measured baseline point (BadInput when the run has none)."""
    if not steps or steps[0]["kind"] != "baseline":
        raise BadInput(
            f"{d / TUNE_FILE}: no baseline step (the loop stopped before it, or the file is cut)",
            "replay a folder whose loop measured its baseline",
        )
    base = next((p for p in points if p.key == steps[0].get("point")), None)
    if base is None or base.status != "ok":
        raise BadInput(
            f"{d / POINTS_FILE}: the baseline point {steps[0].get('point')} is "
            + ("missing" if base is None else f"failed ({base.reason})"),
            "replay a folder whose baseline was measured",
        )
    return base


def _step_points(points: list[ServedPoint], step: dict[str, Any]) -> list[ServedPoint]:
    """The points a recorded tune step measured, in the order it tried them."""
    knob, order = step["knob"], list(step.get("values_tried", []))
    tag = f"tune-step-{step['step']}"
    recs = (p for p in points if p.tag == tag and p.knob == knob and p.value in order)
    return sorted(recs, key=lambda p: order.index(p.value))


def _divergence(step: dict[str, Any], kept: ServedPoint, recs: list[ServedPoint]) -> str | None:
    """Why the replay cannot follow ``step`` from ``kept`` (None when it can)."""
    knob = step["knob"]
    others = {k: v for k, v in kept.knobs.items() if k != knob}
    measured_from = [{k: v for k, v in p.base_knobs.items() if k != knob} for p in recs]
    if knob in (kept.diagnosis.get("knobs") or []) and all(m == others for m in measured_from):
        return None
    was = measured_from[0] if measured_from else "?"
    return (
        f"step {step['step']} ({knob}) was measured from knobs {was}; this replay "
        f"is at {kept.knobs} with diagnosis {kept.diagnosis.get('leaf')}: the "
        "recorded run never measured this path further"
    )


def _state(p: ServedPoint, objective: str) -> dict[str, Any]:
    """The loop's state at a step: the kept knobs, their scores and diagnosis."""
    d = p.diagnosis
    return {
        "knobs": dict(p.knobs),
        **_scores(p, objective),
        "constraint": d.get("constraint"),
        "leaf": d.get("leaf"),
    }


def _result_row(p: ServedPoint, objective: str) -> dict[str, Any]:
    return {
        "value": p.value,
        "valid": p.valid,
        **_scores(p, objective),
        "meets_slo": p.meets_slo,
        "spread": p.spread(objective),
        "constraint": p.diagnosis.get("constraint"),
    }


def _scores(p: ServedPoint, objective: str) -> dict[str, Any]:
    sc = p.scores()
    return {
        "score": objective_value(p, objective),
        "gate_goodput": sc.gate_goodput if sc else None,
        "request_goodput": sc.request_goodput if sc else None,
    }


def repo_root(start: str | Path | None = None) -> Path | None:
    """The course repo above ``start`` (default: the cwd), found by labs/data/; else None."""
    base = Path(start or Path.cwd()).resolve()
    for d in (base, *base.parents):
        if (d / "labs" / "data" / "small_eval.jsonl").is_file():
            return d
    return None


def run_label(run_dir: str | Path) -> str:
    """'H200, 2026-11-29' from a results folder named ``h200-2026-11-29``."""
    name = Path(run_dir).name
    gpu, _, date = name.partition("-")
    return f"{gpu.upper()}, {date}" if date else name


def device_calls(run_dir: str | Path) -> list[dict[str, Any]]:
    """Each lab notebook call in a run's ``commands.log`` (tools/gpu/run_lab.sh: a
    ``... $ <command>`` line, then ``... rc=N wall=Ss``), in order: ``{"lab": "knobs" |
    "slo", "wall_s", "rc"}``; other commands are left out."""
    log = Path(run_dir) / "commands.log"
    calls: list[dict[str, Any]] = []
    current = None
    for line in log.read_text().splitlines() if log.is_file() else []:
        if " $ " in line:
            current = (
                "knobs" if "01_knob_sweep" in line else "slo" if "02_slo_loop" in line else None
            )
        elif current and " wall=" in line:
            rc = re.search(r" rc=(-?\d+)", line)
            calls.append(
                {
                    "lab": current,
                    "rc": int(rc.group(1)) if rc else None,
                    "wall_s": float(line.rsplit("wall=", 1)[1].rstrip("s")),
                }
            )
            current = None
    return calls


def measured_minutes(run_dir: str | Path) -> dict[str, float | None]:
    """Device minutes per lab of a recorded run: ``device_calls`` summed per notebook, else
    the recorded per-point times (start-ups between them not counted)."""
    d = Path(run_dir)
    out: dict[str, float | None] = {"knobs": None, "slo": None}
    for c in device_calls(d):
        out[c["lab"]] = (out[c["lab"]] or 0.0) + c["wall_s"] / 60.0
    if out["knobs"] is None:
        recs = load_jsonl(d / "knobs" / "results.jsonl")
        if recs:
            out["knobs"] = sum(float(r.get("wall_s") or 0) for r in recs) / 60.0
    if out["slo"] is None:
        recs = load_jsonl(d / "slo" / POINTS_FILE) + load_jsonl(d / "slo" / KNEE_FILE)
        if recs:
            out["slo"] = sum(float(r.get("elapsed_s") or 0) for r in recs) / 60.0
    return out


def environment() -> dict[str, Any]:
    """Driver, GPU, CUDA, torch and vLLM versions of this machine (no import of vLLM when
    it is absent; never raises)."""
    env: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    cmd = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        smi = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        smi = ""
    env["nvidia_smi"] = smi.strip() or None
    for mod in ("torch", "vllm", "transformers"):
        try:
            m = __import__(mod)
            env[mod] = getattr(m, "__version__", "?")
        except Exception as exc:  # noqa: BLE001 - any import failure is "absent"
            env[mod] = None
            env[f"{mod}_error"] = f"{type(exc).__name__}: {exc}"[:200]
    try:
        import torch

        env["torch_cuda"] = torch.version.cuda
        env["cuda_available"] = bool(torch.cuda.is_available())
        if env["cuda_available"]:
            env["gpu"] = torch.cuda.get_device_name(0)
            env["gpu_memory_gib"] = round(
                torch.cuda.get_device_properties(0).total_memory / 2**30, 2
            )
    except Exception:  # noqa: BLE001
        pass
    names = "CUDA_VISIBLE_DEVICES VLLM_USE_MODELSCOPE HF_ENDPOINT VLLM_USE_FLASHINFER_SAMPLER"
    env["env"] = {k: os.environ[k] for k in names.split() if k in os.environ}
    return env


def check_folder(folder: str | Path) -> str:
    """What a recorded folder holds ("tune", "knee", "points" or "lab01"), every recorded
    file read strictly first (a bad line names its file and line). Raises BadInput."""
    from course_utils.core.store import RUN_CHECKS, RUN_FILES

    d = Path(folder)
    if not d.is_dir():
        what = "is a file" if d.exists() else "does not exist"
        raise BadInput(
            f"replay folder {d} {what}", "give a run folder (e.g. labs/results/<run>/slo)"
        )
    for name, need in RUN_FILES.items():
        read_records(d / name, need=need, check=RUN_CHECKS.get(name))
    if is_present(d / TUNE_FILE):
        return "tune"
    if is_present(d / KNEE_FILE):
        return "knee"
    if is_present(d / POINTS_FILE):
        if not read_records(d / POINTS_FILE):
            raise BadInput(
                f"{d / POINTS_FILE} is empty: no point was recorded", "replay a run that measured"
            )
        return "points"
    if is_present(d / "results.jsonl"):
        return "lab01"
    raise BadInput(
        f"{d} holds no recorded run (no {TUNE_FILE}, {KNEE_FILE} or {POINTS_FILE})",
        "give the folder a sweep, tune or knee run wrote",
    )


def _cmd_against(a: Any) -> int:
    """Two lab 02 runs on two workloads: what each found, and what differs."""
    from course_utils.core.keep import compare_findings

    for folder in (a.folder, a.against):
        if check_folder(folder) not in ("tune", "knee"):
            raise BadInput(
                f"{folder} holds no lab 02 run ({TUNE_FILE}, {KNEE_FILE})",
                "give two lab 02 folders",
            )
    fa, fb = run_findings(a.folder, a.objective), run_findings(a.against, a.objective)
    out = {"a": fa, "b": fb, "compare": compare_findings(fa, fb)}
    if a.format == "json":
        print(json.dumps(out, indent=2, default=str, ensure_ascii=False))
        return 0
    for name, f in (("a", fa), ("b", fb)):
        if f["knobs"] is None:
            print(f"{name}: knee {f['knee']}, loop not run")
            continue
        spread = "one window" if f["spread"] is None else f"spread {f['spread']:.1%}"
        print(
            f"{name}: knee {f['knee']}, binding at the start: {f['baseline_constraint']}, "
            f"kept {f['knobs']} ({f['score']:.2f}, {spread}), "
            f"tied with {f['tied_with'] or 'none'}"
        )
    print("; ".join(f"{k}: {v}" for k, v in out["compare"].items()))
    return 0


def _cmd_replay(a: Any) -> int:
    if a.against:
        return _cmd_against(a)
    kind = check_folder(a.folder)
    if kind == "lab01":
        raise BadInput(
            f"{a.folder} is a lab 01 folder (results.jsonl)",
            "replay it with lab 01: -p backend replay -p replay_dir " + str(a.folder),
        )
    if kind == "tune":
        out: Any = replay_tune(a.folder, plateau=a.plateau, objective=a.objective)
        text = [f"kept: {out['knobs']}", f"outcome: {out['outcome'].get('why')}"] + [
            f"step {s['step']}: {s.get('knob', 'baseline')} {s.get('decision', '')}".rstrip()
            for s in out["steps"]
        ]
    elif kind == "knee":
        out = pick_knee(load_knee(a.folder))
        text = [f"knee: {out.get('why')}"]
    else:
        out = load_points_checked(a.folder)
        text = [
            f"{p.get('knob')}={p.get('value')}: {p.get('status')}, valid={p.get('valid')}"
            for p in out
        ]
    if a.format == "json":
        print(json.dumps(out, indent=2, default=str, ensure_ascii=False))
    else:
        print("\n".join(text))
    return 0


def add_cli(subparsers: Any) -> None:
    """Register `replay`: re-derive a recorded folder's result (no GPU)."""
    from course_utils.core.keep import OBJECTIVES
    from course_utils.core.validate import non_negative_float

    r = subparsers.add_parser("replay", help="re-derive a recorded run's result (no GPU)")
    r.add_argument("folder", help="a run folder: tune.jsonl, knee.jsonl or points.jsonl")
    r.add_argument("--objective", choices=OBJECTIVES, default="request_goodput")
    r.add_argument("--plateau", type=non_negative_float, default=0.02)
    r.add_argument("--format", choices=("text", "json"), default="text")
    r.add_argument("--against", help="a second lab 02 folder, on another workload: compare them")
    r.set_defaults(func=_cmd_replay)
