#!/usr/bin/env python3
"""Where a served point's time goes: vLLM's start-up, the measured load, and the harness.

A point (lab.sweep.run_point) is one `vllm serve` start, a warm-up `vllm bench serve` call
and one or more window calls, then the server's stop. Only two parts of it are vLLM's work
we mean to pay for: the server's start-up and the measured load (vLLM's bench ``duration``
of each window: first request sent to last response). Everything else is the harness:

- each bench call's start-up before its first request (importing vLLM, loading the
  tokenizer, building the random prompts) and its exit after the last response;
- the warm-up's load (paid on purpose: it makes the window valid, lab.measure);
- the rest: the server's stop, /metrics closing, the gaps between calls.

A bench call run in the bench worker also logs its phases (``BenchPhases``, one
``# bench phases: {...}`` line at the end of its log): before vLLM's main run (arguments,
tokenizer, the random prompts), the main run up to the result table (the load and its
percentiles), and after it (the table, the result file).

``PointCost`` is the breakdown a point recorded (its "cost" key, in runs of 2026-12-01); ``point_cost``
derives it from a record, so runs recorded before the field existed get one too (their
warm-up load is read from warmup.json, below).

The harness's cost per point, read from a recorded run (points.jsonl and the point folders).

``point_cost`` does the arithmetic; the rest adds what lives in files: the
warm-up's load (vLLM's ``duration`` in warmup.json) for runs that did not record it, and
each bench call's start-up, from the call's start to vLLM's first log line in its log
(importing vLLM, parsing the arguments, loading the tokenizer). vLLM stamps its log in whole
seconds, cut down, so each value reads up to 1 s low, and a call that starts in well under a
second (a worker that imported vLLM before) can read slightly negative. The first window starts right after
the warm-up ends, so the warm-up's start is the first window's start less its wall time.

    python tools/investigate/cost.py RUN_DIR [RUN_DIR ...]     (a table and the summary)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course_utils.core.records import PointPaths, ServedPoint, read_jsonl, read_text
from course_utils.core.store import POINTS_FILE
from course_utils.core.vllm_logs import LOG_STAMP, stamp_datetime

BENCH_PHASES_MARK = "# bench phases: "

BENCH_MODES = ("cli", "worker", "mixed")


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 2)


@dataclass(frozen=True)
class BenchPhases:
    """One bench call's wall time in three parts (s; None: the marker was not printed)."""

    call_s: float
    before_main_s: float | None = None  # to vLLM's "Starting main benchmark run..."
    main_s: float | None = None  # from there to its result table (the load and its stats)
    after_s: float | None = None  # from the result table to the call's return

    def line(self) -> str:
        return BENCH_PHASES_MARK + json.dumps(asdict(self))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BenchPhases:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    @classmethod
    def in_log(cls, text: str) -> BenchPhases | None:
        """The last phases line of a bench call's log, if any."""
        for line in reversed(text.splitlines()):
            if line.startswith(BENCH_PHASES_MARK):
                try:
                    return cls.from_json(json.loads(line[len(BENCH_PHASES_MARK) :]))
                except (ValueError, TypeError):
                    return None
        return None


@dataclass
class PointCost:
    """Seconds of one point. ``bench_startup_s``: per bench call (warm-up first), the time
    from the call's start to its first request, when measured (None entries: not known).
    ``bench_mode``: "cli" (a `vllm bench serve` process per call), "worker" (one process
    that imported vLLM once, lab.benchworker) or "mixed" (a worker call fell back to the
    CLI); None for runs that did not record it."""

    server_start_s: float | None = None
    warmup_s: float | None = None
    warmup_load_s: float | None = None
    windows_s: float = 0.0
    windows_load_s: float = 0.0
    total_s: float | None = None
    bench_calls: int = 0
    bench_mode: str | None = None
    bench_startup_s: list[float | None] = field(default_factory=list)
    bench_phases: list[BenchPhases | None] = field(default_factory=list)

    @property
    def other_s(self) -> float | None:
        """Server stop, metrics, gaps: the total less start-up, warm-up and windows."""
        if self.total_s is None or self.server_start_s is None:
            return None
        return self.total_s - self.server_start_s - (self.warmup_s or 0.0) - self.windows_s

    @property
    def bench_overhead_s(self) -> float | None:
        """The bench calls' wall beyond their loads (start-up, prompts, exit)."""
        if self.warmup_s is not None and self.warmup_load_s is None:
            return None
        warm = (self.warmup_s or 0.0) - (self.warmup_load_s or 0.0)
        return warm + self.windows_s - self.windows_load_s

    @property
    def harness_s(self) -> float | None:
        """Everything beyond vLLM's start-up and the measured load."""
        if self.total_s is None or self.server_start_s is None:
            return None
        return self.total_s - self.server_start_s - self.windows_load_s

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            other_s=_r(self.other_s),
            bench_overhead_s=_r(self.bench_overhead_s),
            harness_s=_r(self.harness_s),
        )
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PointCost:
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        kw["bench_phases"] = [
            None if x is None else BenchPhases.from_json(x) for x in d.get("bench_phases") or []
        ]
        return cls(**kw)


