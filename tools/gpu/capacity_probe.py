#!/usr/bin/env python3
"""The capacity probe: start the real `vllm serve` for named memory cases and record what
vLLM logged about its memory, so ``core.capacity``'s prediction can be checked case by case.

    python tools/gpu/capacity_probe.py RUN_DIR CASE... [--budget-s 540]

Each case starts `vllm serve` (``VllmServer``, ``--load-format dummy``) with
``VLLM_LOGGING_LEVEL=DEBUG`` so the memory-profiling breakdown is in the log, waits for
``/health``, stops it, and appends ONE ``ProbeRecord`` to ``RUN_DIR/capacity/probe.jsonl``
(the serve log is ``RUN_DIR/capacity/<case>.log``). A case already in that file (ok or
failed) is not run again; to rerun one, delete its line. ``--budget-s``: no case starts
that cannot finish inside the budget (the mean wall time of this run's cases, else
``CASE_S``). ``CUDA_VISIBLE_DEVICES`` is honoured: vLLM runs on the GPU it names, and the
CUDA total is read for that GPU only (one short ``torch`` subprocess, kept in
``RUN_DIR/capacity/gpu.json``).

A rehearsed case (``target="rtx4090"``) runs at the 4090's budget on a bigger GPU:
``core.capacity.rehearse`` scales ``--gpu-memory-utilization`` so total x utilisation is the
4090's and passes the 4090's batch defaults, which the bigger GPU would not pick.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course_utils.core import capacity
from course_utils.core.records import append_jsonl, read_jsonl
from course_utils.core.vllm_logs import last_match, startup_facts
from course_utils.lab.rehearsal import cuda_total
from course_utils.lab.server import ServerStartError, VllmServer

__all__ = ["CASES", "Case", "ModelSpec", "main", "run_case", "run_probe"]

# --------------------------------------------------------------------------------------
# the memory profile behind "Available KV cache memory" (v1/worker/gpu_worker.py)
# --------------------------------------------------------------------------------------

# Each (field, pattern) quotes the 0.26.0 format it reads; GiB values are format_gib (two
# decimals, vllm/utils/mem_utils.py). DEBUG lines need VLLM_LOGGING_LEVEL=DEBUG.
_F = r"(-?[\d.]+)"
_MEMORY: list[tuple[tuple[str, ...], re.Pattern[str]]] = [
    # gpu_worker.py determine_available_memory (DEBUG): "Initial free memory: %s GiB;
    # Requested memory: %f (util), %s GiB"
    (
        ("init_free_gib", "util", "requested_gib"),
        re.compile(rf"Initial free memory: {_F} GiB; Requested memory: {_F} \(util\), {_F} GiB"),
    ),
    # mem_utils.py MemoryProfilingResult.__repr__ (DEBUG, logger.debug(profile_result))
    (
        ("non_kv_gib", "torch_peak_increase_gib", "non_torch_increase_gib", "weights_memory_gib"),
        re.compile(
            rf"Total non KV cache memory: {_F}GiB; torch peak memory increase: {_F}GiB; "
            rf"non-torch forward increase memory: {_F}GiB; weights memory: {_F}GiB\."
        ),
    ),
    # gpu_worker.py compile_or_warm_up_model (INFO): "Free memory on device ({free}/{total}
    # GiB) on startup. Desired GPU memory utilization is ({util}, {requested} GiB). Actual
    # usage is {w} GiB for weight, {p} GiB for peak activation, {n} GiB for non-torch memory,
    # and {cg} GiB for CUDAGraph memory. Replace gpu_memory_utilization config with
    # `--kv-cache-memory={b}` ..., or `--kv-cache-memory={b}` ..."
    (
        (
            "init_free_gib",
            "total_gib",
            "util",
            "requested_gib",
            "weights_memory_gib",
            "torch_peak_increase_gib",
            "non_torch_increase_gib",
            "cudagraph_gib",
            "kv_bytes_to_requested",
            "kv_bytes_to_gpu",
        ),
        re.compile(
            rf"Free memory on device \({_F}/{_F} GiB\) on startup\. Desired GPU memory "
            rf"utilization is \({_F}, {_F} GiB\)\. Actual usage is {_F} GiB for weight, "
            rf"{_F} GiB for peak activation, {_F} GiB for non-torch memory, and {_F} GiB for "
            r"CUDAGraph memory\. Replace gpu_memory_utilization config with "
            r"`--kv-cache-memory=(-?\d+)`.*?`--kv-cache-memory=(-?\d+)`"
        ),
    ),
    # gpu_model_runner.py profile_cudagraph_memory (V1 runner only; V2 returns 0 silently):
    # "Estimated CUDA graph memory: %.2f GiB total"
    (("cudagraph_estimate_gib",), re.compile(rf"Estimated CUDA graph memory: {_F} GiB total")),
    # gpu/model_runner.py and gpu_model_runner.py capture_model: "Graph capturing finished in
    # %.0f secs, took %.2f GiB"
    (("cudagraph_gib",), re.compile(rf"Graph capturing finished in \d+ secs, took {_F} GiB")),
    # gpu_worker.py: "Available KV cache memory: %s GiB"
    (("available_kv_gib",), re.compile(rf"Available KV cache memory: {_F} GiB")),
    # config/scheduler.py: "Chunked prefill is enabled with max_num_batched_tokens=%d."
    (("max_num_batched_tokens",), re.compile(r"max_num_batched_tokens=(\d+)\.")),
]
_INTS = {"kv_bytes_to_requested", "kv_bytes_to_gpu", "max_num_batched_tokens"}
# gpu_worker.py init_device: logger.info_once("Using V2 Model Runner")
_V2 = "Using V2 Model Runner"
_MARKS = "Initial free memory:|Total non KV cache memory:|Free memory on device (|Estimated CUDA \
graph memory:|Graph capturing finished|Available KV cache memory:|GPU KV cache size:|Maximum \
concurrency for|Model loading took|max_num_batched_tokens="
# entrypoints/serve/utils/api_utils.py: "non-default args: %s", once per start (a
# log holding several starts is split at it)
ARGS_LINE = "non-default args: "
MEMORY_LINE_MARKS = (*_MARKS.split("|"), _V2)


@dataclass(frozen=True)
class MemoryProfile:
    """vLLM's start-up memory accounting as logged (GiB unless named bytes; None: not
    logged). ``available_kv_gib = requested - weights - torch peak increase - non-torch
    increase`` (minus the CUDA graph estimate only where the V1 runner logged one)."""

    total_gib: float | None = None
    init_free_gib: float | None = None
    util: float | None = None
    requested_gib: float | None = None
    weights_memory_gib: float | None = None
    torch_peak_increase_gib: float | None = None
    non_torch_increase_gib: float | None = None
    non_kv_gib: float | None = None
    cudagraph_estimate_gib: float | None = None
    cudagraph_gib: float | None = None
    available_kv_gib: float | None = None
    kv_bytes_to_requested: int | None = None
    kv_bytes_to_gpu: int | None = None
    max_num_batched_tokens: int | None = None
    runner: str | None = None  # "v2" when the log says so

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def memory_lines(text: str) -> list[str]:
    """The lines of a log that carry start-up memory facts (kept verbatim in records)."""
    return [ln.strip() for ln in text.splitlines() if any(m in ln for m in MEMORY_LINE_MARKS)]


def memory_profile(text: str) -> MemoryProfile:
    """The last start's memory accounting from a vLLM 0.26.0 log (DEBUG lines optional)."""
    values: dict[str, Any] = {"runner": "v2" if _V2 in text else None}
    for names, pattern in _MEMORY:
        m = last_match(pattern, text)
        if m is None:
            continue
        for name, raw in zip(names, m.groups(), strict=True):
            values[name] = int(raw) if name in _INTS else float(raw)
    return MemoryProfile(**values)


