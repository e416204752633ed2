"""``python -m course_utils sweep|tune|preflight``: the lab harness from a terminal."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from course_utils.core.capacity import GPUS
from course_utils.core.keep import OBJECTIVES
from course_utils.core.knobs import get as get_knob
from course_utils.core.records import Workload
from course_utils.lab.preflight import MIN_FREE_DISK_GIB, preflight, requested_gmu
from course_utils.lab.sweep import sweep
from course_utils.lab.tune import tune

__all__ = ["add_cli", "parse_value", "parse_values"]


def parse_value(s: str) -> Any:
    t = s.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    if t.lower() in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t


def parse_values(s: str) -> list[Any]:
    return [parse_value(x) for x in s.split(",") if x.strip()]


def parse_assign(items: Sequence[str] | None, many: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KNOB=VALUE, got {item!r}")
        out[k.strip().lstrip("-").replace("-", "_")] = parse_values(v) if many else parse_value(v)
    return out


def _common_cli(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model path or HF id for `vllm serve`")
    p.add_argument(
        "--preset",
        help="a named workload (core.presets: prefill, decode, kv, knee, prefix): its workload, "
        "SLO, base knobs (and tune's candidates) unless given here",
    )
    p.add_argument("--gpu-size", default="4090", help="the preset's size: 4090 or h200")
    p.add_argument("--slo", default=None, help='e.g. "ttft:300 tpot:50" (ms, p99)')
    p.add_argument("--rate", type=float, default=None, help="offered request rate (req/s)")
    p.add_argument("--out", required=True, help="output folder (points.jsonl, tune.jsonl)")
    p.add_argument("--base", action="append", metavar="KNOB=VALUE", help="fixed knob values")
    p.add_argument("--input-len", type=int, default=None, help="512")
    p.add_argument("--output-len", type=int, default=None, help="128")
    p.add_argument("--num-prompts", type=int, default=None, help="200")
    p.add_argument("--prefix-len", type=int, default=None, help="0")
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--load-format", default=None, help="e.g. dummy (random weights)")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--gpu-memory-gib", type=float, default=None)
    p.add_argument(
        "--rehearse-gpu",
        choices=sorted(GPUS),
        default=None,
        help="run at that GPU's memory budget and batch defaults (memory, not speed)",
    )
    p.add_argument("--startup-timeout", type=float, default=900.0)
    p.add_argument("--bench-timeout", type=float, default=1800.0)
    p.add_argument("--vllm-cmd", default="vllm", help="the vllm executable (split like a shell)")
    p.add_argument("--port", type=int, default=None, help="the servers' port (none: a free one)")
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--patience", type=int, default=2)
    p.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="request_goodput",
        help="request_goodput: vLLM's per-request goodput; gate: the p99 gate",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="extra windows per point with fresh prompts (the run-to-run spread)",
    )
    p.add_argument(
        "--remeasure",
        type=int,
        default=1,
        help="re-measure an invalid window (JIT compile, replay, ...) at most N times",
    )
    p.add_argument(
        "--warmup-share",
        type=float,
        default=None,
        help="warm-up prompts at the load's rate, as a share of --num-prompts "
        "(default: the preset's, else 0.5)",
    )
    p.add_argument("--no-progress", action="store_true")


def _rehearse(
    a: argparse.Namespace, base: dict[str, Any], sweeps: dict[str, list[Any]]
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """--rehearse-gpu: the target's budget and defaults in the base knobs, swept
    utilisations scaled (lab.rehearsal); what it reproduces goes to stderr."""
    if not a.rehearse_gpu:
        return base, sweeps
    from pathlib import Path

    from course_utils.lab import rehearsal

    r, base, sweeps = rehearsal.apply(
        a.rehearse_gpu, "serve", base, sweeps, cache=Path(a.out) / "gpu.json"
    )
    a.gpu_memory_gib = r.target_total_gib  # defaults of unset knobs: the target's
    for line in r.explain("en"):
        print(line, file=sys.stderr)
    return base, sweeps


_DEFAULTS = {
    "input_len": 512,
    "output_len": 128,
    "num_prompts": 200,
    "prefix_len": 0,
    "rate": math.inf,
}


def _apply_preset(a: argparse.Namespace, *, tune: bool) -> None:
    """Fill what was not given from ``--preset`` (core.presets), then from the defaults."""
    from course_utils.core import presets

    if a.preset:
        try:
            pre = presets.get(a.preset, a.gpu_size)
        except KeyError as exc:
            raise SystemExit(str(exc.args[0])) from None
        given = {
            "input_len": pre.input_len,
            "output_len": pre.output_len,
            "num_prompts": pre.num_prompts,
            "prefix_len": pre.prefix_len,
            "rate": float(pre.rate),
        }
        for k, v in given.items():
            if getattr(a, k) is None:
                setattr(a, k, v)
        a.slo = a.slo or pre.slo
        if pre.rehearse and not getattr(a, "rehearse_gpu", None):
            a.rehearse_gpu = pre.rehearse
        a.base = [f"{k}={v}" for k, v in pre.base.items()] + list(a.base or [])
        a.ignore_eos = True
        if getattr(a, "warmup_share", None) is None and pre.warmup_share is not None:
            a.warmup_share = pre.warmup_share
        if tune and not a.candidate:
            a.candidate = [
                f"{k}={','.join(str(v) for v in vs)}" for k, vs in pre.candidates.items()
            ]
    for k, v in _DEFAULTS.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if hasattr(a, "warmup_share") and a.warmup_share is None:
        from course_utils.lab.measure import MeasureConfig

        a.warmup_share = MeasureConfig.warmup_share
    if not a.slo:
        raise SystemExit("give --slo (or --preset)")


def process_kwargs(a: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``VllmServer`` and ``run_bench`` keyword arguments of the process flags
    (--vllm-cmd, --startup-timeout, --port, --load-format, --bench-timeout, --tokenizer):
    the server and its client run the same vllm."""
    vllm_cmd = shlex.split(a.vllm_cmd)
    server: dict[str, Any] = {"vllm_cmd": vllm_cmd, "startup_timeout_s": a.startup_timeout}
    if a.port:
        server["port"] = a.port
    if a.load_format:
        server["load_format"] = a.load_format
    bench: dict[str, Any] = {"timeout_s": a.bench_timeout, "vllm_cmd": vllm_cmd}
    if a.tokenizer:
        bench["tokenizer"] = a.tokenizer
    return server, bench


