#!/usr/bin/env python3
"""Copy a lab run fetched from the GPU host into labs/results/<gpu>-<date>/, small files only.

    python tools/gpu/collect.py FETCHED/labrun labs/results/h200-2026-11-29

Keeps every JSONL/JSON/CSV/PNG, the executed notebooks, `environment` and the logs. Shrinks
what is large: in a `vllm bench serve` result JSON, the per-request lists (`ttfts`, `itls`,
`output_lens`, `start_times`, ... written by --save-detailed) larger than --max-list-kb are
replaced by their summary (n, min, max, mean over all numbers); logs longer than
--max-log-kb keep their head and tail. Replay reads points.jsonl, tune.jsonl, knee.jsonl, results.jsonl,
params.json and the metrics series, which are never shrunk. Last, every metrics*.jsonl and
every log over --min-log-kb is gzipped (tools/gpu/compress_results.py: deterministic bytes;
readers find X.gz when X is absent through core.records.resolve_path).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any


def _numbers(v: Any) -> list[float]:
    if isinstance(v, list):
        return [x for e in v for x in _numbers(e)]
    return [float(v)] if isinstance(v, int | float) and not isinstance(v, bool) else []


def summarise_long_lists(record: dict[str, Any], max_bytes: int) -> bool:
    """Replace each list in ``record`` (vLLM's --save-detailed per-request lists) longer than
    ``max_bytes`` as JSON by {stripped_list, n, min, max, mean}, in place; True if any."""
    changed = False
    for k, v in list(record.items()):
        if isinstance(v, list) and len(json.dumps(v)) > max_bytes:
            nums = _numbers(v)
            record[k] = {"stripped_list": True, "n": len(v)}
            if nums:
                record[k].update(min=min(nums), max=max(nums), mean=sum(nums) / len(nums))
            changed = True
    return changed


def shrink_bench(path: Path, max_kb: int) -> bool:
    raw = json.loads(path.read_text())
    changed = summarise_long_lists(raw, max_kb * 1024)
    if changed:
        raw["_note"] = f"per-request lists over {max_kb} KB summarised by tools/gpu/collect.py"
        path.write_text(json.dumps(raw))
    return changed


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from course_utils.core.vllm_logs import JIT_LINE, SWEEP_LOG_MARKS  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capacity_probe import ARGS_LINE, MEMORY_LINE_MARKS  # noqa: E402
from compress_results import MIN_LOG_KB, compress  # noqa: E402

# vLLM lines kept from the cut middle of a long log: the JIT monitor's compiles (the
# validity gate's evidence), the periodic engine stats, the start-up memory accounting
# (a DEBUG capacity-probe log is long), each start's non-default args (where one start
# ends in a log of several) and a sweep's markers (which window a JIT fell in)
KEEP_LINES = (JIT_LINE.encode(), b"Avg prompt throughput",
              *(m.encode() for m in MEMORY_LINE_MARKS), ARGS_LINE.encode(),
              # a sweep log's combo and window boundaries (parse_sweep_log), and gridbench's
              # own lines (its warm-up and verdict per run)
              *(m.encode() for m in SWEEP_LOG_MARKS), b"gridbench: ")


def shrink_log(path: Path, max_kb: int) -> bool:
    data = path.read_bytes()
    if len(data) <= max_kb * 1024:
        return False
    half = max_kb * 512
    head_end = data.rfind(b"\n", 0, half) + 1 or half  # cut at line ends: no line split
    tail_start = data.find(b"\n", len(data) - half) + 1 or len(data) - half
    middle = data[head_end:tail_start]
    kept = b"".join(line for line in middle.splitlines(keepends=True)
                    if any(k in line for k in KEEP_LINES))
    cut = len(middle) - len(kept)
    path.write_bytes(data[:head_end] + f"[... {cut} bytes cut by collect.py; JIT-monitor and "
                     "engine-stats lines and sweep markers kept ...]\n".encode() + kept
                     + data[tail_start:])
    return True


def _not_regular(folder: str, names: list[str]) -> list[str]:
    """copytree's ignore: sockets, fifos and devices (not files a result is made of)."""
    return [n for n in names
            if not (os.path.isdir(os.path.join(folder, n)) or os.path.isfile(os.path.join(folder, n)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path, help="the fetched run folder (labrun)")
    ap.add_argument("dest", type=Path, help="labs/results/<gpu>-<date>")
    ap.add_argument("--max-list-kb", type=int, default=16)
    ap.add_argument("--max-log-kb", type=int, default=256)
    ap.add_argument("--min-log-kb", type=int, default=MIN_LOG_KB,
                    help="gzip logs larger than this (metrics series always)")
    args = ap.parse_args(argv)
    if not args.src.is_dir():
        ap.error(f"{args.src} is not a folder")
    args.dest.mkdir(parents=True, exist_ok=True)
    # regular files only: a live run folder can hold a bench worker's socket
    shutil.copytree(args.src, args.dest, dirs_exist_ok=True, ignore=_not_regular)
    for p in args.dest.rglob("*"):
        if p.is_file():
            p.chmod(0o644)  # fetched files are read-only
    shrunk = 0
    for p in args.dest.rglob("*.json"):
        # bench.json, the loop's warmup.json and a grid combo's run=N.warmup.json
        if p.name.startswith("bench") or p.name.endswith("warmup.json"):
            shrunk += shrink_bench(p, args.max_list_kb)
    for p in args.dest.rglob("*.log"):
        shrunk += shrink_log(p, args.max_log_kb)
    gzipped = compress(args.dest, args.min_log_kb)
    total = sum(p.stat().st_size for p in args.dest.rglob("*") if p.is_file())
    print(f"{args.dest}: {total / 1e6:.1f} MB, {shrunk} file(s) shrunk, {len(gzipped)} gzipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
