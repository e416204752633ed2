"""The loop against vLLM's grid, one row per constraint: the table of lab 02 and the SLO lesson.

``labs/results/loop_vs_grid.json`` lists the cases (a preset, and the recorded folders of the
loop and of vLLM's grid where they exist). Every number in a row is re-derived from those
folders: the two sides by ``lab.gridcompare.compare`` (or ``lab.grid.grid_points`` when only
the grid ran), the loop's ending by ``lab.replay.replay_tune`` (``keep.loop_outcome``). A case
without a recorded side says so: its row is "not run" or "partial", never filled in.

    python -m course_utils.lab.loopvsgrid [--lang zh] [--index FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.core import presets
from course_utils.core.keep import objective_value
from course_utils.core.records import ServedPoint, Workload
from course_utils.core.slo import SLO
from course_utils.lab.grid import grid_points, read_grid_meta

__all__ = ["INDEX", "CaseRow", "rows", "table"]

RESULTS = Path(__file__).resolve().parents[3] / "labs" / "results"
INDEX = RESULTS / "loop_vs_grid.json"
OBJECTIVE = "request_goodput"


@dataclass
class CaseRow:
    """One constraint: what each side measured (request goodput, req/s) and how it ended."""

    case: str
    status: str  # "measured" | "partial" | "not_run"
    workload: Workload | None = None
    slo: str | None = None
    hardware: str | None = None
    handicapped_start: str | None = None
    defaults: float | None = None  # the grid's run of vLLM's defaults
    loop: float | None = None  # the loop's final configuration, its own measurement
    loop_knobs: dict[str, Any] = field(default_factory=dict)
    grid_best: float | None = None
    grid_best_label: str | None = None
    loop_over_grid_best: float | None = None
    restarts_loop: int | None = None
    restarts_grid: int | None = None
    combos_measured: int = 0
    combos_planned: int = 0
    cross_spread: float | None = None  # the largest, over configurations both sides measured
    verdict: str | None = None  # gridcompare's: same | tie | grid_better | undecided
    outcome: str | None = None  # keep.loop_outcome's
    note: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["workload"] = None if self.workload is None else self.workload.to_dict()
        return d


def _workload(
    meta: Mapping[str, Any], loop: ServedPoint | None, pre: presets.Preset | None
) -> Workload | None:
    """The workload as measured (the loop's, else the grid's), else the preset's plan."""
    if loop is not None:
        return Workload(**loop.workload)
    if meta.get("workload"):
        return Workload(**meta["workload"])
    return Workload(**pre.workload_kwargs()) if pre is not None else None


def _loop_baseline(loop_dir: Path) -> ServedPoint | None:
    from course_utils.lab.replay import load_points_checked

    pts = [ServedPoint.from_json(r) for r in load_points_checked(loop_dir)]
    return next((p for p in pts if p.knob == "baseline"), pts[0] if pts else None)


def _grid_only(row: CaseRow, pts: Sequence[ServedPoint]) -> None:
    from course_utils.lab.gridcompare import grid_best

    best = grid_best(pts, OBJECTIVE)
    if best is not None:
        row.grid_best, row.grid_best_label = objective_value(best, OBJECTIVE), best.knob
    row.restarts_grid = len(pts)


def _both(row: CaseRow, grid_dir: Path, loop_dir: Path, slo: str) -> None:
    from course_utils.lab.gridcompare import compare
    from course_utils.lab.replay import replay_tune

    cmp = compare(grid_dir, loop_dir, slo, objective=OBJECTIVE)
    g, lp = cmp["grid"], cmp["loop"]
    row.loop, row.loop_knobs = lp["score"], dict(lp["knobs"])
    if g["best"] is not None:
        row.grid_best, row.grid_best_label = g["best"]["score"], g["best"]["label"]
    row.loop_over_grid_best = cmp["ratios"]["loop_over_grid_best"]
    row.restarts_loop, row.restarts_grid = lp["server_starts"], g["server_starts"]
    row.cross_spread = max(cmp["cross_spread"].values(), default=None)
    row.verdict = cmp["verdict"]["decision"]
    row.outcome = replay_tune(loop_dir, objective=OBJECTIVE)["outcome"]["outcome"]


def case_row(case: Mapping[str, Any], results: Path = RESULTS, gpu: str = "h200") -> CaseRow:
    """The row of one case of the index (see the module docstring)."""
    name = str(case["case"])
    pre = presets.get(case["preset"], gpu) if case.get("preset") else None
    grid_dir = results / case["grid"] if case.get("grid") else None
    loop_dir = results / case["loop"] if case.get("loop") else None
    meta = (read_grid_meta(grid_dir) or {}) if grid_dir else {}
    slo = str(meta.get("slo") or (pre.slo if pre else "") or case.get("slo") or "")
    loop_base = _loop_baseline(loop_dir) if loop_dir else None
    if not slo and loop_base is not None:
        slo = str(loop_base.slo).split(" @ ")[0]  # the targets, without the rate
    row = CaseRow(
        case=name,
        status="not_run",
        workload=_workload(meta, loop_base, pre),
        slo=slo or None,
        hardware=case.get("hardware"),
        handicapped_start=case.get("handicapped_start"),
        note=dict(case.get("note") or {}),
    )
    if grid_dir is None:
        return row
    pts = grid_points(grid_dir, SLO.parse(slo))
    if loop_dir is not None:
        _both(row, grid_dir, loop_dir, slo)
    else:
        _grid_only(row, pts)
    want = str(case.get("defaults_label") or "defaults")
    row.defaults = next(
        (objective_value(p, OBJECTIVE) for p in pts if p.knob == want and p.valid), None
    )
    row.combos_measured = sum(1 for p in pts if p.valid)
    row.combos_planned = len(meta.get("combos") or _serve_params(grid_dir)) or len(pts)
    whole = row.combos_measured == row.combos_planned and loop_dir is not None
    row.status = "measured" if whole else "partial"
    return row


def _serve_params(grid_dir: Path) -> list[Any]:
    """The sweep's ``--serve-params`` list (the combos it was asked for), next to its output."""
    for d in (grid_dir, grid_dir.parent):
        f = d / "serve_params.json"
        if f.is_file():
            return list(json.loads(f.read_text()))
    return []


def rows(index: Path = INDEX, results: Path | None = None) -> list[CaseRow]:
    """Every case of the index, in its order."""
    data = json.loads(Path(index).read_text())
    base = results or Path(index).parent
    return [case_row(c, base) for c in data["cases"]]


def table(case_rows: Sequence[CaseRow], lang: str = "en") -> str:
    """The rows as a Markdown table with their notes, in the page's language."""
    from course_utils.core.texts import constraint_table

    return constraint_table([r.as_dict() for r in case_rows], lang)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m course_utils.lab.loopvsgrid", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--index", type=Path, default=INDEX)
    ap.add_argument("--lang", choices=("en", "zh"), default="en")
    ap.add_argument("--json", action="store_true", help="the rows as JSON")
    a = ap.parse_args(argv)
    try:
        rs = rows(a.index)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps([r.as_dict() for r in rs], indent=1, default=str))
    else:
        print(table(rs, a.lang))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