# command-line flag -> Workload field (the flags every workload-taking command shares)
_WORKLOAD_FLAGS = (
    ("input_len", "input_len"),
    ("output_len", "output_len"),
    ("num_prompts", "num_prompts"),
    ("rate", "request_rate"),
    ("prefix_len", "prefix_len"),
    ("seed", "seed"),
    ("ignore_eos", "ignore_eos"),
    ("max_concurrency", "max_concurrency"),
)


def workload_from_args(a: Any, base: dict[str, Any] | None = None) -> Workload:
    """The workload of a command line: ``base`` (a preset's ``workload_kwargs()``), then
    every workload flag the command has and was given (None: not given)."""
    kw = dict(base or {})
    for flag, name in _WORKLOAD_FLAGS:
        value = getattr(a, flag, None)
        if value is not None:
            kw[name] = value
    return Workload(**kw)


def _kwargs_from(a: argparse.Namespace) -> dict[str, Any]:
    from course_utils.core.slo import SLO

    workload = workload_from_args(a)
    server_kwargs, bench_kwargs = process_kwargs(a)
    slo = SLO.parse(a.slo, rate=None if math.isinf(a.rate) else a.rate)
    return dict(
        workload=workload,
        slo=slo,
        out_dir=a.out,
        # the rehearsed knobs when --rehearse-gpu set them, else --base as given
        base_knobs=getattr(a, "base_knobs", None) or parse_assign(a.base, False),
        resume=a.resume,
        patience=a.patience,
        server_kwargs=server_kwargs,
        bench_kwargs=bench_kwargs,
        gpu_memory_gib=a.gpu_memory_gib,
        progress=not a.no_progress,
        objective=a.objective,
        repeats=a.repeats,
        remeasure=a.remeasure,
        warmup_share=a.warmup_share,
    )


def _preflight_first(
    a: argparse.Namespace, *, base_knobs: dict[str, Any], candidates: dict[str, Any]
) -> None:
    """Before the first server: warnings to stderr; a failed check raises PreflightError
    (one line each: exit 2)."""
    report = preflight(
        a.model,
        entry="serve",
        output_dir=a.out,
        port=a.port,
        load_format=a.load_format,
        tokenizer=a.tokenizer,
        gpu_memory_utilization=requested_gmu(base_knobs, candidates),
        vllm_cmd=a.vllm_cmd,
    )
    for c in report.warnings():
        print(f"warning: {c.line('en')}", file=sys.stderr)
    report.raise_if_failed("en")


