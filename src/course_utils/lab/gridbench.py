"""The bench command the grid gives `vllm bench sweep serve`: measure()'s warm-up, then the
sweep's own `vllm bench serve` run, both with /metrics sampled.

vLLM 0.26.0's sweep (vllm/benchmarks/sweep/serve.py ``run_benchmark``) runs the
``--bench-cmd`` it was given, split like a shell, with ``--percentile-metrics ttft,tpot,itl,e2el
--save-result --result-dir D --result-filename run=N.json`` appended, once per run, on the
combo's fresh server. Its own warm-up option, `vllm bench serve --num-warmups N`, sends N
copies of the first request at once (vllm/benchmarks/serve.py ``benchmark``): it never
reaches the batch sizes of a load at a rate. So the grid's bench command is this module:

    python -m course_utils.lab.gridbench --workload JSON [--warmup-share S] [--bench-worker]
        -- vllm bench serve ...                      (the sweep appends its flags here)

1. the warm-up of lab.measure (``MeasureConfig.warmup_workload``: the load's shape and rate,
   a share of its prompts, its own seed), results in ``D/<run>.warmup.json``/``.log``;
2. the sweep's argv, unchanged, its output streamed to this process's stdout (the sweep's log
   shows it as it would show the CLI's) and kept in ``D/<run>.bench.log``;
3. ``D/<run>.harness.json``: both calls' walls, loads and engine peaks (running requests from
   /metrics), the prefix-cache hit rate, and the validity issues of lab.measure's gate
   (core.validity: rate, failures, output length, replayed prefixes, a warm-up whose peak
   fell short of the run's). The sweep reads only ``run=N.json``.

Exit status: the measured run's (124 past ``--timeout``). ``--bench-worker`` runs both calls
in lab.benchworker's process (vLLM imported once per combo instead of twice).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from course_utils.core.metrics import MetricsSampler, summarize
from course_utils.core.records import Workload
from course_utils.core.validity import prefix_cache_hit_rate, validity_issues, warmup_issue
from course_utils.lab.bench import BenchError, run_argv, run_bench
from course_utils.lab.measure import MeasureConfig

__all__ = ["HARNESS_SUFFIX", "harness_path", "main"]

HARNESS_SUFFIX = ".harness.json"


def harness_path(run_json: str | Path) -> Path:
    """``run=0.json`` -> ``run=0.harness.json`` next to it."""
    p = Path(run_json)
    return p.with_name(p.stem + HARNESS_SUFFIX)


def _flag(argv: Sequence[str], name: str) -> str | None:
    """The value of the last ``--name V`` / ``--name=V`` in argv."""
    val = None
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            val = argv[i + 1]
        elif a.startswith(name + "="):
            val = a.partition("=")[2]
    return val


def _follow(path: Path, stop: threading.Event) -> None:
    """Copy what is appended to ``path`` to stdout, line by line, until ``stop``."""
    pos = 0
    while True:
        done = stop.is_set()
        try:
            with open(path, "rb") as fh:
                fh.seek(pos)
                chunk = fh.read()
        except OSError:
            chunk = b""
        if done:
            cut = len(chunk)
        else:
            cut = chunk.rfind(b"\n") + 1
        if cut:
            sys.stdout.write(chunk[:cut].decode("utf-8", errors="replace"))
            sys.stdout.flush()
            pos += cut
        if done:
            return
        stop.wait(0.05)


def _peak(sampler: MetricsSampler) -> float | None:
    return summarize(sampler.samples).running_max if sampler.samples else None


def _warm_call(*args: Any, **kw: Any) -> Any:
    """run_bench; a call that failed in the worker runs again as the CLI subprocess (the
    worker is not proven on every host: a failure of ours must not cost the combo)."""
    try:
        return run_bench(*args, **kw)
    except BenchError:
        if not kw.get("calls") or kw["calls"][-1]["mode"] != "worker":
            raise
        print("gridbench: the warm-up failed in the worker: again as a subprocess", flush=True)
        return run_bench(*args, **{**kw, "worker": False})


def _warm_up(
    a: argparse.Namespace, w: Workload, argv: Sequence[str], d: Path, stem: str, cfg: MeasureConfig
) -> dict[str, Any]:
    ww = cfg.warmup_workload(w)
    if ww is None:
        return {"status": "none"}
    i_bench = argv.index("bench")
    base_url, model = _flag(argv, "--base-url"), _flag(argv, "--model")
    if base_url is None or model is None:
        raise SystemExit("gridbench: the bench command needs --base-url and --model")
    calls: list[dict[str, Any]] = []
    sampler = MetricsSampler(base_url + "/metrics", interval_s=a.metrics_interval)
    t0 = time.monotonic()
    print(f"gridbench: warm-up {ww.num_prompts} prompts at {ww.request_rate:g} req/s", flush=True)
    worker = a.bench_worker
    try:
        with sampler:
            res = _warm_call(
                base_url,
                model,
                ww,
                None,
                d,
                f"{stem}.warmup.json",
                tokenizer=_flag(argv, "--tokenizer"),
                vllm_cmd=argv[:i_bench],
                timeout_s=a.timeout,
                worker=worker,
                calls=calls,
            )
    except BenchError as exc:
        return {"status": "failed", "reason": exc.reason, "num_prompts": ww.num_prompts}
    out = {
        "status": "ok",
        "num_prompts": ww.num_prompts,
        "seed": ww.seed,
        "running_max": _peak(sampler),
        "wall_s": round(time.monotonic() - t0, 2),
        "load_s": res.raw.get("duration"),
        "mode": calls[-1]["mode"] if calls else None,
    }
    print(f"gridbench: warm-up done: {json.dumps(out)}", flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--") if "--" in args else len(args)
    ap = argparse.ArgumentParser(prog="python -m course_utils.lab.gridbench")
    ap.add_argument("--workload", required=True, help="core.records.Workload as JSON")
    ap.add_argument("--warmup-share", type=float, default=MeasureConfig.warmup_share)
    ap.add_argument("--warmup-min-prompts", type=int, default=MeasureConfig.warmup_min_prompts)
    ap.add_argument("--metrics-interval", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--bench-worker", action=argparse.BooleanOptionalAction, default=None)
    a = ap.parse_args(args[:cut])  # --help: the usage, exit 0
    if cut == len(args):
        print("error: gridbench: no bench command → fix: give it after --", file=sys.stderr)
        return 2
    bench = args[cut + 1 :]
    if "bench" not in bench:
        print("gridbench: the command after -- is not `vllm bench serve ...`", file=sys.stderr)
        return 2
    w = Workload.from_dict(json.loads(a.workload))
    cfg = MeasureConfig(warmup_share=a.warmup_share, warmup_min_prompts=a.warmup_min_prompts)
    d = Path(_flag(bench, "--result-dir") or ".")
    name = _flag(bench, "--result-filename") or "bench.json"
    stem = Path(name).stem
    d.mkdir(parents=True, exist_ok=True)
    warm = _warm_up(a, w, bench, d, stem, cfg)
    log = d / f"{stem}.bench.log"
    base_url = _flag(bench, "--base-url") or ""
    sampler = MetricsSampler(base_url + "/metrics", interval_s=a.metrics_interval)
    stop = threading.Event()
    follower = threading.Thread(target=_follow, args=(log, stop), daemon=True)
    follower.start()
    t0 = time.monotonic()
    try:
        with sampler:
            rc, timed_out, mode = run_argv(
                bench, bench.index("bench"), log, a.timeout, worker=a.bench_worker
            )
            if mode == "worker" and rc != 0 and not timed_out:  # see _warm_call
                print(
                    f"gridbench: the run failed in the worker (rc {rc}): again as a subprocess",
                    flush=True,
                )
                rc, timed_out, mode = run_argv(
                    bench, bench.index("bench"), log, a.timeout, worker=False
                )
                mode = "cli-after-worker-failure"
    finally:
        stop.set()
        follower.join(timeout=5)
    run = {"rc": rc, "wall_s": round(time.monotonic() - t0, 2), "mode": mode}
    _record(d / name, w, warm, run, sampler)
    if timed_out:
        return 124
    return int(rc or 0)


def _record(
    result: Path,
    w: Workload,
    warm: dict[str, Any],
    run: dict[str, Any],
    sampler: MetricsSampler,
) -> None:
    """harness.json: the two calls and the validity gate of lab.measure on the run."""
    samples = sampler.samples
    hit = prefix_cache_hit_rate(samples)
    run["running_max"] = _peak(sampler)
    run["prefix_cache_hit_rate"] = hit
    issues: list[str] = []
    raw: dict[str, Any] = {}
    if result.is_file():
        raw = json.loads(result.read_text())
        run["load_s"] = raw.get("duration")
        issues += validity_issues(raw, w, prefix_cache_hit_rate=hit)
    else:
        issues.append("the run wrote no result")
    if not samples:
        issues.append("no /metrics sample was taken during the bench")
    cover = warmup_issue(warm.get("running_max"), run["running_max"])
    if cover:
        issues.append(cover)
    out = {
        "workload": w.to_dict(),
        "warmup": warm,
        "run": run,
        "valid": not issues,
        "validity_issues": issues,
    }
    harness_path(result).write_text(json.dumps(out, indent=1))
    print(f"gridbench: {json.dumps({'valid': not issues, 'issues': issues})}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
