"""What the two lab notebooks call beyond the harness: the knee scan, replay, plots, files.

- ``knee_scan``: lab 02 step 0. ONE `vllm serve` (server starts are the expensive part),
  one ``vllm bench serve`` per offered rate with /metrics sampled during each run, a
  diagnosis per rate; one JSON line per rate in ``knee.jsonl`` (resumable). Each rate gets
  its own bench seed (seed + its index in ``rates``): with one seed every rate replayed the
  same prompts into the prefix cache of the same server (97 % hits at rates 60/75/90 of
  the H200 run, which made them look far better than fresh servers).
- ``load_knee`` / ``load_points_checked``: recorded records with the measurement-validity
  checks re-run from the recorded /metrics series (so old records are judged by today's
  rules, e.g. the prefix-cache replay check).
- ``replay_tune``: re-derives the loop's kept configuration from the recorded points with
  ``keep.choose``, the keep rule of ``sweep.tune``, under either objective, so replay
  checks the analysis against what the GPU run chose and can say what another objective
  would have chosen on the same points.
- plots (matplotlib, Agg), results-folder discovery, and the environment record.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core.records import append_jsonl
from course_utils.core.records import read_jsonl as load_jsonl
from course_utils.lab.bench import WARMUP_PROMPTS

__all__ = [
    "BATCH1_FILE",
    "KNEE_FILE",
    "knee_scan",
    "knee_seed",
    "load_knee",
    "load_points_checked",
    "load_jsonl",
    "latest_results",
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

KNEE_FILE = "knee.jsonl"
BATCH1_FILE = "batch1.jsonl"


def _rate_key(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{float(rate):g}"


# --------------------------------------------------------------------------------------
# knee scan (lab 02 step 0)
# --------------------------------------------------------------------------------------


def knee_scan(
    model: str,
    rates: Sequence[float],
    *,
    workload: Any,
    slo: Any,
    out_dir: str | Path,
    base_knobs: Mapping[str, Any] | None = None,
    server_kwargs: Mapping[str, Any] | None = None,
    bench_kwargs: Mapping[str, Any] | None = None,
    warmup_prompts: int = WARMUP_PROMPTS,
    metrics_interval_s: float = 0.5,
    gpu_memory_gib: float | None = None,
    batch1_prompts: int = 0,
    progress: Callable[[str], None] | None = print,
) -> list[dict[str, Any]]:
    """Offered-rate scan on one server; returns records in ``rates`` order (resumed ones too).

    With ``batch1_prompts`` > 0 the same server also runs that many requests one at a time
    (``--max-concurrency 1``): the batch-1 TPOT to hold against the roofline floor
    (``capacity.tpot_floor_ms``), one line in ``batch1.jsonl``.

    Rate i is measured with bench seed ``workload.seed + i`` (``knee_seed``), the batch-1
    run with ``workload.seed + len(rates)``: all of them share one server and its prefix
    cache, so they must not send the same prompts. (vLLM's own ``vllm bench sweep serve``
    instead resets the caches between runs: vllm/benchmarks/sweep/server.py
    ``ServerProcess.reset_caches`` -> POST /reset_prefix_cache, which needs the server to
    run with VLLM_SERVER_DEV_MODE=1, a development mode this course does not turn on.)
    Every rate is checked for a prefix-cache replay anyway (``bench.prefix_cache_hit_rate``).
    """
    from dataclasses import replace

    from course_utils.core import knobs as knobs_mod
    from course_utils.core.diagnose import diagnose
    from course_utils.core.metrics import MetricsSampler, summarize
    from course_utils.core.slo import score
    from course_utils.core.validity import prefix_cache_hit_rate, validity_issues
    from course_utils.lab.bench import BenchError, run_bench, warmup
    from course_utils.lab.server import ServerStartError, VllmServer
    from course_utils.lab.server import gpu_memory_gib as _gpu_gib

    out = Path(out_dir)
    kdir = out / "knee"
    kdir.mkdir(parents=True, exist_ok=True)
    path = out / KNEE_FILE
    done = {r["rate_key"]: r for r in load_jsonl(path)}
    todo = [r for r in rates if _rate_key(r) not in done]
    b1_path = out / BATCH1_FILE
    need_b1 = batch1_prompts > 0 and not load_jsonl(b1_path)
    knobs = dict(base_knobs or {})
    gib = gpu_memory_gib if gpu_memory_gib is not None else (_gpu_gib() or 24.0)
    mns = knobs.get("max_num_seqs") or knobs_mod.default("max_num_seqs", gpu_memory_gib=gib)
    say = progress or (lambda _m: None)
    if todo or need_b1:
        srv = VllmServer(model, knobs, log_path=kdir / "serve.log", **dict(server_kwargs or {}))
        try:
            with srv:
                say(f"knee: server up in {srv.startup_s:.0f} s; rates {[_rate_key(r) for r in todo]}")
                warmup(srv.base_url, model, workload, num_prompts=warmup_prompts)
                for rate in todo:
                    rk = _rate_key(rate)
                    w = replace(workload, request_rate=float(rate),
                                seed=knee_seed(workload.seed, rates, rate))
                    rdir = kdir / f"rate-{rk}"
                    t0 = time.monotonic()
                    sampler = MetricsSampler(srv.metrics_url, interval_s=metrics_interval_s)
                    rec: dict[str, Any] = {"rate": rk, "rate_key": rk, "knobs": knobs,
                                           "server_startup_s": round(srv.startup_s or 0.0, 2),
                                           "workload": w.to_dict(), "slo": str(slo),
                                           "serve_cmd": shlex.join(srv.argv),
                                           "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
                    try:
                        with sampler:
                            res = run_bench(srv.base_url, model, w, slo, rdir, "bench.json",
                                            **dict(bench_kwargs or {}))
                    except BenchError as exc:
                        sampler.save_jsonl(rdir / "metrics.jsonl")
                        rec.update(status="failed", reason=f"bench failed: {exc.reason}")
                    else:
                        sampler.save_jsonl(rdir / "metrics.jsonl")
                        targets = {}
                        for pair in slo.goodput_args():
                            k, _, v = str(pair).partition(":")
                            targets[k] = float(v)
                        res.raw["goodput_slo"] = targets
                        sc = score(res, slo)
                        diag = diagnose(sampler.samples, res, slo, max_num_seqs=int(mns))
                        raw = res.raw
                        hit = prefix_cache_hit_rate(sampler.samples)
                        issues = validity_issues(raw, w, prefix_cache_hit_rate=hit)
                        rec.update(
                            status="ok", reason=None, valid=not issues,
                            validity_issues=issues, prefix_cache_hit_rate=hit,
                            request_throughput=raw.get("request_throughput"),
                            request_goodput=sc.request_goodput,
                            gate_goodput=sc.gate_goodput, meets_slo=sc.meets_slo,
                            violations=list(sc.violations),
                            output_throughput=raw.get("output_throughput"),
                            p99_ttft_ms=res.percentile("ttft", 99),
                            p99_tpot_ms=res.percentile("tpot", 99),
                            max_concurrent_requests=raw.get("max_concurrent_requests"),
                            load=summarize(sampler.samples).as_dict(),
                            diagnosis={**diag.as_dict(), "why_en": diag.why("en"),
                                       "why_zh": diag.why("zh")},
                        )
                    rec["elapsed_s"] = round(time.monotonic() - t0, 2)
                    append_jsonl(path, rec)
                    done[rk] = rec
                    say(f"knee: rate {rk} (seed {w.seed}): " + (
                        f"{rec['request_throughput']:.2f} req/s done, vLLM goodput "
                        f"{(rec['request_goodput'] or 0):.2f}, gate {rec['gate_goodput']:.2f}, "
                        f"{rec['diagnosis']['constraint']}"
                        + ("" if rec["valid"] else f" INVALID: {'; '.join(rec['validity_issues'])}")
                        if rec["status"] == "ok" else rec["reason"]))
                if need_b1:
                    w1 = replace(workload, num_prompts=batch1_prompts, request_rate=math.inf,
                                 max_concurrency=1, seed=workload.seed + len(rates))
                    b1: dict[str, Any] = {"workload": w1.to_dict(), "knobs": knobs,
                                          "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
                    try:
                        res = run_bench(srv.base_url, model, w1, slo, kdir / "batch1",
                                        "bench.json", **dict(bench_kwargs or {}))
                    except BenchError as exc:
                        b1.update(status="failed", reason=f"bench failed: {exc.reason}")
                    else:
                        raw = res.raw
                        b1.update(status="ok", reason=None,
                                  **{k: raw.get(k) for k in ("median_tpot_ms", "mean_tpot_ms",
                                                             "p99_tpot_ms", "median_itl_ms",
                                                             "completed")})
                    append_jsonl(b1_path, b1)
                    say(f"batch 1: median TPOT {b1.get('median_tpot_ms')} ms"
                        if b1["status"] == "ok" else f"batch 1: {b1['reason']}")
        except ServerStartError as exc:
            for rate in todo:
                rk = _rate_key(rate)
                if rk not in done:
                    rec = {"rate": rk, "rate_key": rk, "knobs": knobs, "status": "failed",
                           "reason": exc.reason}
                    append_jsonl(path, rec)
                    done[rk] = rec
    return [done[_rate_key(r)] for r in rates if _rate_key(r) in done]


def knee_seed(seed: int, rates: Sequence[float], rate: float) -> int:
    """The bench seed of ``rate`` in a knee scan: ``seed`` + its index in ``rates``."""
    keys = [_rate_key(r) for r in rates]
    return int(seed) + keys.index(_rate_key(rate))


def _recheck(rec: dict[str, Any], metrics_path: Path) -> dict[str, Any]:
    """``rec`` with ``valid``/``validity_issues``/``prefix_cache_hit_rate`` re-derived: the
    recorded issues plus the prefix-cache replay check computed from the recorded series."""
    from course_utils.core.metrics import load_series
    from course_utils.core.records import Workload
    from course_utils.core.validity import prefix_cache_hit_rate, prefix_cache_issue

    out = dict(rec)
    if out.get("status") != "ok":
        out["valid"] = False
        return out
    issues = [i for i in (out.get("validity_issues") or [])
              if not str(i).startswith("prefix cache hit rate")]
    hit = out.get("prefix_cache_hit_rate")
    if metrics_path.is_file():
        hit = prefix_cache_hit_rate(load_series(metrics_path))
    wl = out.get("workload")
    if wl:
        why = prefix_cache_issue(hit, Workload.from_dict(wl))
        if why:
            issues.append(why)
    out.update(valid=not issues, validity_issues=issues, prefix_cache_hit_rate=hit)
    return out


def load_knee(results_dir: str | Path, rates: Sequence[float] | None = None
              ) -> list[dict[str, Any]]:
    """knee.jsonl records (only ``rates`` when given), validity re-checked from each rate's
    recorded /metrics series (``knee/rate-<r>/metrics.jsonl``)."""
    d = Path(results_dir)
    want = None if rates is None else {_rate_key(r) for r in rates}
    return [_recheck(r, d / "knee" / f"rate-{r['rate_key']}" / "metrics.jsonl")
            for r in load_jsonl(d / KNEE_FILE) if want is None or r["rate_key"] in want]


def load_points_checked(results_dir: str | Path) -> list[dict[str, Any]]:
    """points.jsonl records, validity re-checked from each point's recorded series."""
    from course_utils.lab.sweep import load_points

    d = Path(results_dir)
    return [_recheck(p, point_files(d, p)["metrics"]) for p in load_points(d)]








