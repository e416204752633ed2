"""vLLM's own grid (`vllm bench sweep serve`, 0.26.0) read back from its folder, the loop
(lab.tune) against it, and the book's table of both, from the committed comparison files
(labs/results/loop_vs_grid.json). Running the grid is GPU-host work: tools/gpu/gridrun.py.

A combo's folder is ``SERVE--`` + its ``_benchmark_name`` or its ``k=v`` pairs joined by "-"
(vllm/benchmarks/sweep/serve.py); each run is ``run=N.json`` (the bench result, serve
overrides merged in). A run's validity is lab.measure's gate as the grid's bench command
recorded it (``run=N.harness.json``) plus the JIT compiles vLLM logged inside it (the
sweep's log). ``compare`` judges the loop's pick against the grid's best by core.keep.decide.

    python -m course_utils grid [--lang zh] [--format json] [--index FILE]   (the book's table)
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core import presets
from course_utils.core.keep import best_point, decide, objective_value
from course_utils.core.records import (
    GZ,
    Scores,
    ServedPoint,
    Window,
    Workload,
    bench_summary,
    read_text,
    relative_spread,
)
from course_utils.core.slo import SLO, BenchResult, score

__all__ = [
    "CaseRow",
    "GridError",
    "case_table",
    "combo_label",
    "compare",
    "grid_points",
    "add_cli",
    "read_grid_meta",
    "rows",
]

DEFAULTS_NAME = "defaults"
GRID_FILE = "grid.json"  # what the grid was: spec, base knobs, combos, workload, SLO
HARNESS_SUFFIX = ".harness.json"  # next to run=N.json: the warm-up, the run, the gate
RUN_FILE = re.compile(r"^run=(\d+)\.json$")
SWEEP_LOG = re.compile(r"^sweep-(\d+)\.log(?:\.gz)?$")  # a recorded copy gzips long logs
RESULTS = Path(__file__).resolve().parents[3] / "labs" / "results"
INDEX = RESULTS / "loop_vs_grid.json"
OBJECTIVE = "request_goodput"


class GridError(ValueError):
    """A folder that is not what the grid's readers need (one line)."""


def combo_label(combo: Mapping[str, Any]) -> str:
    """ "defaults" or "k=v, k2=v2" (the `_benchmark_name` key is a name, not a knob)."""
    if combo.get("_benchmark_name") == DEFAULTS_NAME:
        return DEFAULTS_NAME
    return ", ".join(f"{k}={v}" for k, v in combo.items() if k != "_benchmark_name")


# --------------------------------------------------------------------------------------
# reading a grid's results: one served point per combo, one window per run
# --------------------------------------------------------------------------------------


def experiment_dir(path: Path) -> Path:
    """`-o DIR` or `DIR/EXPERIMENT`: the folder whose children are the SERVE-* combos."""
    if not path.is_dir():
        raise GridError(f"{path}: no such folder")

    def has_combos(p: Path) -> bool:
        return any(c.is_dir() and c.name.startswith("SERVE-") for c in p.iterdir())

    if has_combos(path):
        return path
    exps = [c for c in sorted(path.iterdir()) if c.is_dir() and has_combos(c)]
    if len(exps) > 1:
        raise GridError(f"{path}: several sweep experiments ({', '.join(e.name for e in exps)})")
    if not exps:
        raise GridError(f"{path} is not a `vllm bench sweep serve` output: no SERVE-*/run=N.json")
    return exps[0]


