"""``python -m course_utils sweep|tune|knee|preflight``: the lab harness from a terminal."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from course_utils.core import validate as v
from course_utils.core.capacity import GPUS
from course_utils.core.keep import OBJECTIVES
from course_utils.core.knobs import KnobError
from course_utils.core.knobs import get as get_knob
from course_utils.core.records import Workload
from course_utils.core.validate import (
    BadInput,
    parse_assign,
    parse_rates,
    parse_values,
    process_kwargs,
)
from course_utils.lab.measure import MeasureConfig
from course_utils.lab.preflight import MIN_FREE_DISK_GIB, preflight, requested_gmu
from course_utils.lab.server import gpu_gib

__all__ = ["add_cli", "process_kwargs", "workload_from_args"]


GPU_HELP = "the GPU the run is for (a name from core.capacity; the preset's size); 4090 = rtx4090"
gpu_name = v.gpu  # --gpu / --rehearse-gpu: core.validate.gpu_key


# the run flags of sweep, tune and knee that take a value: (flag, type, default, help)
_RUN_FLAGS: tuple[tuple[str, Any, Any, str | None], ...] = (
    ("--gpu", gpu_name, None, GPU_HELP),
    ("--slo", str, None, 'e.g. "ttft:300 tpot:50" (ms, p99)'),
    ("--rate", v.rate, None, "offered request rate (req/s)"),
    ("--input-len", v.positive_int, None, "512"),
    ("--output-len", v.positive_int, None, "128"),
    ("--num-prompts", v.positive_int, None, "200"),
    ("--prefix-len", v.non_negative_int, None, "0"),
    ("--max-concurrency", v.positive_int, None, None),
    ("--seed", v.non_negative_int, 0, "the sampling seed of window 0's prompts"),
    ("--load-format", str, None, "e.g. dummy (random weights)"),
    ("--tokenizer", str, None, None),
    ("--gpu-memory-gib", v.positive_float, None, None),
    ("--rehearse-gpu", gpu_name, None, "run at that GPU's memory budget and batch defaults"),
    ("--startup-timeout", v.positive_float, 900.0, None),
    ("--bench-timeout", v.positive_float, 1800.0, None),
    ("--vllm-cmd", str, "vllm", "the vllm executable (split like a shell)"),
    ("--port", v.port, None, "the servers' port (none: a free one)"),
    ("--patience", v.positive_int, 2, None),
    ("--repeats", v.non_negative_int, MeasureConfig.repeats, "extra windows: the spread"),
    ("--remeasure", v.non_negative_int, MeasureConfig.remeasure, "re-measures of invalid ones"),
    ("--warmup-share", v.share, None, "warm-up prompts as a share of --num-prompts"),
)


def _common_cli(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model path or HF id for `vllm serve`")
    p.add_argument("--out", required=True, help="output folder (points.jsonl, tune.jsonl)")
    p.add_argument(
        "--preset",
        help="a named workload (core.presets): its workload, SLO, base knobs (and tune's "
        "candidates) unless given here",
    )
    for flag, typ, default, what in _RUN_FLAGS:
        p.add_argument(flag, type=typ, default=default, help=what)
    p.add_argument("--base", action="append", metavar="KNOB=VALUE", help="fixed knob values")
    p.add_argument(
        "--workload",
        metavar="TRACE.jsonl",
        help="replay a trace (python -m course_utils workload): --num-prompts of its "
        "requests, its time scaled so its mean rate is --rate (default: as recorded); "
        "its lengths and shared prefixes replace --input-len, --output-len, --prefix-len",
    )
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--no-resume refuses a folder with finished points (nothing recorded is overwritten)",
    )
    p.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="request_goodput",
        help="request_goodput: vLLM's per-request goodput; gate: the p99 gate",
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

    cache = Path(a.out) / "gpu.json"
    here = None  # measured once on this host (cache), else the GPU table for --gpu, else torch
    if not cache.is_file() and a.gpu:
        here = GPUS[a.gpu].cuda_total_gib or GPUS[a.gpu].memory_gib
    r, base, sweeps = rehearsal.apply(
        a.rehearse_gpu, "serve", base, sweeps, here_total_gib=here, cache=cache
    )
    a.gpu_memory_gib = r.target_total_gib  # defaults of unset knobs: the target's
    for line in r.explain("en"):
        print(line, file=sys.stderr)
    return base, sweeps


# the load's flags: not given, they come from --preset, else from Workload's defaults
_LOAD = ("input_len", "output_len", "num_prompts", "prefix_len", "rate")


def _apply_preset(a: argparse.Namespace, *, tune: bool) -> None:
    """Fill what was not given from ``--preset`` (core.presets), then from the defaults."""
    from course_utils.core import presets

    if a.preset:
        try:
            pre = presets.get(a.preset, a.gpu or "rtx4090")
        except KeyError as exc:
            raise BadInput(f"--preset: {exc.args[0]}", "pick a preset and --gpu it has") from None
        for k in _LOAD:
            if getattr(a, k) is None:
                setattr(a, k, float(pre.rate) if k == "rate" else getattr(pre, k))
        a.slo = a.slo or pre.slo
        if pre.rehearse and not getattr(a, "rehearse_gpu", None):
            a.rehearse_gpu = pre.rehearse
        a.base = [f"{k}={val}" for k, val in pre.base.items()] + list(a.base or [])
        a.ignore_eos = True
        if getattr(a, "warmup_share", None) is None and pre.warmup_share is not None:
            a.warmup_share = pre.warmup_share
        if tune and not a.candidate:
            a.candidate = [
                f"{k}={','.join(str(x) for x in vs)}" for k, vs in pre.candidates.items()
            ]
    for k in _LOAD:
        if getattr(a, k) is None:
            setattr(a, k, getattr(Workload(), "request_rate" if k == "rate" else k))
    if hasattr(a, "warmup_share") and a.warmup_share is None:
        a.warmup_share = MeasureConfig.warmup_share
    if not a.slo:
        raise BadInput("no SLO given", 'give --slo "ttft:300 tpot:50" (or --preset NAME)')


def _base(a: argparse.Namespace) -> dict[str, Any]:
    """--base as given (a preset's first, the explicit ones win)."""
    out: dict[str, Any] = {}
    for item in a.base or []:
        out.update(parse_assign([item], False, "--base"))
    return out


def workload_from_args(a: Any, base: dict[str, Any] | None = None) -> Workload:
    """The workload of a command line (core.validate.workload_from_args); with
    ``--workload TRACE``: that trace (lab.workload.trace_from_args)."""
    if getattr(a, "workload", None):
        from course_utils.lab.workload import trace_from_args

        return trace_from_args(a)
    return v.workload_from_args(a, base)


def _kwargs_from(a: argparse.Namespace) -> dict[str, Any]:
    from course_utils.core.slo import SLO

    workload = workload_from_args(a)
    server_kwargs, bench_kwargs = process_kwargs(a)
    slo = SLO.parse(a.slo, rate=None if math.isinf(a.rate) else a.rate)
    same = ("resume", "patience", "gpu_memory_gib", "objective", "repeats", "remeasure")
    return {k: getattr(a, k) for k in (*same, "warmup_share")} | dict(
        workload=workload,
        slo=slo,
        out_dir=a.out,
        # the rehearsed knobs when --rehearse-gpu set them, else --base as given
        base_knobs=getattr(a, "base_knobs", None) or _base(a),
        server_kwargs=server_kwargs,
        bench_kwargs=bench_kwargs,
        progress=not a.no_progress,
    )


def _check_args(a: argparse.Namespace, base: dict[str, Any], cand: dict[str, list[Any]]) -> None:
    """Every argument and the output folder, before the machine (preflight) is asked:
    a bad flag costs no GPU time. Raises BadInput (one line)."""
    from course_utils.core.slo import SLO, SLOError
    from course_utils.core.store import check_run_folder
    from course_utils.lab.sweep import check_values

    try:
        SLO.parse(a.slo, rate=None if math.isinf(a.rate) else a.rate)
    except SLOError as exc:
        raise BadInput(f"--slo {a.slo!r}: {exc}", 'write e.g. --slo "ttft:300 tpot:50"') from None
    workload_from_args(a)
    process_kwargs(a)
    gib = gpu_gib(a.gpu_memory_gib or (GPUS[a.gpu].memory_gib if a.gpu else None))
    v.check_knobs(base, "--base", entry="serve")
    flag = "--values" if a.cmd == "sweep" else "--candidate"
    couple = a.couple if a.cmd == "sweep" else not getattr(a, "no_couple", False)
    for knob, vals in cand.items():
        try:
            check_values(knob, vals, base, couple, gib)
        except KnobError as exc:
            raise BadInput(
                f"{flag}: {exc}", "use values vLLM 0.26.0 accepts (knobs --validate)"
            ) from None
    check_run_folder(a.out, resume=a.resume)


def _preflight(a: argparse.Namespace, **kw: Any) -> Any:
    return preflight(
        a.model,
        output_dir=a.out,
        port=a.port,
        load_format=a.load_format,
        tokenizer=a.tokenizer,
        vllm_cmd=a.vllm_cmd,
        **kw,
    )


def _preflight_first(
    a: argparse.Namespace, *, base_knobs: dict[str, Any], candidates: dict[str, Any]
) -> None:
    """Before the first server: warnings to stderr; a failed check raises PreflightError."""
    report = _preflight(
        a, entry="serve", gpu_memory_utilization=requested_gmu(base_knobs, candidates)
    )
    for c in report.warnings():
        print(f"warning: {c.line('en')}", file=sys.stderr)
    report.raise_if_failed("en")


def _cmd_preflight(a: argparse.Namespace) -> int:
    report = _preflight(
        a,
        entry=a.entry,
        host=a.host,
        gpu_memory_utilization=a.gpu_memory_utilization,
        min_free_disk_gib=a.min_disk_gib,
    )
    print(report.table(a.lang), flush=True)
    report.raise_if_failed(a.lang)
    return 0


def _knob_name(name: str, flag: str) -> str:
    try:
        return get_knob(name).name
    except KnobError as exc:
        raise BadInput(
            f"{flag}: {exc}", "name a knob from `python -m course_utils knobs`"
        ) from None


def _cmd_sweep(a: argparse.Namespace) -> int:
    from course_utils.lab.sweep import sweep

    _apply_preset(a, tune=False)
    base, sweeps = _base(a), {_knob_name(a.knob, "--knob"): parse_values(a.values, "--values")}
    _check_args(a, base, sweeps)
    base, sweeps = _rehearse(a, base, sweeps)
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
    for r in recs:  # one JSON line a point
        sc = r.get("score") or {}
        row = {k: r.get(k) for k in ("value", "status", "reason")}
        row |= {k: sc.get(k) for k in ("gate_goodput", "request_goodput", "meets_slo")}
        row |= {"valid": r.get("valid"), "constraint": (r.get("diagnosis") or {}).get("constraint")}
        print(json.dumps(row))
    return 0


def _candidates(a: argparse.Namespace) -> dict[str, list[Any]]:
    cand = parse_assign(a.candidate, True, "--candidate")
    if not cand:
        raise BadInput("no --candidate given", "give --candidate KNOB=V1,V2 (or --preset NAME)")
    return {_knob_name(k, "--candidate"): vals for k, vals in cand.items()}


def _cmd_tune(a: argparse.Namespace) -> int:
    from course_utils.lab.tune import tune

    _apply_preset(a, tune=True)
    base, cand = _base(a), _candidates(a)
    _check_args(a, base, cand)
    a.base_knobs, cand = _rehearse(a, base, cand)
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
    """Register `sweep`, `tune`, `preflight` and `knee` (each sets `func(args) -> int`)."""
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
    p.set_defaults(func=_cmd_sweep, cmd="sweep")

    t = subparsers.add_parser("tune", help="the SLO-driven closed loop: diagnose, sweep, keep")
    _common_cli(t)
    t.add_argument("--candidate", action="append", metavar="KNOB=V1,V2", help="repeat per knob")
    t.add_argument(
        "--plateau", type=v.non_negative_float, default=0.02, help="min relative goodput gain"
    )
    t.add_argument("--gpu-minutes", type=v.positive_float, default=None, help="GPU-minute budget")
    t.add_argument("--max-steps", type=v.positive_int, default=6)
    t.add_argument("--no-couple", action="store_true")
    t.set_defaults(func=_cmd_tune, cmd="tune")

    f = subparsers.add_parser("preflight", help="check what a GPU run needs before it starts")
    f.add_argument("--model", required=True, help="model folder or hub id")
    f.add_argument("--entry", choices=("serve", "llm"), default="serve", help="llm: lab 01's LLM")
    f.add_argument("--out", default=None, help="output folder (writable, disk space)")
    f.add_argument("--port", type=v.port, default=None, help="the server's port (none: a free one)")
    f.add_argument("--host", default="127.0.0.1")
    f.add_argument("--load-format", default=None, help="dummy: the tokenizer must cover the vocab")
    f.add_argument("--tokenizer", default=None)
    f.add_argument(
        "--gpu-memory-utilization",
        type=v.knob_arg("gpu_memory_utilization"),
        default=None,
        help="the largest value the run asks for (default: vLLM's)",
    )
    f.add_argument("--vllm-cmd", default="vllm", help="the vllm executable (split like a shell)")
    f.add_argument("--min-disk-gib", type=v.non_negative_float, default=MIN_FREE_DISK_GIB)
    f.add_argument("--lang", choices=("en", "zh"), default="en")
    f.set_defaults(func=_cmd_preflight)

    k = subparsers.add_parser("knee", help="offered-rate scan on one server: where the SLO breaks")
    _common_cli(k)
    k.add_argument("--rates", required=True, help="offered req/s, comma-separated, e.g. 2,4,6,8")
    k.add_argument("--batch1-prompts", type=v.non_negative_int, default=0, help="one at a time")
    k.add_argument("--bracket-repeats", type=v.non_negative_int, default=1, help="at the knee")
    k.set_defaults(func=_cmd_knee, cmd="knee")


def _cmd_knee(a: argparse.Namespace) -> int:
    from course_utils.core.keep import pick_knee
    from course_utils.lab.knee import knee_scan

    _apply_preset(a, tune=False)
    base = _base(a)
    rates = parse_rates(a.rates)
    _check_args(a, base, {})
    _preflight_first(a, base_knobs=base, candidates={})
    kw = _kwargs_from(a)
    common = ("workload", "slo", "out_dir", "base_knobs", "gpu_memory_gib")
    recs = knee_scan(
        a.model,
        rates,
        **{k: kw[k] for k in (*common, "server_kwargs", "bench_kwargs")},
        batch1_prompts=a.batch1_prompts,
        bracket_repeats=a.bracket_repeats,
        progress=None if a.no_progress else (lambda m: print(m, file=sys.stderr)),
    )
    print(json.dumps(pick_knee(recs), indent=2, default=str))
    return 0