@dataclass
class ProbeRecord:
    """One capacity-probe case: the serve config, the GPU it ran on
    (CUDA total, bytes) and, from the log, the start-up facts and the memory profile
    (``vllm_logs.StartupFacts`` / ``MemoryProfile`` as dicts, plus the lines verbatim)."""

    case: str
    status: str  # "ok" | "failed"
    model: str
    config: dict[str, Any]  # the model folder's config.json: the prediction's only model input
    entry: str  # whose defaults were passed: "serve" | "llm"
    knobs: dict[str, Any]
    gpu_total_bytes: int
    target_gpu: str | None = None  # rehearsed GPU (None: this GPU's own defaults)
    reason: str | None = None
    note: str = ""
    argv: list[str] = field(default_factory=list)
    started_at: str = ""
    startup_s: float | None = None
    wall_s: float | None = None
    log: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    memory_lines: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProbeRecord:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


CASE_S = 120.0  # one `vllm serve` start and stop of a 7-8B model on the H200 (60-136 s)
MAX_MODEL_LEN = 4096  # what both labs use on a 4090 (their max_model_len parameter)
REPO = Path(__file__).resolve().parents[2]
LLM_NOTE = (
    "lab 01 runs LLM(...); this case starts `vllm serve` with the LLM entry's defaults passed "
    "explicitly (EngineArgs.get_batch_defaults, UsageContext.LLM_CLASS): both build the same "
    "EngineCore and GPU worker from the same engine args, so the memory profile is the same"
)


