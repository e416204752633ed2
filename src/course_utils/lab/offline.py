"""Lab 01's sweep point: ``LLM(...)`` in a fresh subprocess, measuring the triple.

One point = one knob setting. The parent starts ``python -m course_utils.lab.offline``
(its own process group, so the engine's GPU memory goes back when it exits: one Python
process does not reliably free an engine), waits, reads the child's result JSON and its
log, and appends ONE JSON line per point to ``results.jsonl`` right away. A point already
in that file (ok or failed) is not run again, so an interrupted sweep resumes.

The child measures, with fixed sampling (temperature, seed):
1. quality: ``LLM.chat`` over the eval set, scored by ``course_utils.core.evalset``; with
   ``load_format="dummy"`` (random weights) accuracy is not measured and stays ``None``;
2. speed: ``load_prompts`` chat requests submitted at once with ``ignore_eos=True`` and
   ``load_max_tokens`` each (default ``max_tokens``; long outputs make the KV cache bind): output tokens/s over the wall time, and per-request latency
   p50/p99 from vLLM's request timestamps (``RequestOutput.metrics``, present when
   ``disable_log_stats=False``; ``last_token_ts - queued_ts``, both engine-core monotonic:
   vllm/v1/metrics/stats.py RequestStateStats);
3. capacity: the KV-cache size vLLM logs at start-up.

vLLM 0.26.0 log lines parsed (quoted from the source):
- v1/core/kv_cache_utils.py: ``"GPU KV cache size: %s tokens"`` (``f"{num_tokens:,}"``) and
  ``"Maximum concurrency for %s tokens per request: %.2fx"``;
- v1/worker/gpu_worker.py: ``"Available KV cache memory: %s GiB"``;
- v1/worker/gpu_model_runner.py: ``"Model loading took %s GiB memory and %.6f seconds"``;
- compilation/monitor.py: ``"torch.compile took %.2f s in total"`` (absent with enforce_eager).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.capacity import BLOCK_SIZE, get_gpu
from course_utils.lab.proc import run_logged

__all__ = [
    "LLM_STARTUP_S_H200",
    "PointSpec",
    "point_key",
    "parse_startup_log",
    "run_point",
    "sweep_llm",
    "load_results",
    "write_csv",
    "estimate_minutes",
    "verdict",
    "kv_check",
    "kv_demand",
    "fmt_accuracy",
    "engine_init_times",
    "engine_stats",
    "kv_timeline",
    "point_log",
    "same_batch_gap",
    "speed_pass_seqs",
    "judge",
]

# measured: `LLM(...)` of a Qwen2.5-7B-shaped model, constructor to ready, on one H200
# (shared/offline-gpu/README.md, 2026-11-29); used only until a point of this sweep finishes
LLM_STARTUP_S_H200 = 115.0
RUN_S_GUESS = 30.0  # eval + load passes, before any point has been measured

_KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_MAX_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_KV_GIB = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_WEIGHTS = re.compile(r"Model loading took ([\d.]+) GiB")
_COMPILE = re.compile(r"torch\.compile took ([\d.]+) s in total")
# vllm/v1/engine/core.py (0.26.0): once per engine start; "(compilation: ...)" only when
# torch.compile ran or loaded its cache
_INIT_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took "
                          r"([\d.]+) s(?: \(compilation: ([\d.]+) s)?")


def engine_init_times(text: str) -> list[tuple[float, float | None]]:
    """(engine init seconds, of which compilation) for each engine start logged in `text`."""
    return [(float(m.group(1)), float(m.group(2)) if m.group(2) else None)
            for m in _INIT_ENGINE.finditer(text)]


# vllm/v1/metrics/loggers.py LoggingStatLogger.log (0.26.0): every VLLM_LOG_STATS_INTERVAL
# (10 s) while the engine is busy, when stats are on (LLM(disable_log_stats=False))
_STAMP = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_STATS = re.compile(
    r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
    r"Running: (\d+) reqs, Waiting: (\d+) reqs,.*?(?:Preemptions: (\d+), )?"
    r"GPU KV cache usage: ([\d.]+)%")


def engine_stats(text: str) -> list[dict[str, Any]]:
    """vLLM's periodic engine stats lines in a log, in order: seconds since the first one
    (from the log stamps), prompt and generation tokens/s over the interval, running and
    waiting requests, preemptions in the interval (0 when the line has none) and KV cache
    usage (0-1)."""
    out: list[dict[str, Any]] = []
    t0 = prev = None
    for line in text.splitlines():
        m = _STATS.search(line)
        st = _STAMP.search(line)
        if not m or not st:
            continue
        # the stamp has no year: a leap year parses 02-29; a step back is a new year
        t = datetime(2000, *(int(x) for x in st.groups()), tzinfo=UTC).timestamp()
        if prev is not None and t < prev:
            t += 366 * 86400
        t0, prev = (t if t0 is None else t0), t
        out.append({"t_s": round(t - t0), "prompt_tok_s": float(m.group(1)),
                    "gen_tok_s": float(m.group(2)), "running": int(m.group(3)),
                    "waiting": int(m.group(4)), "preemptions": int(m.group(5) or 0),
                    "kv_usage": round(float(m.group(6)) / 100.0, 4)})
    return out


def kv_timeline(stats: Sequence[Mapping[str, Any]], full: float = 0.99) -> dict[str, Any]:
    """When the KV cache filled (first stats line at >= `full` usage; None: never), the mean
    generation tokens/s of the lines before that (the same batch at any KV size) and the
    most requests waiting (in an offline pass that submits everything at once, waiting
    requests after the start are preempted ones: scheduler.py _preempt_request)."""
    full_at = next((s["t_s"] for s in stats if s["kv_usage"] >= full), None)
    before = [s["gen_tok_s"] for s in stats
              if (full_at is None or s["t_s"] < full_at) and s["prompt_tok_s"] == 0.0]
    return {"lines": len(stats), "kv_full_at_s": full_at,
            "gen_tok_s_before_full": sum(before) / len(before) if before else None,
            "waiting_max": max((s["waiting"] for s in stats), default=None),
            "running_max": max((s["running"] for s in stats), default=None)}


def point_log(results_dir: str | Path, record: Mapping[str, Any]) -> Path | None:
    """A point's vLLM log: points/<key>/llm.log under `results_dir` (a run fetched from a GPU
    host lives elsewhere than the path it recorded), else the recorded path."""
    for cand in (Path(results_dir) / "points" / str(record.get("key")) / "llm.log",
                 Path(str(record.get("log") or ""))):
        if cand.name == "llm.log" and cand.is_file():
            return cand
    return None


def same_batch_gap(results_dir: str | Path, records: Sequence[Mapping[str, Any]], *,
                   baseline: Any) -> dict[str, Any] | None:
    """Each ok point's engine_stats and kv_timeline, and its generation tokens/s before its
    KV cache filled relative to the baseline's. Before the cache fills, every point runs the
    same batch at the same context lengths, so a capacity knob cannot make a difference
    there: a gap is this machine's run-to-run spread. None without the baseline's stats."""
    lines, stats = {}, {}
    for r in records:
        log = point_log(results_dir, r) if r.get("status") == "ok" else None
        if log is not None:
            stats[r["value"]] = engine_stats(log.read_text(errors="replace"))
            lines[r["value"]] = kv_timeline(stats[r["value"]])
    base = (lines.get(baseline) or {}).get("gen_tok_s_before_full")
    if not base:
        return None
    gaps = {v: t["gen_tok_s_before_full"] / base - 1.0
            for v, t in lines.items() if v != baseline and t["gen_tok_s_before_full"]}
    return {"timelines": lines, "stats": stats, "gaps": gaps,
            "max_abs_gap": max((abs(g) for g in gaps.values()), default=0.0)}


# --------------------------------------------------------------------------------------
# the spec of one point and its key
# --------------------------------------------------------------------------------------

PointSpec = dict[str, Any]


def point_key(spec: Mapping[str, Any]) -> str:
    """Stable id of a point: everything that changes what is measured."""
    keep = {k: spec[k] for k in sorted(spec) if k not in {"result_path", "label"}}
    blob = json.dumps(keep, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def parse_startup_log(text: str) -> dict[str, float | int | None]:
    """KV-cache size, max concurrency, KV memory, weight memory and torch.compile time
    from a vLLM start-up log (None for a line that is not there)."""

    def last(rx: re.Pattern[str]) -> re.Match[str] | None:
        found = None
        for found in rx.finditer(text):  # noqa: B007 - the last one wins
            pass
        return found

    kv = last(_KV_TOKENS)
    conc = last(_MAX_CONC)
    gib = last(_KV_GIB)
    weights = last(_WEIGHTS)
    comp = last(_COMPILE)
    return {
        "kv_cache_tokens": int(kv.group(1).replace(",", "")) if kv else None,
        "max_concurrency": float(conc.group(2)) if conc else None,
        "kv_cache_gib": float(gib.group(1)) if gib else None,
        "weights_gib": float(weights.group(1)) if weights else None,
        "torch_compile_s": float(comp.group(1)) if comp else None,
    }


def _percentiles(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    import numpy as np

    arr = np.asarray(values, dtype=float)
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


# --------------------------------------------------------------------------------------
# the child: runs inside the fresh process
# --------------------------------------------------------------------------------------


def _child(spec: Mapping[str, Any]) -> dict[str, Any]:
    from vllm import LLM, SamplingParams

    from course_utils.core import evalset

    knobs = dict(spec.get("knobs") or {})
    t0 = time.monotonic()
    llm = LLM(
        model=spec["model"],
        tokenizer=spec.get("tokenizer") or None,
        load_format=spec.get("load_format") or "auto",
        max_model_len=spec.get("max_model_len"),
        seed=spec.get("seed", 0),
        disable_log_stats=False,  # keeps RequestOutput.metrics (per-request timestamps)
        **knobs,
    )
    startup_s = time.monotonic() - t0

    items = evalset.load_items(spec["eval_set"])
    convos = [evalset.messages(it) for it in items]
    temperature = float(spec.get("temperature", 0.0))
    max_tokens = int(spec.get("max_tokens", 128))
    seed = int(spec.get("seed", 0))
    dummy = spec.get("load_format") == "dummy"

    # 1) quality on the eval set
    sp = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)
    t1 = time.monotonic()
    outs = llm.chat(convos, sp, use_tqdm=False)
    eval_s = time.monotonic() - t1
    texts = [o.outputs[0].text for o in outs]
    scored = None if dummy else evalset.score(items, texts)

    # 2) speed: a fixed batch, every request generates exactly load_max_tokens
    n = int(spec.get("load_prompts", 256))
    load_convos = []
    for i in range(n):
        msgs = [dict(m) for m in convos[i % len(convos)]]
        msgs[-1]["content"] = f"({i}) {msgs[-1]['content']}"  # no two prompts identical
        load_convos.append(msgs)
    sp_load = SamplingParams(
        temperature=temperature, max_tokens=int(spec.get("load_max_tokens") or max_tokens),
        seed=seed, ignore_eos=True
    )
    t2 = time.monotonic()
    louts = llm.chat(load_convos, sp_load, use_tqdm=False)
    load_s = time.monotonic() - t2
    gen = sum(len(o.outputs[0].token_ids) for o in louts)
    prompt_lens = [len(o.prompt_token_ids or ()) for o in louts]
    lat, ttft = [], []
    for o in louts:
        m = getattr(o, "metrics", None)
        if m is None or not getattr(m, "queued_ts", 0) or not getattr(m, "last_token_ts", 0):
            continue
        lat.append(m.last_token_ts - m.queued_ts)
        if getattr(m, "first_token_ts", 0):
            ttft.append(m.first_token_ts - m.queued_ts)
    p50, p99 = _percentiles(lat)
    t50, t99 = _percentiles(ttft)

    import vllm

    return {
        "status": "ok",
        "vllm_version": getattr(vllm, "__version__", None),
        "startup_s": startup_s,
        "eval_s": eval_s,
        "eval_n": len(items),
        "eval_correct": None if scored is None else scored["correct"],
        "accuracy": None if scored is None else scored["accuracy"],
        "accuracy_note": "n/a: dummy weights, quality not measured" if dummy else "",
        "eval_outputs": {it.id: t for it, t in zip(items, texts, strict=True)},
        "load_prompts": n,
        "load_s": load_s,
        "output_tokens": gen,
        "prompt_tokens_max": max(prompt_lens, default=None),
        "prompt_tokens_total": sum(prompt_lens),
        "output_tok_s": gen / load_s if load_s > 0 else None,
        "latency_p50_s": p50,
        "latency_p99_s": p99,
        "ttft_p50_s": t50,
        "ttft_p99_s": t99,
        "latency_n": len(lat),
    }


def _child_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course_utils.lab.offline")
    ap.add_argument("spec", help="point spec JSON (written by run_point)")
    args = ap.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text())
    result = _child(spec)
    Path(spec["result_path"]).write_text(json.dumps(result, indent=1, ensure_ascii=False))
    return 0


# --------------------------------------------------------------------------------------
# the parent
# --------------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _failure_reason(log_text: str, returncode: int | None) -> str:
    from course_utils.lab.server import classify_failure  # same engine, same messages

    return classify_failure(log_text, returncode)


def run_point(
    knobs: Mapping[str, Any],
    *,
    model: str,
    out_dir: str | Path,
    eval_set: str | Path,
    load_format: str = "auto",
    max_model_len: int | None = 4096,
    max_tokens: int = 128,
    load_max_tokens: int | None = None,
    temperature: float = 0.0,
    seed: int = 0,
    load_prompts: int = 256,
    tokenizer: str | None = None,
    timeout_s: float = 900.0,
    python: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run one point in a fresh process; return its record (never raises for a bad point)."""
    load_max_tokens = load_max_tokens or max_tokens
    spec: dict[str, Any] = {
        "knobs": dict(knobs),
        "model": model,
        "tokenizer": tokenizer,
        "load_format": load_format,
        "max_model_len": max_model_len,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
        "load_prompts": load_prompts,
        "load_max_tokens": load_max_tokens,
        "eval_set": str(Path(eval_set).resolve()),
    }
    key = _key_for(knobs, {**spec, "eval_set": eval_set})
    pdir = Path(out_dir) / "points" / key
    pdir.mkdir(parents=True, exist_ok=True)
    result_path = pdir / "result.json"
    result_path.unlink(missing_ok=True)
    spec["result_path"] = str(result_path.resolve())
    spec_path = pdir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    log_path = pdir / "llm.log"
    cmd = [*(python or [sys.executable]), "-m", "course_utils.lab.offline", str(spec_path)]
    record: dict[str, Any] = {
        "key": key,
        "knobs": dict(knobs),
        "model": model,
        "load_format": load_format,
        "max_model_len": max_model_len,
        "max_tokens": max_tokens,
        "load_max_tokens": load_max_tokens,
        "temperature": temperature,
        "seed": seed,
        "started_at": _now(),
    }
    full_env = {**os.environ, **(env or {})}
    src = str(Path(__file__).resolve().parents[2])  # the child must import course_utils
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (full_env.get("PYTHONPATH", ""), src) if p
    )
    t0 = time.monotonic()
    # on KeyboardInterrupt too the whole group is stopped: never leave an engine behind
    rc, timed_out = run_logged(cmd, log_path, timeout_s, env=full_env)
    log_text = log_path.read_text(errors="replace")
    record.update(parse_startup_log(log_text))
    record["wall_s"] = time.monotonic() - t0
    record["log"] = str(log_path)
    if rc == 0 and result_path.is_file():
        result = json.loads(result_path.read_text())
        outputs = result.pop("eval_outputs", {})
        (pdir / "eval_outputs.json").write_text(json.dumps(outputs, indent=1, ensure_ascii=False))
        record.update(result)
        record["reason"] = None
    else:
        record["status"] = "failed"
        record["reason"] = (
            f"no result within {timeout_s:.0f} s" if timed_out else _failure_reason(log_text, rc)
        )
        record["accuracy"] = None
    return record