def combo_params(dirname: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """A combo's serve parameters from its folder name (``SERVE--k=v-k2=v2``), typed as its
    result JSON has them; {} for vLLM's defaults."""
    if raw.get("_benchmark_name") == DEFAULTS_NAME or dirname == f"SERVE--{DEFAULTS_NAME}":
        return {}
    body = dirname.removeprefix("SERVE-").lstrip("-").split("-BENCH-")[0]
    params: dict[str, Any] = {}
    for part in re.split(r"-(?=[A-Za-z_][\w.-]*=)", body):
        k, sep, v = part.partition("=")
        if sep:
            params[k] = raw.get(k, v)
    return params


def _near(d: Path, name: str, up: int = 2) -> Path | None:
    """``name`` in ``d`` or up to ``up`` folders above it."""
    for c in [d, *list(d.parents)[:up]]:
        if (c / name).is_file():
            return c / name
    return None


def read_grid_meta(grid_dir: str | Path) -> dict[str, Any] | None:
    """grid.json in the grid's folder or up to two folders above it."""
    f = _near(Path(grid_dir), GRID_FILE)
    return dict(json.loads(f.read_text())) if f else None


def harness_path(run_json: str | Path) -> Path:
    """``run=0.json`` -> ``run=0.harness.json`` next to it."""
    p = Path(run_json)
    return p.with_name(p.stem + HARNESS_SUFFIX)


def sweep_logs(dirs: Sequence[Path]) -> list[Path]:
    """The sweep-<call>.log files of the first folder that has any, by call."""
    for d in dirs:
        logs = {
            int(m.group(1)): f.with_name(f.name.removesuffix(GZ))
            for f in d.iterdir()
            if f.is_file() and (m := SWEEP_LOG.match(f.name))
        }
        if logs:
            return [logs[k] for k in sorted(logs)]
    return []


def _window(run: Path, raw: dict[str, Any], slo: SLO, index: int) -> Window:
    sc = score(BenchResult.from_json(dict(raw)), slo)
    h = harness_path(run)
    harness = json.loads(h.read_text()) if h.is_file() else {}
    done = harness.get("run", {})
    issues = list(harness.get("validity_issues", []))
    return Window(
        index=index,
        purpose="measure" if index == 0 else "repeat",
        seed=int(harness.get("workload", {}).get("seed", 0)),
        status="ok",
        valid=not issues,
        validity_issues=issues,
        prefix_cache_hit_rate=done.get("prefix_cache_hit_rate"),
        score=Scores.from_json(vars(sc)),
        bench=bench_summary(raw),
        load={"harness": bool(harness), "running_max": done.get("running_max")},
        elapsed_s=done.get("wall_s"),
    )


def grid_points(grid_dir: str | Path, slo: SLO | str) -> list[ServedPoint]:
    """One ServedPoint per combo (tag "grid", knob the combo's label, knobs its overrides
    over grid.json's base knobs), its runs as windows scored under ``slo``; a run without
    a harness file counts as valid (``load["harness"]`` False). In grid.json's order."""
    slo_ = SLO.parse(slo) if isinstance(slo, str) else slo
    exp = experiment_dir(Path(grid_dir))
    meta = read_grid_meta(exp) or {}
    base = dict(meta.get("base") or {})
    points = []
    for combo in sorted(c for c in exp.iterdir() if c.is_dir() and c.name.startswith("SERVE-")):
        runs = sorted(
            (int(m.group(1)), f) for f in combo.iterdir() if (m := RUN_FILE.match(f.name))
        )
        windows, params = [], {}
        for i, f in runs:
            try:
                raw = json.loads(f.read_text())
                params = combo_params(combo.name, raw)
                windows.append(_window(f, raw, slo_, i))
            except (json.JSONDecodeError, ValueError, KeyError) as exc:
                raise GridError(f"{f}: not a vLLM bench result ({exc})") from None
        if not windows:
            continue
        p = ServedPoint(
            key=combo.name,
            knob=combo_label(params) or DEFAULTS_NAME,
            value=None,
            knobs={**base, **params},
            workload=dict(meta.get("workload") or {}),
            slo=str(slo_),
            status="ok",
            tag="grid",
            base_knobs=base,
        )
        p.windows = windows
        points.append(p)
    if not points:
        raise GridError(f"{exp}: no SERVE-*/run=N.json")
    _jit_from_sweep_logs(exp, points)
    rank = {combo_label(c): i for i, c in enumerate(meta.get("combos") or [])}
    points.sort(key=lambda p: (rank.get(p.knob, len(rank)), p.key))
    return points


def _jit_from_sweep_logs(exp: Path, points: Sequence[ServedPoint]) -> None:
    """A JIT compile vLLM logged inside a run's measured window (core.vllm_logs
    .parse_sweep_log) makes that run invalid, as in lab.measure. The last server of a combo
    that finished a benchmark holds its runs (an earlier one was cut by a time budget)."""
    from course_utils.core.validity import jit_issue
    from course_utils.core.vllm_logs import parse_sweep_log

    last: dict[str, list[dict[str, Any]]] = {}
    for f in sweep_logs([exp.parent, exp.parent.parent]):
        for srv in parse_sweep_log(read_text(f, errors="replace"))["servers"]:
            try:
                over = ast.literal_eval(srv["overrides"] or "{}")
            except (ValueError, SyntaxError):
                continue
            if isinstance(over, dict) and srv["benchmarks_done"]:
                last[combo_label(over) or DEFAULTS_NAME] = srv["jit_windows"]
    for p in points:
        for w, jw in zip(p.windows, last.get(p.knob, []), strict=False):
            why = jit_issue(jw.get("jit") or [])
            if why:
                w.validity_issues.append(why)
                w.valid = False


# --------------------------------------------------------------------------------------
# the loop against the grid
# --------------------------------------------------------------------------------------

SameConfig = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 3)