def point_cost(
    point: Any,
    *,
    warmup_load_s: float | None = None,
    bench_startup_s: Sequence[float | None] | None = None,
    bench_mode: str | None = None,
    bench_phases: Sequence[BenchPhases | None] | None = None,
) -> PointCost:
    """The breakdown of a ``records.ServedPoint`` (duck-typed: startup_s, elapsed_s, warmup,
    windows). A window's load is vLLM's bench ``duration``; the warm-up's comes from
    ``warmup.load_s`` when recorded, else ``warmup_load_s``."""
    if bench_mode is not None and bench_mode not in BENCH_MODES:
        raise ValueError(f"bench_mode must be one of {BENCH_MODES}, not {bench_mode!r}")
    warm = point.warmup
    done = [w for w in point.windows if w.elapsed_s is not None]
    wl = getattr(warm, "load_s", None) if warm is not None else None
    return PointCost(
        server_start_s=_r(point.startup_s),
        warmup_s=_r(warm.elapsed_s) if warm is not None else None,
        warmup_load_s=_r(wl if wl is not None else warmup_load_s) if warm is not None else None,
        windows_s=round(sum(float(w.elapsed_s) for w in done), 2),
        windows_load_s=round(sum(float(w.bench.get("duration") or 0.0) for w in done), 2),
        total_s=_r(point.elapsed_s),
        bench_calls=(1 if warm is not None else 0) + len(point.windows),
        bench_mode=bench_mode,
        bench_startup_s=list(bench_startup_s or []),
        bench_phases=list(bench_phases or []),
    )


def _stats(xs: Sequence[float]) -> dict[str, float] | None:
    if not xs:
        return None
    return {
        "mean": round(sum(xs) / len(xs), 2),
        "min": round(min(xs), 2),
        "max": round(max(xs), 2),
        "sum": round(sum(xs), 2),
    }


def cost_summary(costs: Sequence[PointCost]) -> dict[str, Any]:
    """Per component over the points: mean, min, max and sum (s); the harness's share of
    the points' time; the bench calls' start-ups."""
    parts: dict[str, list[float | None]] = {
        "total_s": [c.total_s for c in costs],
        "server_start_s": [c.server_start_s for c in costs],
        "warmup_s": [c.warmup_s for c in costs],
        "warmup_load_s": [c.warmup_load_s for c in costs],
        "windows_s": [c.windows_s for c in costs],
        "windows_load_s": [c.windows_load_s for c in costs],
        "bench_overhead_s": [c.bench_overhead_s for c in costs],
        "other_s": [c.other_s for c in costs],
        "harness_s": [c.harness_s for c in costs],
        "bench_startup_s": [x for c in costs for x in c.bench_startup_s],
        "bench_before_main_s": [x.before_main_s for c in costs for x in c.bench_phases if x],
        "bench_after_s": [x.after_s for c in costs for x in c.bench_phases if x],
    }
    out: dict[str, Any] = {
        k: _stats([float(x) for x in v if x is not None]) for k, v in parts.items()
    }
    tot = sum(c.total_s for c in costs if c.total_s is not None and c.harness_s is not None)
    har = sum(c.harness_s for c in costs if c.total_s is not None and c.harness_s is not None)
    out["points"] = len(costs)
    out["bench_calls"] = sum(c.bench_calls for c in costs)
    out["harness_share"] = round(har / tot, 3) if tot > 0 else None
    return out


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
        stamps = [m.group(1) for m in LOG_STAMP.finditer(read_text(log, errors="replace"))]
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
    (its "cost" key) or one derived from its record and files."""
    d = Path(run_dir)
    out = []
    for rec in read_jsonl(d / POINTS_FILE):
        p = ServedPoint.from_json(rec)
        if p.status != "ok":
            continue
        if rec.get("cost"):
            out.append((p, PointCost.from_json(rec["cost"])))
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
        prog="python tools/investigate/cost.py", description=__doc__.split("\n\n")[0]
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