@dataclass(frozen=True)
class ModelSpec:
    """A dummy model folder: where it lives on the GPU host and how to make it."""

    folder: str  # default path; env var ``env`` overrides
    env: str
    shipped: str | None = None  # a shipped config (course_utils/data/models)
    config: str | None = None  # or a config.json folder in the repo
    tokenizer_from: str | None = None  # another ModelSpec key with the same tokenizer


MODELS: dict[str, ModelSpec] = {
    "qwen-bf16": ModelSpec("/tmp/model-qwen2.5-7b-dummy", "MODEL", "qwen2.5-7b-instruct"),
    "qwen-awq": ModelSpec(
        "/tmp/model-qwen2.5-7b-awq-dummy",
        "AWQ_MODEL",
        "qwen2.5-7b-instruct-awq",
        tokenizer_from="qwen-bf16",
    ),
    "llama3-8b": ModelSpec(
        "/tmp/model-llama-3-8b-dummy",
        "LLAMA_MODEL",
        config="labs/data/models/llama-3-8b-instruct",
    ),
}


@dataclass(frozen=True)
class Case:
    """One serve config. ``target``: rehearse that GPU's budget and defaults (None: this
    GPU's own defaults, nothing passed but max_model_len). ``util``: on the target."""

    name: str
    model: str  # a MODELS key
    target: str | None
    entry: str  # whose batch defaults: "serve" (vllm serve) or "llm" (LLM(...))
    util: float | None = None  # None: vLLM's default
    note: str = ""


CASES: dict[str, Case] = {
    c.name: c
    for c in [
        Case("bf16-4090-serve", "qwen-bf16", "rtx4090", "serve"),
        Case("awq-4090-llm-080", "qwen-awq", "rtx4090", "llm", 0.80, LLM_NOTE),
        Case("awq-4090-llm-090", "qwen-awq", "rtx4090", "llm", 0.90, LLM_NOTE),
        Case("awq-4090-llm-094", "qwen-awq", "rtx4090", "llm", 0.94, LLM_NOTE),
        Case("bf16-h200-defaults", "qwen-bf16", None, "serve"),
        Case("llama3-8b-h200-defaults", "llama3-8b", None, "serve"),
        Case("llama3-8b-4090-serve", "llama3-8b", "rtx4090", "serve"),
    ]
}


def model_folder(key: str, *, build: bool = True) -> Path:
    """The dummy folder of a MODELS key, made with lab.modelfolder when it is missing."""
    from course_utils.lab import modelfolder

    spec = MODELS[key]
    path = Path(os.environ.get(spec.env) or spec.folder)
    if (path / "config.json").is_file() and (path / "tokenizer.json").is_file():
        return path
    if not build:
        raise FileNotFoundError(f"no model folder at {path}")
    tok = model_folder(spec.tokenizer_from) if spec.tokenizer_from else None
    modelfolder.make_dummy_model_folder(
        path,
        model=spec.shipped or "qwen2.5-7b-instruct",
        config=(REPO / spec.config) if spec.config else None,
        tokenizer_from=tok,
    )
    return path


def case_knobs(case: Case, total_bytes: int) -> dict[str, Any]:
    """The serve knobs of a case on a GPU of ``total_bytes`` (CUDA total)."""
    knobs: dict[str, Any] = {"max_model_len": MAX_MODEL_LEN}
    if case.target is not None:
        r = capacity.rehearse(
            case.target, total_bytes / capacity.GIB, entry=case.entry, util=case.util
        )
        knobs.update(r.knobs())
    elif case.util is not None:
        knobs["gpu_memory_utilization"] = case.util
    return knobs


def run_case(
    case: Case,
    out: Path,
    total_bytes: int,
    *,
    vllm_cmd: list[str],
    startup_timeout_s: float,
) -> ProbeRecord:
    """Start, wait for health, stop; the record of what vLLM logged."""
    t0 = time.monotonic()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    model = model_folder(case.model)
    config = json.loads((model / "config.json").read_text())
    knobs = case_knobs(case, total_bytes)
    log = out / f"{case.name}.log"
    log.unlink(missing_ok=True)  # a start killed before its record: begin the log again
    srv = VllmServer(
        str(model),
        knobs,
        load_format="dummy",
        vllm_cmd=vllm_cmd,
        log_path=log,
        env={"VLLM_LOGGING_LEVEL": "DEBUG"},
        startup_timeout_s=startup_timeout_s,
    )
    rec = ProbeRecord(
        case=case.name,
        status="ok",
        model=str(model),
        config=config,
        entry=case.entry,
        knobs=knobs,
        gpu_total_bytes=total_bytes,
        target_gpu=case.target,
        note=case.note,
        argv=srv.argv,
        started_at=started,
        log=log.name,
    )
    try:
        with srv:
            rec.startup_s = round(srv.startup_s or 0.0, 1)
    except ServerStartError as e:
        rec = replace(rec, status="failed", reason=e.reason)
    text = log.read_text(errors="replace") if log.is_file() else ""
    rec.facts = startup_facts(text).as_dict()
    rec.memory = memory_profile(text).as_dict()
    rec.memory_lines = memory_lines(text)
    rec.wall_s = round(time.monotonic() - t0, 1)
    return rec