# --------------------------------------------------------------------------------------
# the sweep: one knob, results as they come, resumable
# --------------------------------------------------------------------------------------


def load_results(path: str | Path) -> list[dict[str, Any]]:
    """Records of results.jsonl (a torn last line from a kill is ignored)."""
    p = Path(path)
    if not p.is_file():
        return []
    out = []
    for line in p.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            if line.strip():
                out.append(json.loads(line))
    return out


def _append(path: Path, record: Mapping[str, Any]) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def estimate_minutes(n_points: int, done: Iterable[Mapping[str, Any]] = ()) -> float:
    """GPU minutes for ``n_points``: the mean wall time of finished ok points, else the
    H200-measured LLM start-up plus a guess for the two passes."""
    walls = [float(r["wall_s"]) for r in done if r.get("status") == "ok" and r.get("wall_s")]
    per = sum(walls) / len(walls) if walls else LLM_STARTUP_S_H200 + RUN_S_GUESS
    return n_points * per / 60.0


def sweep_llm(
    knob: str,
    values: Sequence[Any],
    *,
    out_dir: str | Path,
    base_knobs: Mapping[str, Any] | None = None,
    retry_failed: bool = False,
    progress: Callable[[str], None] | None = print,
    **point_kw: Any,
) -> list[dict[str, Any]]:
    """Run ``knob`` over ``values``; append each record to ``out_dir/results.jsonl`` at once.

    Points whose key is already in the file are skipped (resume); failed ones too unless
    ``retry_failed``. Returns this sweep's records in ``values`` order.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    done = {r["key"]: r for r in load_results(results) if "key" in r}
    if retry_failed:
        done = {k: r for k, r in done.items() if r.get("status") == "ok"}
    records = []
    for i, value in enumerate(values, 1):
        knobs = {**dict(base_knobs or {}), knob: value}
        key = _key_for(knobs, point_kw)
        if key in done:
            rec = done[key]
            if progress:
                progress(f"[{i}/{len(values)}] {knob}={value}: done before ({rec['status']})")
            records.append(rec)
            continue
        if progress:
            left = estimate_minutes(len(values) - i + 1, done.values())
            progress(f"[{i}/{len(values)}] {knob}={value}: running (~{left:.0f} GPU min left)")
        rec = run_point(knobs, out_dir=out, **point_kw)
        rec["knob"] = knob
        rec["value"] = value
        _append(results, rec)
        done[rec["key"]] = rec
        records.append(rec)
        if progress:
            what = (
                f"{rec.get('output_tok_s') or 0:.0f} tok/s, KV {rec.get('kv_cache_tokens')} tokens"
                if rec["status"] == "ok" else f"FAILED: {rec['reason']}"
            )
            progress(f"[{i}/{len(values)}] {knob}={value}: {what} ({rec['wall_s']:.0f} s)")
    return records


def _key_for(knobs: Mapping[str, Any], point_kw: Mapping[str, Any]) -> str:
    spec = {
        "knobs": dict(knobs),
        "model": point_kw["model"],
        "tokenizer": point_kw.get("tokenizer"),
        "load_format": point_kw.get("load_format", "auto"),
        "max_model_len": point_kw.get("max_model_len", 4096),
        "max_tokens": point_kw.get("max_tokens", 128),
        "temperature": point_kw.get("temperature", 0.0),
        "seed": point_kw.get("seed", 0),
        "load_prompts": point_kw.get("load_prompts", 256),
        "eval_set": Path(point_kw["eval_set"]).name,
    }
    lmt = point_kw.get("load_max_tokens")
    if lmt and lmt != spec["max_tokens"]:  # keys of runs made before the parameter stay
        spec["load_max_tokens"] = lmt
    return point_key(spec)


CSV_FIELDS = [
    "knob", "value", "status", "accuracy", "eval_correct", "eval_n", "output_tok_s",
    "latency_p50_s", "latency_p99_s", "ttft_p50_s", "ttft_p99_s", "kv_cache_tokens",
    "kv_cache_gib", "max_concurrency", "weights_gib", "startup_s", "wall_s", "reason",
]


def write_csv(records: Iterable[Mapping[str, Any]], path: str | Path) -> Path:
    p = Path(path)
    with open(p, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in records:
            w.writerow({k: r.get(k) for k in CSV_FIELDS})
    return p


def fmt_accuracy(record: Mapping[str, Any]) -> str:
    """Accuracy for display: a percentage, or "n/a" when not measured (dummy weights)."""
    acc = record.get("accuracy")
    if acc is None or record.get("load_format") == "dummy":
        return "n/a"
    return f"{float(acc):.1%}"


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


if __name__ == "__main__":
    sys.exit(_child_main())