# --------------------------------------------------------------------------------------
# results folders and replay
# --------------------------------------------------------------------------------------


def latest_results(root: str | Path = "labs/results", prefix: str = "", need: str = "") -> Path | None:
    """Newest ``<gpu>-<date>`` folder under ``root`` (by name; dates sort), optionally one
    that contains ``need`` (e.g. "slo/tune.jsonl")."""
    r = Path(root)
    if not r.is_dir():
        return None
    found = sorted(p for p in r.iterdir() if p.is_dir() and p.name.startswith(prefix)
                   and (not need or (p / need).exists()))
    return found[-1] if found else None


MODEL_CONFIG_FILE = "model_config.json"


def model_shape(model: str, results_dir: str | Path | None = None,
                resolve: Callable[[str], Path] = Path, save: bool = False) -> Any:
    """The model's shape (course_utils.core.capacity) for a lab's memory arithmetic.

    ``model`` is a local folder (``resolve`` turns a parameter into a path), a shipped
    config name or HF id ending in one (``Qwen/Qwen2.5-7B-Instruct-AWQ``), or, on replay of
    a run whose model folder stayed on the GPU host, the ``model_config.json`` the run saved
    in ``results_dir``. ``save=True`` (a GPU run) copies a local folder's config.json there.
    """
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
            raise ValueError(f"model {model!r}: no local folder with config.json, not a "
                             f"shipped config ({', '.join(capacity.MODELS)}), and no "
                             f"{MODEL_CONFIG_FILE} in {results_dir}") from None
    import dataclasses

    return dataclasses.replace(capacity.load_model(str(saved)), name=Path(model).name or "model")


