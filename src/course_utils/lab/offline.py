"""Lab 01's sweep point: ``LLM(...)`` in a fresh subprocess (its own process group, so the
engine's GPU memory goes back when it exits), measuring the triple: accuracy on the eval set
(None with dummy weights), output tokens/s and per-request latency of a load pass where every
request generates ``load_max_tokens`` (``ignore_eos``), and the KV-cache size vLLM logs.
Each point is appended to ``results.jsonl`` at once; a point already there is not run again.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course_utils.core.records import OfflinePoint, append_jsonl, read_jsonl
from course_utils.core.store import set_aside
from course_utils.core.vllm_logs import classify_failure, startup_facts
from course_utils.lab.proc import run_logged

# `LLM(...)` start-up of a Qwen2.5-7B-shaped model on one H200; used until a point finishes
LLM_STARTUP_S_H200 = 115.0
RUN_S_GUESS = 30.0  # eval + load passes, before any point has been measured


def _percentiles(values: Sequence[float]) -> tuple[float | None, float | None]:
    import numpy as np

    if not values:
        return None, None
    p50, p99 = np.percentile(np.asarray(values, dtype=float), [50, 99])
    return float(p50), float(p99)


def _load_convos(convos: Sequence[Any], n: int) -> list[Any]:
    """The speed pass's n chats: the eval chats cycled, each prompt made unique."""
    chats = [[dict(m) for m in convos[i % len(convos)]] for i in range(n)]
    for i, msgs in enumerate(chats):
        msgs[-1]["content"] = f"({i}) {msgs[-1]['content']}"  # no two prompts identical
    return chats


def _request_times(louts: Iterable[Any]) -> tuple[list[float], list[float]]:
    """Per-request latency and TTFT (s) from vLLM's RequestOutput.metrics timestamps;
    requests without them are skipped."""
    lat: list[float] = []
    ttft: list[float] = []
    for o in louts:
        m = getattr(o, "metrics", None)
        if m is None or not getattr(m, "queued_ts", 0) or not getattr(m, "last_token_ts", 0):
            continue
        lat.append(m.last_token_ts - m.queued_ts)
        if getattr(m, "first_token_ts", 0):
            ttft.append(m.first_token_ts - m.queued_ts)
    return lat, ttft


def _child(spec: Mapping[str, Any]) -> dict[str, Any]:
    import vllm
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
    load_convos = _load_convos(convos, n)
    sp_load = SamplingParams(
        temperature=temperature,
        max_tokens=int(spec.get("load_max_tokens") or max_tokens),
        seed=seed,
        ignore_eos=True,
    )
    t2 = time.monotonic()
    louts = llm.chat(load_convos, sp_load, use_tqdm=False)
    load_s = time.monotonic() - t2
    gen = sum(len(o.outputs[0].token_ids) for o in louts)
    prompt_lens = [len(o.prompt_token_ids or ()) for o in louts]
    lat, ttft = _request_times(louts)
    p50, p99 = _percentiles(lat)
    t50, t99 = _percentiles(ttft)
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


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


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
    set_aside(pdir)  # an earlier attempt's files (a failed point retried): never written over
    pdir.mkdir(parents=True, exist_ok=True)
    result_path = pdir / "result.json"
    spec["result_path"] = str(result_path.resolve())
    spec_path = pdir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    log_path = pdir / "llm.log"
    cmd = [*(python or [sys.executable]), "-m", "course_utils.lab.offline", str(spec_path)]
    record = OfflinePoint(key=key, knobs=dict(knobs), model=model, started_at=_now())
    kept = ("load_format", "max_model_len", "max_tokens", "load_max_tokens", "temperature", "seed")
    record.update({k: spec[k] for k in kept})
    full_env = {**os.environ, **(env or {})}
    src = str(Path(__file__).resolve().parents[2])  # the child must import course_utils
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (full_env.get("PYTHONPATH", ""), src) if p)
    t0 = time.monotonic()
    # on KeyboardInterrupt too the whole group is stopped: never leave an engine behind
    rc, timed_out = run_logged(cmd, log_path, timeout_s, env=full_env)
    log_text = log_path.read_text(errors="replace")
    record.update(startup_facts(log_text).as_dict())
    record.wall_s, record.log = time.monotonic() - t0, str(log_path)
    if rc == 0 and result_path.is_file():
        result = json.loads(result_path.read_text())
        outputs = result.pop("eval_outputs", {})
        (pdir / "eval_outputs.json").write_text(json.dumps(outputs, indent=1, ensure_ascii=False))
        record.update(result)
        record.reason = None
    else:
        record.status = "failed"
        record.reason = (
            f"no result within {timeout_s:.0f} s" if timed_out else classify_failure(log_text, rc)
        )
        record.accuracy = None
    return record.to_json()


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
    as_run: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    **point_kw: Any,
) -> list[dict[str, Any]]:
    """Run ``knob`` over ``values``, appending each record to ``out_dir/results.jsonl``; a key
    already there is skipped (a failed one too unless ``retry_failed``). ``as_run`` maps the
    knobs to the ones LLM(...) gets; the record keeps ``value`` as given, ``knobs`` as run."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    done = {r["key"]: r for r in read_jsonl(results) if "key" in r}
    if retry_failed:
        done = {k: r for k, r in done.items() if r.get("status") == "ok"}
    records = []
    for i, value in enumerate(values, 1):
        knobs = {**dict(base_knobs or {}), knob: value}
        knobs = as_run(knobs) if as_run else knobs
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
        rec.update(knob=knob, value=value)
        append_jsonl(results, rec)
        done[rec["key"]] = rec
        records.append(rec)
        if progress:
            what = (
                f"{rec.get('output_tok_s') or 0:.0f} tok/s, KV {rec.get('kv_cache_tokens')} tokens"
                if rec["status"] == "ok"
                else f"FAILED: {rec['reason']}"
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
    blob = json.dumps(spec, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


CSV_FIELDS = (
    "knob value status accuracy eval_correct eval_n output_tok_s latency_p50_s latency_p99_s "
    "ttft_p50_s ttft_p99_s kv_cache_tokens kv_cache_gib max_concurrency weights_gib startup_s "
    "wall_s reason"
).split()


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


if __name__ == "__main__":
    sys.exit(_child_main())
