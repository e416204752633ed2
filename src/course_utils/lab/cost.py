"""The harness's cost per point, read from a recorded run (points.jsonl and the point folders).

``core.cost.point_cost`` does the arithmetic; this module adds what lives in files: the
warm-up's load (vLLM's ``duration`` in warmup.json) for runs that did not record it, and
each bench call's start-up, from the call's start to vLLM's first log line in its log
(importing vLLM, parsing the arguments, loading the tokenizer). vLLM stamps its log in whole
seconds, cut down, so each value reads up to 1 s low, and a call that starts in well under a
second (a worker that imported vLLM before) can read slightly negative. The first window starts right after
the warm-up ends, so the warm-up's start is the first window's start less its wall time.

    python -m course_utils.lab.cost RUN_DIR [RUN_DIR ...]     (a table and the summary)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course_utils.core.cost import BenchPhases, PointCost, cost_summary, point_cost
from course_utils.core.records import PointPaths, ServedPoint, read_jsonl, read_text
from course_utils.core.store import POINTS_FILE
from course_utils.core.vllm_logs import log_stamps, stamp_datetime

__all__ = [
    "bench_phases",
    "bench_startup_s",
    "bench_startups",
    "recorded_costs",
    "run_cost",
    "table",
]


def _utc_offset_s(p: ServedPoint, start_epoch: float) -> float:
    """The recording host's UTC offset: the point's local ``time`` against its start."""
    try:
        local = datetime.strptime(p.time, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return 0.0
    return round((local.timestamp() - start_epoch) / 900.0) * 900.0


def bench_startup_s(log: Path, started_at: float, year: int, utc_offset_s: float) -> float | None:
    """Seconds from a bench call's start (Unix time) to the first vLLM log stamp in its log
    (local time of the recording host, ``utc_offset_s`` ahead of UTC)."""
    try:
        stamps = log_stamps(read_text(log, errors="replace"))
    except OSError:
        return None
    if not stamps:
        return None
    local = stamp_datetime(stamps[0], year).replace(tzinfo=UTC).timestamp()
    return round(local - utc_offset_s - started_at, 2)


def _point_start(p: ServedPoint) -> float | None:
    w0 = next((w for w in p.windows if w.started_at is not None), None)
    if w0 is None or w0.started_at is None:
        return None
    warm = p.warmup.elapsed_s if p.warmup is not None and p.warmup.elapsed_s else 0.0
    return float(w0.started_at) - float(warm) - float(p.startup_s or 0.0)


def bench_startups(p: ServedPoint, paths: PointPaths) -> list[float | None]:
    """Each bench call's start-up (warm-up first, then the windows), from its log."""
    start = _point_start(p)
    if start is None:
        return []
    off = _utc_offset_s(p, start)
    year = int(p.time[:4]) if p.time[:4].isdigit() else datetime.now().year
    out: list[float | None] = []
    w0 = p.windows[0]
    if p.warmup is not None and w0.started_at is not None:
        warm_start = float(w0.started_at) - float(p.warmup.elapsed_s or 0.0)
        out.append(bench_startup_s(paths.warmup_log, warm_start, year, off))
    for w in p.windows:
        if w.started_at is None:
            out.append(None)
            continue
        out.append(bench_startup_s(paths.bench_log(w.index), float(w.started_at), year, off))
    return out


def bench_phases(p: ServedPoint, paths: PointPaths) -> list[BenchPhases | None]:
    """Each bench call's phases (warm-up first, then the windows), from the line the bench
    worker ends its log with; None for a call without one (the CLI, or an older run)."""

    def of(log: Path) -> BenchPhases | None:
        try:
            return BenchPhases.in_log(read_text(log, errors="replace"))
        except OSError:
            return None

    out = [of(paths.warmup_log)] if p.warmup is not None else []
    return out + [of(paths.bench_log(w.index)) for w in p.windows]


def _warmup_load(paths: PointPaths) -> float | None:
    try:
        d = json.loads(paths.warmup_json.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    v = d.get("duration") if isinstance(d, dict) else None
    return None if v is None else float(v)


def recorded_costs(run_dir: str | Path) -> list[tuple[ServedPoint, PointCost]]:
    """Each ok point of a run folder (points.jsonl) with its cost: the one it recorded
    (``ServedPoint.cost``) or one derived from its record and files."""
    d = Path(run_dir)
    out = []
    for rec in read_jsonl(d / POINTS_FILE):
        p = ServedPoint.from_json(rec)
        if p.status != "ok":
            continue
        if p.cost is not None:
            out.append((p, p.cost))
            continue
        paths = PointPaths.of(d, p.key)
        c = point_cost(
            p,
            warmup_load_s=_warmup_load(paths),
            bench_startup_s=bench_startups(p, paths),
            bench_mode="cli",  # runs before the bench worker had only the CLI
            bench_phases=bench_phases(p, paths),
        )
        out.append((p, c))
    return out


def run_cost(run_dirs: Sequence[str | Path]) -> dict[str, Any]:
    """The summary (core.cost.cost_summary) over the ok points of one or more run folders."""
    costs = [c for d in run_dirs for _, c in recorded_costs(d)]
    return cost_summary(costs)


def table(rows: list[tuple[ServedPoint, PointCost]]) -> str:
    def f(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.1f}"

    lines = [
        "| point | total | server start | warm-up (load) | windows (load) | bench start-ups |"
        " before / after vLLM's main run | other | harness |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p, c in rows:
        label = p.label
        ups = ", ".join(f(x) for x in c.bench_startup_s)
        ph = (
            ", ".join(
                "n/a" if x is None else f"{f(x.before_main_s)} / {f(x.after_s)}"
                for x in c.bench_phases
            )
            or "n/a"
        )
        lines.append(
            f"| {label} | {f(c.total_s)} | {f(c.server_start_s)} | {f(c.warmup_s)} "
            f"({f(c.warmup_load_s)}) | {f(c.windows_s)} ({f(c.windows_load_s)}) | {ups} | "
            f"{ph} | {f(c.other_s)} | {f(c.harness_s)} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m course_utils.lab.cost", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("run_dirs", nargs="+", help="folders with a points.jsonl")
    a = ap.parse_args(argv)
    for d in a.run_dirs:
        if not (Path(d) / POINTS_FILE).is_file():
            print(f"error: {d}: no points.jsonl", file=sys.stderr)
            return 2
        print(f"## {d}\n\n{table(recorded_costs(d))}\n")
    print(json.dumps(run_cost(a.run_dirs), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
