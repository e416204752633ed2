#!/usr/bin/env python3
"""The GPU host's files around one `vllm bench sweep serve` call (tools/gpu/side_by_side.sh,
grid_decode.sh, case.sh): its timing, the parts of a grid run on several GPUs merged, copies
of its results shrunk, and the servers it left on its port killed.

    python tools/gpu/sweep_files.py timing LOG TIMING.json --call-wall-s S [--rc RC]
    python tools/gpu/sweep_files.py merge OUT PART_DIR [PART_DIR ...]
    python tools/gpu/sweep_files.py shrink DIR [--max-kb 16]
    python tools/gpu/sweep_files.py cleanup --port P
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from course_utils.core.records import is_present, read_text
from course_utils.core.vllm_logs import parse_sweep_log
from course_utils.lab.grid import GRID_FILE, RUN_FILE, GridError, read_grid_meta

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect import summarise_long_lists  # noqa: E402


def add_timing(timing_path: Path, log_text: str, call_wall_s: float, rc: int) -> dict[str, Any]:
    """Append one device call's numbers (its sweep log, parse_sweep_log) to timing.json."""
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else {"calls": []}
    timing["calls"].append({"wall_s": round(call_wall_s, 2), "rc": rc, **parse_sweep_log(log_text)})
    calls = timing["calls"]
    timing["wall_s"] = round(sum(c["wall_s"] for c in calls), 2)
    timing["server_starts"] = sum(c["server_starts"] for c in calls)
    timing["gpu_minutes"] = round(timing["wall_s"] / 60.0, 2)
    for k in ("jit_in_benchmark", "jit_in_warmup"):
        timing[k] = sum(c.get(k, 0) for c in calls)
    timing_path.write_text(json.dumps(timing, indent=1))
    return timing


def merge_parts(out: str | Path, parts: Sequence[str | Path], experiment: str = "grid") -> Path:
    """One grid folder from parts run side by side (each a side_by_side.sh folder): the
    combos copied, the sweep logs renumbered, timing.json's calls joined (GPU minutes add
    up; ``wall_clock_s`` is the longest part). Returns the merged experiment folder."""
    o = Path(out)
    exp_out = o / "vllm_sweep" / experiment
    exp_out.mkdir(parents=True, exist_ok=True)
    calls: list[dict[str, Any]] = []
    part_walls: list[float] = []
    n_log = 0
    meta: dict[str, Any] | None = None
    for i, p in enumerate(Path(x) for x in parts):
        exp = p / "vllm_sweep" / experiment
        if not exp.is_dir():
            raise GridError(f"{p}: no vllm_sweep/{experiment} (part not run?)")
        for combo in sorted(c for c in exp.iterdir() if c.name.startswith("SERVE-")):
            shutil.copytree(combo, exp_out / combo.name, dirs_exist_ok=True)
        for log in sorted(p.glob("sweep-*.log"), key=lambda f: int(f.name[6:-4])):
            n_log += 1
            shutil.copy2(log, o / f"sweep-{n_log}.log")
        if (p / "timing.json").is_file():
            tim = json.loads((p / "timing.json").read_text())
            calls += [{**c, "part": i, "dir": str(p)} for c in tim.get("calls", [])]
            part_walls.append(float(tim.get("wall_s") or 0.0))
        meta = meta or read_grid_meta(p)
        for name in ("bench_cmd.txt", "serve_cmd.txt"):
            if (p / name).is_file() and not (o / name).exists():
                shutil.copy2(p / name, o / name)
    wall = round(sum(float(c.get("wall_s") or 0.0) for c in calls), 2)
    timing = {
        "calls": calls,
        "wall_s": wall,
        "gpu_minutes": round(wall / 60.0, 2),
        "server_starts": sum(int(c.get("server_starts") or 0) for c in calls),
        "wall_clock_s": round(max(part_walls), 2) if part_walls else None,
        "parts": len(parts),
    }
    (o / "timing.json").write_text(json.dumps(timing, indent=1))
    if meta is not None:  # every part's grid.json lists all combos; its own are "part_combos"
        meta = {k: v for k, v in meta.items() if k not in ("part", "part_combos")}
        (o / GRID_FILE).write_text(json.dumps(meta, indent=1))
    return exp_out


