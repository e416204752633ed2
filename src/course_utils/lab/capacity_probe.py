"""The capacity probe: start the real `vllm serve` for named memory cases and record what
vLLM logged about its memory, so ``core.capacity``'s prediction can be checked case by case.

    python -m course_utils.lab.capacity_probe RUN_DIR CASE... [--budget-s 540]

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
import shlex
import sys
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course_utils.core import capacity
from course_utils.core.records import ProbeRecord, append_jsonl, read_jsonl
from course_utils.core.vllm_logs import memory_lines, memory_profile, startup_facts
from course_utils.lab.rehearsal import cuda_total
from course_utils.lab.server import ServerStartError, VllmServer

__all__ = ["CASES", "Case", "ModelSpec", "main", "run_case", "run_probe"]

CASE_S = 120.0  # one `vllm serve` start and stop of a 7-8B model on the H200 (60-136 s)
MAX_MODEL_LEN = 4096  # what both labs use on a 4090 (their max_model_len parameter)
REPO = Path(__file__).resolve().parents[3]
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


def _vs_prediction(rec: ProbeRecord) -> str:
    """vLLM's KV tokens against core.capacity's prediction (made without the log)."""
    got = rec.facts.get("kv_cache_tokens")
    fit = capacity.predict_case(rec.config, rec.gpu_total_bytes, rec.knobs, rec.entry)
    if not got:
        return f"no KV cache size logged (predicted {fit.kv_tokens:,} tokens)"
    return f"KV {got:,} tokens, predicted {fit.kv_tokens:,} ({(fit.kv_tokens - got) / got:+.1%})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m course_utils.lab.capacity_probe",
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