def _combo(p: ServedPoint, objective: str) -> dict[str, Any]:
    return {
        "label": p.knob,
        "knobs": dict(p.knobs),
        "score": objective_value(p, objective) if p.valid else None,
        "spread": p.spread(objective),
        "runs": len(p.windows),
        "valid_runs": len(p.valid_windows),
        "meets_slo": p.meets_slo,
        "issues": [i for w in p.windows for i in w.validity_issues],
        "harness": all(bool(w.load.get("harness")) for w in p.windows),
    }


def _as_written(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return dict(a) == dict(b)


def same_config(meta: Mapping[str, Any]) -> SameConfig:
    """Whether two knob sets are one server for this grid: with the grid's GPU size
    (grid.json) its axes' knobs compare with vLLM's defaults filled in (a 2-knob grid spells
    out what the loop leaves unset); without it, as written."""
    gib = meta.get("gpu_memory_gib")
    names = [str(a[0]) for a in (meta.get("spec") or {}).get("axes") or []]
    if gib is None or not names:
        return _as_written

    def same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        eff = [knobs_mod.effective(k, names, gpu_memory_gib=float(gib)) for k in (a, b)]
        return eff[0] == eff[1]

    return same


def cross_spreads(
    grid: Sequence[ServedPoint], loop: Sequence[ServedPoint], objective: str, same: SameConfig
) -> dict[str, float]:
    """Per configuration both sides measured validly: (max - min) / mean over both sides'
    valid measurements of it, the spread between servers."""
    out: dict[str, float] = {}
    for g in grid:
        mine = next((p for p in loop if same(p.knobs, g.knobs)), None)
        if mine is None or not g.valid_windows or not mine.valid_windows:
            continue
        vals = [w.score.objective(objective) for p in (g, mine) for w in p.valid_windows if w.score]
        spread = relative_spread(vals)
        if spread is not None:
            out[g.knob] = round(spread, 4)
    return out


def _loop(
    tune_dir: Path, objective: str, plateau: float
) -> tuple[dict[str, Any], list[ServedPoint]]:
    from course_utils.core.store import tune_summary
    from course_utils.lab.replay import load_points_checked, replay_tune

    rep = replay_tune(tune_dir, plateau=plateau, objective=objective)
    points = [ServedPoint.from_json(r) for r in load_points_checked(tune_dir)]
    final = next((p for p in points if p.valid and p.knobs == rep["knobs"]), None)
    summary = tune_summary(tune_dir) or {}
    return {
        "dir": str(tune_dir),
        "knobs": rep["knobs"],
        "score": rep["score"],
        "spread": final.spread(objective) if final else None,
        "server_starts": len(points),
        "gpu_minutes": round(sum(float(p.elapsed_s or 0.0) for p in points) / 60.0, 2),
        "stop_reason": summary.get("stop_reason"),
        "score_as_run": summary.get("score"),
    }, points


def compare(
    grid_dir: str | Path,
    tune_dir: str | Path,
    slo: SLO | str,
    *,
    plateau: float = 0.02,
    objective: str = OBJECTIVE,
) -> dict[str, Any]:
    """The loop's final goodput against the grid's best on one workload and candidate set:
    the grid's best "beats" the loop's pick (its run in the grid when the grid has it) only
    when they lie further apart than the plateau and every measured spread (each side's
    run-to-run spread and the cross-server spread of configurations both measured)."""
    slo_ = SLO.parse(slo) if isinstance(slo, str) else slo
    gdir = Path(grid_dir)
    points = grid_points(gdir, slo_)
    meta = read_grid_meta(gdir) or {}
    best = best_point(points, objective=objective)
    loop, loop_points = _loop(Path(tune_dir), objective, plateau)
    same = same_config(meta)
    cross = cross_spreads(points, loop_points, objective, same)
    pick = next((p for p in points if same(p.knobs, loop["knobs"])), None)
    loop["label"] = pick.knob if pick is not None else None
    t = _near(gdir, "timing.json", 3)
    tim = json.loads(t.read_text()) if t else {}
    grid_side: dict[str, Any] = {
        "dir": str(gdir),
        "combos": [_combo(p, objective) for p in points],
        "best": None if best is None else _combo(best, objective),
        "server_starts": tim["server_starts"] if tim else len(points),
        "gpu_minutes": tim.get("gpu_minutes"),
        "wall_clock_minutes": round(tim["wall_clock_s"] / 60.0, 2)
        if tim.get("wall_clock_s")
        else None,
        "warmup": meta.get("warmup"),
        "combos_planned": [combo_label(c) for c in meta.get("combos") or []],
    }
    pick_score = objective_value(pick, objective) if pick is not None and pick.valid else None
    best_score = objective_value(best, objective) if best is not None else None
    return {
        "slo": str(slo_),
        "objective": objective,
        "plateau": plateau,
        "grid": grid_side,
        "loop": loop,
        "loop_pick_in_grid": None if pick is None else _combo(pick, objective),
        "cross_spread": cross,
        "ratios": {
            "loop_over_grid_best": _ratio(loop["score"], best_score),
            "pick_in_grid_over_grid_best": _ratio(pick_score, best_score),
            "server_starts_loop_over_grid": _ratio(
                loop["server_starts"], grid_side["server_starts"]
            ),
            "gpu_minutes_loop_over_grid": _ratio(loop["gpu_minutes"], grid_side["gpu_minutes"]),
        },
        "verdict": _verdict(pick, best, loop, objective, plateau, cross),
    }


def _verdict(
    pick: ServedPoint | None,
    best: ServedPoint | None,
    loop: dict[str, Any],
    objective: str,
    plateau: float,
    cross: dict[str, float],
) -> dict[str, Any]:
    """ "same" (the loop picked the grid's best), "tie", "grid_better" or "undecided"."""
    if best is None:
        return {"decision": "undecided", "why": "no valid combo in the grid", "gain": None}
    if pick is not None and pick.key == best.key:
        why = f"the loop's pick {best.knob} is the grid's best"
        return {"decision": "same", "why": why, "gain": 0.0}
    if pick is not None and pick.valid:
        current, where = objective_value(pick, objective), "the grid's run of the loop's pick"
        spreads = [s for s in (pick.spread(objective), loop.get("spread")) if s is not None]
    else:
        current, where = float(loop["score"] or 0.0), "the loop's own measurement"
        spreads = [loop["spread"]] if loop.get("spread") is not None else []
    spreads += list(cross.values())
    d = decide(
        [best],
        current,
        objective=objective,
        plateau=plateau,
        current_spread=max(spreads) if spreads else None,
    )
    return {
        "decision": {"keep": "grid_better", "revert": "tie"}.get(d.decision, d.decision),
        "why": f"against {where}: {d.why}",
        "gain": d.gain,
        "apart": d.apart,
        "margin": d.margin,
        "spread": d.spread,
    }


# --------------------------------------------------------------------------------------
# the book's table: one row per constraint, from labs/results/loop_vs_grid.json
# --------------------------------------------------------------------------------------


@dataclass
class CaseRow:
    """One constraint: what each side measured (request goodput, req/s) and how it ended.
    A case without a recorded side says so ("not_run", "partial"), never filled in."""

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
    verdict: str | None = (
        None  # compare()'s (same | tie | grid_better | undecided) or loop_unfinished
    )
    outcome: str | None = None  # keep.loop_outcome's
    note: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["workload"] = None if self.workload is None else self.workload.to_dict()
        return d


def _both(row: CaseRow, grid_dir: Path, loop_dir: Path, slo: str) -> list[dict[str, Any]]:
    """The row's numbers from compare(); returns the grid's combos."""
    from course_utils.lab.replay import replay_tune

    cmp = compare(grid_dir, loop_dir, slo)
    g, lp = cmp["grid"], cmp["loop"]
    row.loop, row.loop_knobs = lp["score"], dict(lp["knobs"])
    if g["best"] is not None:
        row.grid_best, row.grid_best_label = g["best"]["score"], g["best"]["label"]
    row.loop_over_grid_best = cmp["ratios"]["loop_over_grid_best"]
    row.restarts_loop, row.restarts_grid = lp["server_starts"], g["server_starts"]
    row.cross_spread = max(cmp["cross_spread"].values(), default=None)
    row.verdict = cmp["verdict"]["decision"]
    row.outcome = replay_tune(loop_dir, objective=OBJECTIVE)["outcome"]["outcome"]
    if row.outcome == "unfinished":  # a loop stopped before its end has not chosen yet
        row.verdict = "loop_unfinished"
    return list(g["combos"])


def case_row(case: Mapping[str, Any], results: Path = RESULTS, gpu: str = "h200") -> CaseRow:
    """The row of one case of the index: its grid and loop folders re-derived."""
    from course_utils.lab.replay import load_points_checked

    pre = presets.get(case["preset"], gpu) if case.get("preset") else None
    grid_dir = results / case["grid"] if case.get("grid") else None
    loop_dir = results / case["loop"] if case.get("loop") else None
    meta = (read_grid_meta(grid_dir) or {}) if grid_dir else {}
    slo = str(meta.get("slo") or (pre.slo if pre else "") or case.get("slo") or "")
    loop_pts = [ServedPoint.from_json(r) for r in load_points_checked(loop_dir)] if loop_dir else []
    base = next((p for p in loop_pts if p.knob == "baseline"), loop_pts[0] if loop_pts else None)
    if not slo and base is not None:
        slo = str(base.slo).split(" @ ")[0]  # the targets, without the rate
    w = base.workload if base else meta.get("workload") or (pre.workload_kwargs() if pre else None)
    row = CaseRow(
        case=str(case["case"]),
        status="not_run",
        workload=Workload(**w) if w else None,
        slo=slo or None,
        hardware=case.get("hardware"),
        handicapped_start=case.get("handicapped_start"),
        note=dict(case.get("note") or {}),
    )
    if grid_dir is None:
        return row
    if loop_dir is not None:
        combos = _both(row, grid_dir, loop_dir, slo)
    else:
        pts = grid_points(grid_dir, SLO.parse(slo))
        combos = [_combo(p, OBJECTIVE) for p in pts]
        best = best_point(pts, objective=OBJECTIVE)
        if best is not None:
            row.grid_best, row.grid_best_label = objective_value(best, OBJECTIVE), best.knob
        row.restarts_grid = len(pts)
    want = str(case.get("defaults_label") or DEFAULTS_NAME)
    valid = [c for c in combos if c["score"] is not None]  # a grid point is valid or unscored
    row.defaults = next((c["score"] for c in valid if c["label"] == want), None)
    row.combos_measured = len(valid)
    sp = _near(grid_dir, "serve_params.json", 1)  # the combos the sweep was asked for
    planned = meta.get("combos") or (json.loads(sp.read_text()) if sp else [])
    row.combos_planned = len(planned) or len(combos)
    whole = row.combos_measured == row.combos_planned and loop_dir is not None
    row.status = "measured" if whole else "partial"
    return row


def rows(index: Path = INDEX, results: Path | None = None) -> list[CaseRow]:
    """Every case of the index, in its order."""
    try:
        data = json.loads(Path(index).read_text())
    except FileNotFoundError:
        raise ValueError(
            f"{index}: no such file → fix: give a loop-vs-grid index, e.g. {INDEX}"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{index}: not JSON ({exc}) → fix: correct the line named, or restore the file"
        ) from None
    cases = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(cases, list) or not all(isinstance(c, dict) and "case" in c for c in cases):
        raise ValueError(
            f"{index}: not a loop-vs-grid index → fix: give a JSON object "
            '{"cases": [{"case": ..., "grid": ..., "loop": ...}, ...]} (labs/results/loop_vs_grid.json)'
        )
    return [case_row(c, results or Path(index).parent) for c in cases]


def case_table(case_rows: Sequence[CaseRow], lang: str = "en") -> str:
    """The rows as a Markdown table with their notes, in the page's language."""
    from course_utils.core.texts import constraint_table

    return constraint_table([r.as_dict() for r in case_rows], lang)


def _cmd_grid(a: Any) -> int:
    rs = rows(a.index)
    out = json.dumps([r.as_dict() for r in rs], indent=1, default=str)
    print(out if a.format == "json" else case_table(rs, a.lang))
    return 0


def add_cli(subparsers: Any) -> None:
    """Register `grid`: the book's loop-vs-grid table, re-derived from the recorded folders."""
    g = subparsers.add_parser("grid", help="the loop against vLLM's grid, one row per constraint")
    g.add_argument("--lang", choices=("en", "zh"), default="en")
    g.add_argument("--format", choices=("text", "json"), default="text")
    g.add_argument("--index", type=Path, default=INDEX, help="default: %(default)s")
    g.set_defaults(func=_cmd_grid)