def _cmd_preflight(a: argparse.Namespace) -> int:
    report = preflight(
        a.model,
        entry=a.entry,
        output_dir=a.out,
        port=a.port,
        host=a.host,
        load_format=a.load_format,
        tokenizer=a.tokenizer,
        gpu_memory_utilization=a.gpu_memory_utilization,
        vllm_cmd=a.vllm_cmd,
        min_free_disk_gib=a.min_disk_gib,
    )
    print(report.table(a.lang), flush=True)
    report.raise_if_failed(a.lang)
    return 0


def _cmd_sweep(a: argparse.Namespace) -> int:
    _apply_preset(a, tune=False)
    base, sweeps = _rehearse(
        a, parse_assign(a.base, False), {get_knob(a.knob).name: parse_values(a.values)}
    )
    a.base_knobs = base
    _preflight_first(a, base_knobs=base, candidates=sweeps)
    kw = _kwargs_from(a)
    recs = sweep(
        a.model,
        a.knob,
        next(iter(sweeps.values())),
        early_stop=not a.no_early_stop,
        couple=a.couple,
        **kw,
    )
    for r in recs:
        s = r.get("score") or {}
        print(
            json.dumps(
                {
                    "value": r["value"],
                    "status": r["status"],
                    "reason": r.get("reason"),
                    "gate_goodput": s.get("gate_goodput"),
                    "request_goodput": s.get("request_goodput"),
                    "meets_slo": s.get("meets_slo"),
                    "valid": r.get("valid"),
                    "constraint": (r.get("diagnosis") or {}).get("constraint"),
                }
            )
        )
    return 0


def _cmd_tune(a: argparse.Namespace) -> int:
    _apply_preset(a, tune=True)
    cand = parse_assign(a.candidate, True)
    if not cand:
        raise SystemExit("give at least one --candidate KNOB=V1,V2,...")
    a.base_knobs, cand = _rehearse(a, parse_assign(a.base, False), cand)
    _preflight_first(a, base_knobs=a.base_knobs, candidates=cand)
    kw = _kwargs_from(a)
    summary = tune(
        a.model,
        cand,
        plateau=a.plateau,
        gpu_minutes=a.gpu_minutes,
        max_steps=a.max_steps,
        couple=not a.no_couple,
        **kw,
    )
    print(json.dumps(summary, indent=2))
    print(f"outcome: {summary['outcome']['why']}", file=sys.stderr)  # stdout stays JSON
    return 0


def add_cli(subparsers: Any) -> None:
    """Register `sweep`, `tune` and `preflight` (each sets `func(args) -> int`)."""
    p = subparsers.add_parser("sweep", help="sweep one vLLM knob against an SLO")
    _common_cli(p)
    p.add_argument("--knob", required=True, help="e.g. max_num_seqs")
    p.add_argument("--values", required=True, help="comma-separated, e.g. 64,128,256")
    p.add_argument(
        "--couple",
        action="store_true",
        help="raise max_num_batched_tokens with max_num_seqs when needed",
    )
    p.add_argument("--no-early-stop", action="store_true")
    p.set_defaults(func=_cmd_sweep)

    t = subparsers.add_parser("tune", help="the SLO-driven closed loop: diagnose, sweep, keep")
    _common_cli(t)
    t.add_argument(
        "--candidate",
        action="append",
        metavar="KNOB=V1,V2,...",
        help="values to try for a knob (repeat per knob)",
    )
    t.add_argument("--plateau", type=float, default=0.02, help="min relative goodput gain")
    t.add_argument("--gpu-minutes", type=float, default=None, help="GPU-minute budget")
    t.add_argument("--max-steps", type=int, default=6)
    t.add_argument("--no-couple", action="store_true")
    t.set_defaults(func=_cmd_tune)

    f = subparsers.add_parser("preflight", help="check what a GPU run needs before it starts")
    f.add_argument("--model", required=True, help="model folder or hub id")
    f.add_argument(
        "--entry",
        choices=("serve", "llm"),
        default="serve",
        help="serve: vllm serve subprocesses (lab 02, sweep, tune); llm: LLM(...) (lab 01)",
    )
    f.add_argument("--out", default=None, help="output folder (writable, disk space)")
    f.add_argument("--port", type=int, default=None, help="the server's port (none: picked free)")
    f.add_argument("--host", default="127.0.0.1")
    f.add_argument("--load-format", default=None, help="dummy: the tokenizer must cover the vocab")
    f.add_argument("--tokenizer", default=None)
    f.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help="the largest value the run asks for (default: vLLM's)",
    )
    f.add_argument("--vllm-cmd", default="vllm", help="the vllm executable (split like a shell)")
    f.add_argument("--min-disk-gib", type=float, default=MIN_FREE_DISK_GIB)
    f.add_argument("--lang", choices=("en", "zh"), default="en")
    f.set_defaults(func=_cmd_preflight)