def point_files(results_dir: str | Path, rec: Mapping[str, Any]) -> dict[str, Path]:
    """A point's files, found by key under ``results_dir`` (recorded paths are absolute
    on the machine that ran it)."""
    pdir = Path(results_dir) / "points" / str(rec.get("key"))
    return {"server_log": pdir / "serve.log", "bench_json": pdir / "bench.json",
            "bench_log": pdir / "bench.log", "metrics": pdir / "metrics.jsonl"}


def tune_summary(results_dir: str | Path) -> dict[str, Any] | None:
    recs = [r for r in load_jsonl(Path(results_dir) / "tune.jsonl") if r.get("kind") == "summary"]
    return recs[-1] if recs else None


def recorded_objective(results_dir: str | Path) -> str:
    """The objective a recorded loop ran under: the summary's, else params.json's, else
    "gate" (runs before the `objective` parameter existed kept values by the p99 gate)."""
    d = Path(results_dir)
    s = tune_summary(d) or {}
    if s.get("objective"):
        return str(s["objective"])
    params = d / "params.json"
    if params.is_file():
        obj = json.loads(params.read_text()).get("objective")
        if obj:
            return str(obj)
    return "gate"


def replay_tune(results_dir: str | Path, plateau: float = 0.02,
                objective: str = "request_goodput") -> dict[str, Any]:
    """Re-derive the kept knobs from tune.jsonl's steps and the recorded points.

    Uses ``keep.choose`` (the keep rule of ``sweep.tune``) on each step's points (looked
    up by tag and value, validity re-checked from their recorded series) under
    ``objective``. Under the objective the run used, this must give what the run chose.
    Under another one the path can leave the recorded one (a step kept here was reverted
    there, so the run's later steps were measured from other knobs): the replay stops
    there and says so in ``diverged``. Returns {"objective", "plateau", "knobs", "score",
    "gate_goodput", "request_goodput", "diagnosis", "next_knob", "diverged", "steps"}.
    """
    from course_utils.core.keep import choose, next_knob, objective_value

    d = Path(results_dir)
    points = load_points_checked(d)
    steps = [s for s in load_jsonl(d / "tune.jsonl") if s.get("kind") in ("baseline", "sweep")]
    if not steps or steps[0]["kind"] != "baseline":
        raise ValueError(f"{d}: no baseline step in tune.jsonl")
    base = next((p for p in points if p["key"] == steps[0].get("point")), None)
    if base is None or base.get("status") != "ok":
        raise ValueError(f"{d}: baseline point missing or failed")

    def scores(p: Mapping[str, Any]) -> dict[str, Any]:
        return {"score": objective_value(p, objective),
                "gate_goodput": p["score"].get("gate_goodput"),
                "request_goodput": p["score"].get("request_goodput")}

    knobs = dict(base["knobs"])
    kept_rec = base
    score = objective_value(base, objective)
    diag = base["diagnosis"]
    trail = [{"step": 0, "knobs": dict(knobs), **scores(base),
              "constraint": diag.get("constraint"), "leaf": diag.get("leaf")}]
    diverged = None
    for s in steps[1:]:
        knob = s["knob"]
        tag = f"tune-step-{s['step']}"
        order = list(s.get("values_tried", []))
        recs = sorted((p for p in points if p.get("tag") == tag and p.get("knob") == knob
                       and p.get("value") in order), key=lambda p: order.index(p["value"]))
        others = {k: v for k, v in knobs.items() if k != knob}
        measured_from = [{k: v for k, v in (p.get("base_knobs") or {}).items() if k != knob}
                         for p in recs]
        if knob not in (diag.get("knobs") or []) or any(m != others for m in measured_from):
            was = measured_from[0] if measured_from else "?"
            diverged = (f"step {s['step']} ({knob}) was measured from knobs {was}; this replay "
                        f"is at {knobs} with diagnosis {diag.get('leaf')}: the recorded run "
                        "never measured this path further")
            break
        best, gain, kept = choose(recs, score, objective=objective, plateau=plateau)
        if kept and best is not None:
            knobs, kept_rec, score, diag = dict(best["knobs"]), best, \
                objective_value(best, objective), best["diagnosis"]
        trail.append({"step": s["step"], "knob": knob, "kept": kept,
                      "best_value": best["value"] if best else None,
                      "gain": None if gain is None else (str(gain) if math.isinf(gain) else gain),
                      "results": [{"value": p["value"], "valid": p.get("valid"), **scores(p),
                                   "meets_slo": p["score"].get("meets_slo"),
                                   "constraint": (p.get("diagnosis") or {}).get("constraint")}
                                  for p in recs],
                      "knobs": dict(knobs), **scores(kept_rec),
                      "constraint": diag.get("constraint"), "leaf": diag.get("leaf")})
    return {"objective": objective, "plateau": plateau, "knobs": knobs, **scores(kept_rec),
            "diagnosis": {k: diag.get(k) for k in ("constraint", "leaf", "knobs", "moves",
                                                   "why_en", "why_zh")},
            "next_knob": next_knob(diag), "diverged": diverged, "steps": trail}


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
    """Each lab notebook command in a run's ``commands.log`` (tools/gpu/run_lab.sh writes a
    ``... $ <command>`` line, then ``... rc=N wall=Ss``), in order:
    ``{"lab": "knobs" | "slo", "wall_s": float, "rc": int | None}``. Other commands (faults,
    side-by-side) are not lab calls and are left out."""
    log = Path(run_dir) / "commands.log"
    calls: list[dict[str, Any]] = []
    current = None
    for line in log.read_text().splitlines() if log.is_file() else []:
        if " $ " in line:
            current = ("knobs" if "01_knob_sweep" in line
                       else "slo" if "02_slo_loop" in line else None)
        elif current and " wall=" in line:
            rc = re.search(r" rc=(-?\d+)", line)
            calls.append({"lab": current, "rc": int(rc.group(1)) if rc else None,
                          "wall_s": float(line.rsplit("wall=", 1)[1].rstrip("s"))})
            current = None
    return calls


