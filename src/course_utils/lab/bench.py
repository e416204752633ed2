"""Run `vllm bench serve` (0.26.0) against a running server and read its result JSON.

Every flag emitted by `bench_args` exists in vLLM 0.26.0: vllm/benchmarks/serve.py
`add_cli_args` and vllm/benchmarks/datasets/datasets.py `add_dataset_parser` /
`add_random_dataset_base_args` (tests/test_bench.py checks them against that source).

Notes from the 0.26.0 source:
- with `--dataset-name random` and an OpenAI-compatible backend (`vllm` is one), bench
  serve forces `ignore_eos=True` itself (serve.py main_async); `--ignore-eos` is still
  passed when asked so the command line says what happens.
- `--random-prefix-len P` prepends ONE shared random prefix of P tokens to every prompt;
  total prompt = P + `--random-input-len` (datasets.py RandomDataset). `Workload.input_len`
  is the total prompt length, so `--random-input-len` gets `input_len - prefix_len`.
- a ``TraceWorkload`` (core.workload) is replayed with `--dataset-name timed_trace`: its
  slice is written next to the result JSON (``<result stem>.trace.jsonl``).
- per-request lists (`ttfts`, `itls`, `output_lens`, `start_times`, ...) are kept in the
  JSON only with `--save-detailed`.
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

__all__ = [
    "BenchError",
    "Workload",
    "bench_args",
    "run_bench",
]

PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
METRIC_PERCENTILES = "50,90,99"


class BenchError(RuntimeError):
    """`vllm bench serve` failed or wrote no result. `.reason` is one line."""

    def __init__(self, reason: str, *, log_path: Path | None = None):
        super().__init__(reason)
        self.reason = reason
        self.log_path = log_path


def _rate_arg(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def _goodput_args(slo: Any) -> list[str]:
    """`--goodput ttft:300 tpot:50` from slo.goodput_args() (empty when nothing applies)."""
    if slo is None:
        return []
    pairs = [str(a) for a in slo.goodput_args()]
    if pairs and pairs[0] == "--goodput":
        pairs = pairs[1:]
    return ["--goodput", *pairs] if pairs else []


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
) -> list[str]:
    """argv for `vllm bench serve` with vLLM 0.26.0's own flags (a list, never a string)."""
    w = workload
    argv = [
        *[str(c) for c in vllm_cmd],
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        base_url.rstrip("/"),
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
    ]
    if isinstance(w, TraceWorkload):  # self-timed: the trace's arrivals, scaled
        argv += w.dataset_args(slice_path(result_dir, result_filename))
        argv += ["--num-prompts", str(w.num_prompts)]
    else:
        argv += [
            "--dataset-name",
            "random",
            "--random-input-len",
            str(w.input_len - w.prefix_len),
            "--random-output-len",
            str(w.output_len),
        ]
        if w.prefix_len:
            argv += ["--random-prefix-len", str(w.prefix_len)]
        argv += [
            "--num-prompts",
            str(w.num_prompts),
            "--request-rate",
            _rate_arg(w.request_rate),
        ]
    if w.max_concurrency is not None:
        argv += ["--max-concurrency", str(w.max_concurrency)]
    pcts = METRIC_PERCENTILES
    p_slo = getattr(slo, "percentile", None)
    if p_slo is not None and float(p_slo) not in (50.0, 90.0, 99.0):
        word = str(int(p_slo)) if float(p_slo).is_integer() else str(p_slo)
        pcts = ",".join(sorted({*pcts.split(","), word}, key=float))
    argv += [
        "--percentile-metrics",
        PERCENTILE_METRICS,
        "--metric-percentiles",
        pcts,
        *_goodput_args(slo),
        "--save-result",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        result_filename,
        "--seed",
        str(w.seed),
    ]
    if save_detailed:
        argv.append("--save-detailed")
    if w.ignore_eos:
        argv.append("--ignore-eos")
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    if num_warmups:
        argv += ["--num-warmups", str(num_warmups)]
    if disable_tqdm:
        argv.append("--disable-tqdm")
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
) -> Any:
    """Run `vllm bench serve` (a subprocess, its output in ``log_path``); return
    slo.BenchResult of its JSON."""
    result_dir = Path(result_dir)
    result_dir.mkdir(parents=True, exist_ok=True)
    out = result_dir / result_filename
    if out.exists():
        out.unlink()
    log = Path(log_path) if log_path else result_dir / (Path(result_filename).stem + ".log")
    if isinstance(workload, TraceWorkload):
        write_slice(workload, result_dir, result_filename)
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
