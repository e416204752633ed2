#!/usr/bin/env python3
"""Gzip the bulky files of recorded runs, deterministically, so the repo stays small.

    python tools/gpu/compress_results.py labs/results/h200-2026-11-29 [FOLDER ...]

In each folder (recursively) every ``metrics*.jsonl`` (0.5 s samples of vLLM's /metrics),
every ``*.trace.jsonl`` (the trace slice a bench call sent) and every ``*.log`` over --min-log-kb (but ``commands.log``, the run's own short
record) becomes ``X.gz`` through core.records.gzip_file (mtime
0, no file name in the header: the same input gives the same bytes, so re-recording a run
changes nothing). Readers find the twin through core.records.resolve_path ("the path, or
its .gz twin"). tools/gpu/collect.py runs this on every run it records; a live run keeps
writing plain files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from course_utils.core.records import gzip_file  # noqa: E402

MIN_LOG_KB = 64


def to_compress(folder: Path, min_log_kb: int = MIN_LOG_KB) -> list[Path]:
    """The plain files of ``folder`` that a recorded copy keeps gzipped."""
    series = (*folder.rglob("metrics*.jsonl"), *folder.rglob("*.trace.jsonl"))
    logs = (p for p in folder.rglob("*.log")
            if p.name != "commands.log" and p.stat().st_size > min_log_kb * 1024)
    return sorted(p for p in (*series, *logs) if p.is_file())


def compress(folder: Path, min_log_kb: int = MIN_LOG_KB) -> list[Path]:
    """Gzip what ``to_compress`` names; the ``.gz`` files written (replacing the plain)."""
    return [gzip_file(p) for p in to_compress(folder, min_log_kb)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", type=Path, nargs="+")
    ap.add_argument("--min-log-kb", type=int, default=MIN_LOG_KB)
    args = ap.parse_args(argv)
    for d in args.folders:
        if not d.is_dir():
            ap.error(f"{d} is not a folder")
    for d in args.folders:
        before = sum(p.stat().st_size for p in to_compress(d, args.min_log_kb))
        done = compress(d, args.min_log_kb)
        after = sum(p.stat().st_size for p in done)
        print(f"{d}: {len(done)} file(s) gzipped, {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