def measured_minutes(run_dir: str | Path) -> dict[str, float | None]:
    """Device minutes per lab of a recorded run: the wall time of each device command in
    ``commands.log`` (``device_calls``), summed per notebook; without that log, the
    recorded per-point times (points only: start-ups between them not counted)."""
    d = Path(run_dir)
    out: dict[str, float | None] = {"knobs": None, "slo": None}
    for c in device_calls(d):
        out[c["lab"]] = (out[c["lab"]] or 0.0) + c["wall_s"] / 60.0
    if out["knobs"] is None:
        recs = load_jsonl(d / "knobs" / "results.jsonl")
        if recs:
            out["knobs"] = sum(float(r.get("wall_s") or 0) for r in recs) / 60.0
    if out["slo"] is None:
        recs = load_jsonl(d / "slo" / "points.jsonl") + load_jsonl(d / "slo" / KNEE_FILE)
        if recs:
            out["slo"] = sum(float(r.get("elapsed_s") or 0) for r in recs) / 60.0
    return out


# --------------------------------------------------------------------------------------
# environment record
# --------------------------------------------------------------------------------------


def _run(cmd: Sequence[str]) -> str:
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=60,
                              check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def environment() -> dict[str, Any]:
    """Driver, GPU, CUDA, torch and vLLM versions of this machine (no import of vLLM when
    it is absent; never raises)."""
    env: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    env["nvidia_smi"] = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"]) or None
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
            env["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 2)
    except Exception:  # noqa: BLE001
        pass
    env["env"] = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "VLLM_USE_MODELSCOPE",
                                             "HF_ENDPOINT", "VLLM_USE_FLASHINFER_SAMPLER")
                  if k in os.environ}
    return env


# --------------------------------------------------------------------------------------
# plots (each saves a PNG and returns the figure)
# --------------------------------------------------------------------------------------


















