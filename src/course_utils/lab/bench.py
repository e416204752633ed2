"""Run `vllm bench serve` (0.26.0) against a running server and read its result JSON.

Every flag ``bench_args`` emits exists in vLLM 0.26.0 (tests/lab/test_bench.py checks them
against its source). ``--random-prefix-len P`` prepends ONE shared prefix of P tokens, so
``--random-input-len`` gets ``input_len - prefix_len`` (``input_len`` is the whole prompt).
A ``TraceWorkload`` is replayed with ``--dataset-name timed_trace`` from its slice written
next to the result JSON. Per-request lists are kept only with ``--save-detailed``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core.records import Workload
from course_utils.core.slo import BenchResult
from course_utils.core.vllm_logs import bench_failure_reason
from course_utils.core.workload import TraceWorkload
from course_utils.lab.proc import run_logged
from course_utils.lab.workload import slice_path, write_slice

__all__ = ["BenchError", "Workload", "bench_args", "run_bench"]

PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
# Seconds one `vllm bench serve` call adds beyond its requests' arrivals: importing vLLM,
# loading the tokenizer and sampling the prompts before the first request (19.6-31.1 s on
# the H200 host), and the last answers' drain. Recorded knee rates on that host fit 22-26 s.
CLI_CALL_S = 25.0
METRIC_PERCENTILES = "50,90,99"


class BenchError(RuntimeError):
    """`vllm bench serve` failed or wrote no result. `.reason` is one line."""

    def __init__(self, reason: str, *, log_path: Path | None = None):
        super().__init__(reason)
        self.reason = reason
        self.log_path = log_path


def bench_args(
    base_url: str,
    model: str,
    workload: Workload,
    slo: Any = None,
    result_dir: str | Path = ".",
    result_filename: str = "bench.json",
    *,
    tokenizer: str | None = None,
    save_detailed: bool = True,
    num_warmups: int = 0,
    disable_tqdm: bool = True,
    vllm_cmd: Sequence[str] = ("vllm",),
    extra_args: Sequence[str] = (),
    trace_token_ratio: float = 1.0,
) -> list[str]:
    """argv for `vllm bench serve` with vLLM 0.26.0's own flags (a list, never a string);
    ``trace_token_ratio``: a trace's lengths as ``TraceWorkload.sent_requests``."""
    w = workload
    argv = [*(str(c) for c in vllm_cmd), "bench", "serve", "--backend", "vllm"]
    argv += ["--base-url", base_url.rstrip("/"), "--endpoint", "/v1/completions", "--model", model]
    if isinstance(w, TraceWorkload):  # self-timed: the trace's arrivals, scaled
        argv += w.dataset_args(slice_path(result_dir, result_filename), trace_token_ratio)
        argv += ["--num-prompts", str(w.num_prompts)]
    else:
        argv += ["--dataset-name", "random", "--random-input-len", str(w.input_len - w.prefix_len)]
        argv += ["--random-output-len", str(w.output_len)]
        if w.prefix_len:
            argv += ["--random-prefix-len", str(w.prefix_len)]
        rate = "inf" if math.isinf(w.request_rate) else f"{w.request_rate:g}"
        argv += ["--num-prompts", str(w.num_prompts), "--request-rate", rate]
    if w.max_concurrency is not None:
        argv += ["--max-concurrency", str(w.max_concurrency)]
    pcts = METRIC_PERCENTILES
    p_slo = getattr(slo, "percentile", None)
    if p_slo is not None and float(p_slo) not in (50.0, 90.0, 99.0):
        word = str(int(p_slo)) if float(p_slo).is_integer() else str(p_slo)
        pcts = ",".join(sorted({*pcts.split(","), word}, key=float))
    argv += ["--percentile-metrics", PERCENTILE_METRICS, "--metric-percentiles", pcts]
    goodput = [str(x) for x in slo.goodput_args()] if slo is not None else []
    argv += ["--goodput", *goodput] if goodput else []
    argv += ["--save-result", "--result-dir", str(result_dir)]
    argv += ["--result-filename", result_filename, "--seed", str(w.seed)]
    flags = {"--save-detailed": save_detailed, "--ignore-eos": w.ignore_eos}
    argv += [f for f, on in flags.items() if on]
    argv += ["--tokenizer", tokenizer] if tokenizer else []
    argv += ["--num-warmups", str(num_warmups)] if num_warmups else []
    argv += ["--disable-tqdm"] if disable_tqdm else []
    return argv + [str(a) for a in extra_args]


def run_bench(
    base_url: str,
    model: str,
    workload: Workload,
    slo: Any,
    result_dir: str | Path,
    result_filename: str = "bench.json",
    *,
    log_path: str | Path | None = None,
    timeout_s: float = 1800.0,
    tokenizer: str | None = None,
    vllm_cmd: Sequence[str] = ("vllm",),
    num_warmups: int = 0,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    trace_token_ratio: float = 1.0,
) -> Any:
    """Run `vllm bench serve` (its output in ``log_path``); return the BenchResult of its JSON."""
    result_dir = Path(result_dir)
    result_dir.mkdir(parents=True, exist_ok=True)
    out = result_dir / result_filename
    if out.exists():
        out.unlink()
    log = Path(log_path) if log_path else result_dir / (Path(result_filename).stem + ".log")
    if isinstance(workload, TraceWorkload):
        write_slice(workload, result_dir, result_filename, trace_token_ratio)
    argv = bench_args(
        base_url,
        model,
        workload,
        slo,
        result_dir,
        result_filename,
        tokenizer=tokenizer,
        vllm_cmd=vllm_cmd,
        num_warmups=num_warmups,
        extra_args=extra_args,
        trace_token_ratio=trace_token_ratio,
    )
    rc, timed_out = run_logged(argv, log, timeout_s, env=env, grace_s=5.0)
    if timed_out:
        raise BenchError(f"vllm bench serve did not finish within {timeout_s:.0f} s", log_path=log)
    if rc != 0:
        raise BenchError(bench_failure_reason(log.read_text(errors="replace"), rc), log_path=log)
    if not out.exists():
        raise BenchError(f"vllm bench serve wrote no result file {out}", log_path=log)
    result = BenchResult.from_json(out)
    if slo is not None:
        # the --goodput targets, next to vLLM's keys (slo.request_goodput compares them)
        result.raw["goodput_slo"] = {
            k: float(v) for k, _, v in (str(p).partition(":") for p in slo.goodput_args())
        }
        out.write_text(json.dumps(result.raw))
    return result
