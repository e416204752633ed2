"""``python -m course_utils workload``: a request log in, the trace vLLM replays out, and the
distribution printed; ``--workload TRACE`` of `tune`/`sweep` reads such a trace."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from course_utils.core.requestlog import read_log
from course_utils.core.workload import (
    CHUNK,
    TraceWorkload,
    distribution,
    problem,
    trace_text,
)


def cmd_workload(a: argparse.Namespace) -> int:
    src = Path(a.log)
    if not src.is_file():
        raise ValueError(problem(str(src), "no such file", "give the request log's path"))
    text = src.read_bytes().decode("utf-8", errors="replace")
    log = read_log(text, str(src), chunk=a.chunk, drop_failed=a.drop_failed)
    out = Path(a.out) if a.out else None
    if out is not None and out.exists():
        raise ValueError(
            problem(str(out), "exists (a trace is never overwritten)", "give another --out")
        )
    d = distribution(log.requests, chunk=a.chunk, prefixes_known=log.prefixes_known)
    if a.format == "json":
        print(json.dumps({"format": log.fmt, **asdict(d), "notes": log.notes}, indent=2))
    else:
        print(f"read {src} ({log.fmt})")
        for n in log.notes:
            print(f"note: {n}")
        print(d.text())
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(trace_text(log.requests))
        if a.format != "json":
            print(
                f"wrote {out}: tune/sweep --workload {out} or lab 02's -p workload {out} "
                "replay it at the server's token counts (plain timed_trace: ~1.4 x on Qwen2.5)"
            )
    return 0


def add_parser(subparsers: Any) -> None:
    """Register ``workload`` (sets ``func(args) -> int``)."""
    p = subparsers.add_parser(
        "workload",
        help="a request log in, the trace vLLM replays out, its distribution printed",
    )
    p.add_argument(
        "log",
        help="OpenAI-style JSONL (timestamp, messages/prompt, usage), vllm bench serve "
        "--save-detailed JSON, or a timed_trace file (only printed)",
    )
    p.add_argument("--out", default=None, help="the trace to write (JSONL; never overwritten)")
    p.add_argument(
        "--chunk",
        type=int,
        default=CHUNK,
        help="tokens per hash id (vLLM's --timed-trace-chunk-hash-size; its KV block size)",
    )
    p.add_argument(
        "--drop-failed",
        action="store_true",
        help="leave failed requests out (else each is an error: its answer length is unknown)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_workload)


def trace_from_args(a: Any) -> TraceWorkload:
    """The workload of ``--workload TRACE``: ``--num-prompts`` requests of it (none: all), its
    time scaled to a mean rate of ``--rate`` (none or inf: as recorded); sets ``a.rate``."""
    rate = getattr(a, "rate", None)
    given = rate is not None and not math.isinf(rate)
    w = TraceWorkload.load(
        a.workload,
        num_prompts=getattr(a, "num_prompts", None),
        request_rate=rate if given else None,
        seed=getattr(a, "seed", 0) or 0,
        max_concurrency=getattr(a, "max_concurrency", None),
    )
    a.rate = w.request_rate
    return w


def slice_path(result_dir: str | Path, result_filename: str) -> Path:
    """Where the slice of a bench call is written: next to its result JSON."""
    return Path(result_dir) / (Path(result_filename).stem + ".trace.jsonl")


def write_slice(
    w: TraceWorkload, result_dir: str | Path, result_filename: str, token_ratio: float = 1.0
) -> Path:
    """Write the requests one bench call replays (its own seed's prompt blocks; the lengths
    as ``TraceWorkload.sent_requests``)."""
    path = slice_path(result_dir, result_filename)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(trace_text(w.sent_requests(token_ratio)))
    return path