def run_probe(
    run_dir: Path,
    names: list[str],
    *,
    budget_s: float,
    vllm_cmd: list[str],
    python: str = sys.executable,
    startup_timeout_s: float = 600.0,
) -> list[ProbeRecord]:
    """Every named case not yet recorded, while the budget lasts. Returns this run's."""
    t0 = time.monotonic()
    out = run_dir / "capacity"
    out.mkdir(parents=True, exist_ok=True)
    store = out / "probe.jsonl"
    done = {r.get("case") for r in read_jsonl(store)}
    todo = [n for n in names if n not in done]
    for n in names:
        if n in done:
            print(f"{n}: recorded, skipped")
    if not todo:
        return []
    gpu = cuda_total(out / "gpu.json", python)
    total = int(gpu["total"])
    print(
        f"GPU {gpu.get('name')} (CUDA_VISIBLE_DEVICES={gpu.get('cuda_visible_devices')}): "
        f"CUDA total {total / capacity.GIB:.2f} GiB"
    )
    ran: list[ProbeRecord] = []
    for i, name in enumerate(todo):
        spent = time.monotonic() - t0
        per_case = sum(r.wall_s or 0 for r in ran) / len(ran) if ran else CASE_S
        if spent + per_case > budget_s:
            print(
                f"budget: {spent:.0f} of {budget_s:.0f} s spent, a case takes ~{per_case:.0f} "
                f"s; not started: {', '.join(todo[i:])} (a rerun resumes)"
            )
            break
        rec = run_case(
            CASES[name],
            out,
            total,
            vllm_cmd=vllm_cmd,
            startup_timeout_s=min(startup_timeout_s, budget_s - spent),
        )
        append_jsonl(store, rec)
        ran.append(rec)
        print(f"{name}: {rec.status} in {rec.wall_s} s; " + (rec.reason or _vs_prediction(rec)))

    return ran


def predict_case(
    config: dict[str, Any],
    total_bytes: int,
    knobs: dict[str, Any],
    entry: str = "serve",
    name: str = "model",
    compile_cached: bool = False,
) -> capacity.Fit:
    """``predict`` for one recorded start: a config.json dict, the GPU's CUDA total in bytes
    and the knobs passed (unset ones take that GPU's defaults for ``entry``)."""
    shape = capacity.ModelShape.from_config(config, name)
    return capacity.predict(
        shape,
        capacity.custom_gpu(total_bytes / capacity.GIB),
        float(knobs.get("gpu_memory_utilization") or 0.92),
        int(knobs.get("max_model_len") or shape.max_position),
        str(knobs.get("kv_cache_dtype") or "auto"),
        entry=entry,
        max_num_seqs=knobs.get("max_num_seqs"),
        max_num_batched_tokens=knobs.get("max_num_batched_tokens"),
        compile_cached=compile_cached,
    )


def _vs_prediction(rec: ProbeRecord) -> str:
    """vLLM's KV tokens against core.capacity's prediction (made without the log)."""
    got = rec.facts.get("kv_cache_tokens")
    fit = predict_case(rec.config, rec.gpu_total_bytes, rec.knobs, rec.entry)
    if not got:
        return f"no KV cache size logged (predicted {fit.kv_tokens:,} tokens)"
    return f"KV {got:,} tokens, predicted {fit.kv_tokens:,} ({(fit.kv_tokens - got) / got:+.1%})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python tools/gpu/capacity_probe.py",
        description="Start vllm serve per memory case and record what vLLM logged.",
    )
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("cases", nargs="*", help=f"case names (default all): {', '.join(CASES)}")
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument("--startup-timeout-s", type=float, default=600.0)
    ap.add_argument("--vllm-cmd", default="vllm")
    ap.add_argument("--python", default=sys.executable, help="a Python with torch (CUDA total)")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    a = ap.parse_args(argv)
    if a.list:
        for c in CASES.values():
            print(
                f"{c.name}: {c.model}, {c.entry} defaults, "
                f"{'rehearsed ' + c.target if c.target else 'own defaults'}"
                + (f", util {c.util}" if c.util else "")
            )
        return 0
    names = a.cases or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(
            f"error: unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}",
            file=sys.stderr,
        )
        return 2
    try:
        run_probe(
            a.run_dir,
            names,
            budget_s=a.budget_s,
            vllm_cmd=shlex.split(a.vllm_cmd),
            python=a.python,
            startup_timeout_s=a.startup_timeout_s,
        )
    except (RuntimeError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