def shrink_results(path: str | Path, max_kb: int = 16) -> int:
    """In a copy of a sweep's results (vLLM's --resume rereads the originals): per-request
    lists over ``max_kb`` in every run=N.json and summary.json summarised (core.store), and
    summary.csv's columns that hold them dropped; returns how many files changed."""
    import csv

    n = 0
    csv.field_size_limit(sys.maxsize)
    for f in sorted(Path(path).rglob("summary.csv")):
        with open(f, newline="") as fh:
            table = list(csv.reader(fh))
        keep = [
            i
            for i in range(len(table[0]) if table else 0)
            if all(len(r[i]) <= max_kb * 1024 for r in table[1:] if i < len(r))
        ]
        if table and len(keep) < len(table[0]):
            with open(f, "w", newline="") as fh:
                csv.writer(fh).writerows([[r[i] for i in keep if i < len(r)] for r in table])
            n += 1
    for f in sorted(Path(path).rglob("*.json")):
        if not (RUN_FILE.match(f.name) or f.name == "summary.json"):
            continue
        data = json.loads(f.read_text())
        items = data if isinstance(data, list) else [data]
        if any([summarise_long_lists(x, max_kb * 1024) for x in items if isinstance(x, dict)]):
            f.write_text(json.dumps(data, indent=1))
            n += 1
    return n


def servers_on_port(port: int, proc_root: str | Path = "/proc") -> list[int]:
    """PIDs of `... serve ... --port PORT` processes (this job's servers, whatever started
    them: vLLM's sweep kills its server's group itself, unless it was killed first)."""
    out = []
    for d in Path(proc_root).iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "serve" in argv and any(
            a == "--port" and i + 1 < len(argv) and argv[i + 1] == str(port)
            for i, a in enumerate(argv)
        ):
            out.append(int(d.name))
    return sorted(out)


def cleanup_port(port: int) -> list[int]:
    """SIGKILL the process group of every server on ``port``; return the groups killed."""
    import contextlib
    import os
    import signal

    groups = set()
    for pid in servers_on_port(port):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            groups.add(os.getpgid(pid))
    for g in sorted(groups - {os.getpgid(0)}):  # never our own group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(g, signal.SIGKILL)
    return sorted(groups)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/gpu/sweep_files.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("timing", help="add one call's timing to timing.json")
    t.add_argument("log")
    t.add_argument("out")
    t.add_argument("--call-wall-s", type=float, required=True)
    t.add_argument("--rc", type=int, default=0)
    m = sub.add_parser("merge", help="one grid folder from parts run on several GPUs")
    m.add_argument("out")
    m.add_argument("parts", nargs="+")
    s = sub.add_parser("shrink", help="summarise per-request lists in a copy of the results")
    s.add_argument("dir")
    s.add_argument("--max-kb", type=int, default=16)
    k = sub.add_parser("cleanup", help="kill the servers left on this port (their groups)")
    k.add_argument("--port", type=int, required=True)
    a = ap.parse_args(argv)
    if a.cmd == "timing":
        log = read_text(a.log, errors="replace") if is_present(a.log) else ""
        tim = add_timing(Path(a.out), log, a.call_wall_s, a.rc)
        n = len(tim["calls"])
        print(
            f"timing: {tim['server_starts']} server start(s), {tim['wall_s']:.0f} s wall over {n} call(s)"
        )
    elif a.cmd == "merge":
        try:
            print(merge_parts(a.out, a.parts))
        except GridError as exc:
            print(f"error: {exc} → fix: run every part first", file=sys.stderr)
            return 2
    elif a.cmd == "shrink":
        print(f"{shrink_results(a.dir, a.max_kb)} result file(s) shrunk in {a.dir}")
    else:
        print(f"killed process group(s): {cleanup_port(a.port) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
