"""vLLM's own grid (`vllm bench sweep serve`, 0.26.0) on any workload over one or two knobs,
and the loop (lab.tune) against it.

vLLM 0.26.0 facts (vllm/benchmarks/sweep/):
- param_sweep.py ``ParameterSweep.read_json``: ``--serve-params`` is a JSON list of dicts,
  one per server configuration, run in that order (or a dict of named dicts). The sweep does
  NOT take a product of the keys inside it: a two-knob grid is the list of every pair, which
  ``grid_combos`` writes. Only ``--serve-params`` x ``--bench-params`` is a product.
- A dict's ``_benchmark_name`` names its folder and is not a flag; every other key becomes a
  flag of the serve command (``apply_to_cmd``: replaced if present, else appended; "_" keys
  written "--a-b"; a bool as ``--k`` / ``--no-k``). The folder is ``SERVE--`` + the name, or
  + ``k=v`` pairs joined by "-" (serve.py ``_get_comb_base_path``). vLLM's defaults are the
  dict ``{"_benchmark_name": "defaults"}``: the serve command unchanged, in
  ``SERVE--defaults``.
- A combo whose ``summary.json`` exists starts no server on ``--resume`` (serve.py
  ``_comb_needs_server``); a ``run=N.json`` that exists is not run again.

The grid's bench command is lab.gridbench (lab.measure's warm-up at the load's rate before
the sweep's own `vllm bench serve` run, the validity gate in ``run=N.harness.json``), or,
with ``num_warmups``, plain `vllm bench serve --num-warmups N` (vLLM's own warm-up: N copies
of the first request at once, which does not reach a load's batch sizes).

Running it (the sweep's inputs, the CLI of the GPU scripts): lab.gridrun.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.records import Scores, ServedPoint, Window, bench_summary
from course_utils.core.slo import SLO, BenchResult, score
from course_utils.lab.gridbench import harness_path
from course_utils.lab.sidebyside_evidence import (
    RUN_FILE,
    SideBySideError,
    combo_params,
    experiment_dir,
)

__all__ = [
    "DEFAULTS_NAME",
    "GRID_FILE",
    "GridSpec",
    "combo_label",
    "grid_combos",
    "grid_points",
    "merge_parts",
    "parse_grid",
    "reopen_rejected",
    "read_grid_meta",
]

DEFAULTS_NAME = "defaults"
GRID_FILE = "grid.json"  # what the grid was: spec, base knobs, combos, workload, SLO


@dataclass(frozen=True)
class GridSpec:
    """One or two knobs with their values. ``mode`` "product": every pair; "one-at-a-time":
    each value of each knob from the base knobs (vLLM's defaults first, as the loop starts)."""

    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    mode: str = "product"
    with_defaults: bool = False


def parse_grid(spec: str, *, with_defaults: bool | None = None) -> GridSpec:
    """``K=V1,V2`` (one knob), ``K1=... x K2=...`` (every pair) or ``K1=... + K2=...`` (one
    knob at a time from the base, vLLM's defaults included). Knob names are checked."""
    from course_utils.core.validate import parse_values

    text = spec.strip()
    if " x " in text and " + " in text:
        raise ValueError(f"grid {spec!r}: use ' x ' or ' + ', not both")
    mode = "one-at-a-time" if " + " in text else "product"
    parts = [p.strip() for p in re.split(r" [x+] ", text) if p.strip()]
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"grid {spec!r}: one or two knobs (K=V1,V2 x K2=V3,V4)")
    axes = []
    for p in parts:
        k, sep, v = p.partition("=")
        if not sep or not v.strip():
            raise ValueError(f"grid {spec!r}: expected KNOB=V1,V2,..., got {p!r}")
        name = knobs_mod.get(k.strip().lstrip("-").replace("-", "_")).name
        axes.append((name, tuple(parse_values(v))))
    if len({a[0] for a in axes}) != len(axes):
        raise ValueError(f"grid {spec!r}: a knob appears twice")
    wd = (mode == "one-at-a-time") if with_defaults is None else with_defaults
    return GridSpec(axes=tuple(axes), mode=mode, with_defaults=wd)


def combo_label(combo: Mapping[str, Any]) -> str:
    """ "defaults" or "k=v, k2=v2" (the `_benchmark_name` key is a name, not a knob)."""
    if combo.get("_benchmark_name") == DEFAULTS_NAME:
        return DEFAULTS_NAME
    return ", ".join(f"{k}={v}" for k, v in combo.items() if k != "_benchmark_name")


def grid_combos(
    spec: GridSpec,
    base: Mapping[str, Any] | None = None,
    *,
    gpu_memory_gib: float = 24.0,
    couple: bool = True,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``--serve-params`` records and the combos left out (one line each).

    Every combo is validated with the base knobs (core.knobs, this GPU size's defaults)
    before any server starts, because a server vLLM rejects aborts its whole sweep.
    One-at-a-time combos are coupled like ``tune(couple=True)`` (lab.sweep.couple_knobs);
    a product combo vLLM would reject is left out (both values were chosen)."""
    from course_utils.lab.sweep import _validate_each, couple_knobs

    base_ = knobs_mod.validate(dict(base or {}), entry="serve")
    raw: list[tuple[dict[str, Any], str | None]] = []
    if spec.with_defaults:
        raw.append(({}, None))
    if spec.mode == "product":
        names = [a[0] for a in spec.axes]
        one = names[0] if len(names) == 1 else None  # one knob: coupled like tune()
        raw += [
            (dict(zip(names, vs, strict=True)), one)
            for vs in itertools.product(*(a[1] for a in spec.axes))
        ]
    else:
        raw += [({k: v}, k) for k, vals in spec.axes for v in vals]
    out: list[dict[str, Any]] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for over, swept in raw:
        merged = {**base_, **over}
        try:
            checked = _validate_each(merged)  # each knob alone; the pair after coupling
            coupled: dict[str, Any] = {}
            if couple and swept is not None:
                checked, coupled = couple_knobs(checked, swept, gpu_memory_gib)
            knobs_mod.validate(checked, gpu_memory_gib=gpu_memory_gib, entry="serve")
        except knobs_mod.KnobError as exc:
            skipped.append(f"{combo_label(over) or DEFAULTS_NAME}: {exc}")
            continue
        combo = {k: checked[k] for k in over} | coupled if over else {}
        if not combo:
            combo = {"_benchmark_name": DEFAULTS_NAME}
        key = json.dumps(combo, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(combo)
    return out, skipped


def split(combos: Sequence[Mapping[str, Any]], part: int, parts: int) -> list[dict[str, Any]]:
    """Part ``part`` (0-based) of ``parts``: every parts-th combo, for one GPU each."""
    if not 0 <= part < parts:
        raise ValueError(f"part {part} of {parts}: give 0 <= part < parts")
    return [dict(c) for c in combos[part::parts]]


# --------------------------------------------------------------------------------------
# reading a grid's results as served points (one per combo, one window per run)
# --------------------------------------------------------------------------------------


def read_grid_meta(grid_dir: str | Path) -> dict[str, Any] | None:
    """grid.json in the grid's folder or up to two folders above it."""
    d = Path(grid_dir)
    for c in (d, d.parent, d.parent.parent):
        f = c / GRID_FILE
        if f.is_file():
            return dict(json.loads(f.read_text()))
    return None


def _params(dirname: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    if raw.get("_benchmark_name") == DEFAULTS_NAME or dirname == f"SERVE--{DEFAULTS_NAME}":
        return {}
    return combo_params(dirname, raw)


def _window(run: Path, raw: dict[str, Any], slo: SLO, index: int) -> Window:
    res = BenchResult.from_json(dict(raw))
    sc = score(res, slo)
    h = harness_path(run)
    harness = json.loads(h.read_text()) if h.is_file() else None
    issues = list(harness["validity_issues"]) if harness else []
    return Window(
        index=index,
        purpose="measure" if index == 0 else "repeat",
        seed=int((harness or {}).get("workload", {}).get("seed", 0)),
        status="ok",
        valid=not issues,
        validity_issues=issues,
        prefix_cache_hit_rate=(harness or {}).get("run", {}).get("prefix_cache_hit_rate"),
        score=Scores(
            gate_goodput=sc.gate_goodput,
            request_goodput=sc.request_goodput,
            request_throughput=sc.request_throughput,
            meets_slo=sc.meets_slo,
            violations=list(sc.violations),
        ),
        bench=bench_summary(raw),
        load={
            "harness": harness is not None,
            "running_max": (harness or {}).get("run", {}).get("running_max"),
        },
        elapsed_s=(harness or {}).get("run", {}).get("wall_s"),
    )


def grid_points(grid_dir: str | Path, slo: SLO | str) -> list[ServedPoint]:
    """One ServedPoint per combo of a `vllm bench sweep serve` output (tag "grid", knob the
    combo's label, knobs its overrides merged into grid.json's base knobs when found), its
    runs as windows scored under ``slo``; a run's validity is gridbench's harness.json
    (a run without one is taken as valid: ``load["harness"]`` is False). In grid.json's
    combo order when known, else by folder."""
    slo_ = SLO.parse(slo) if isinstance(slo, str) else slo
    exp = experiment_dir(Path(grid_dir))
    meta = read_grid_meta(exp) or {}
    base = dict(meta.get("base") or {})
    order = [combo_label(c) for c in meta.get("combos") or []]
    points = []
    for combo in sorted(c for c in exp.iterdir() if c.is_dir() and c.name.startswith("SERVE-")):
        runs = sorted(
            (f for f in combo.iterdir() if RUN_FILE.match(f.name)),
            key=lambda f: int(RUN_FILE.match(f.name).group(1)),  # type: ignore[union-attr]
        )
        if not runs:
            continue
        windows, params = [], {}
        for f in runs:
            try:
                raw = json.loads(f.read_text())
                params = _params(combo.name, raw)
                windows.append(_window(f, raw, slo_, int(RUN_FILE.match(f.name).group(1))))  # type: ignore[union-attr]
            except (json.JSONDecodeError, ValueError, KeyError) as exc:
                raise SideBySideError(f"{f}: not a vLLM bench result ({exc})") from None
        label = combo_label(params) or DEFAULTS_NAME
        p = ServedPoint(
            key=combo.name,
            knob=label,
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
        raise SideBySideError(f"{exp}: no SERVE-*/run=N.json")
    _jit_from_sweep_logs(exp, points)
    rank = {lab: i for i, lab in enumerate(order)}
    points.sort(key=lambda p: (rank.get(p.knob, len(rank)), p.key))
    return points


def _jit_from_sweep_logs(exp: Path, points: Sequence[ServedPoint]) -> None:
    """A JIT compile vLLM logged inside a run's measured window (the server's output in the
    sweep's log, after the run's "Starting main benchmark run...": core.vllm_logs
    .parse_sweep_log) makes that run invalid, as in lab.measure. The last server of a combo
    that finished a benchmark holds its runs (an earlier one was cut by a time budget)."""
    import ast

    from course_utils.core.records import read_text
    from course_utils.core.validity import jit_issue
    from course_utils.core.vllm_logs import parse_sweep_log
    from course_utils.lab.sidebyside_evidence import _find_sweep_logs

    logs = _find_sweep_logs([exp.parent, exp.parent.parent])
    last: dict[str, list[dict[str, Any]]] = {}
    for f in logs:
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


def reopen_rejected(grid_dir: str | Path, slo: SLO | str, rejected: str | Path) -> list[str]:
    """Move each combo with no valid run (the validity gate: gridbench's harness and the JIT
    compiles in the sweep's log) from the sweep into ``rejected/<folder>-<n>``, so that
    vLLM's ``--resume`` serves and measures it again; the rejected runs stay on disk as
    evidence. Returns the moved combos' labels."""
    try:
        exp = experiment_dir(Path(grid_dir))
        points = grid_points(grid_dir, slo)
    except SideBySideError:  # no combo finished a run yet: nothing was judged
        return []
    moved = []
    for p in points:
        if p.valid or not p.windows:
            continue
        n = 1
        while (Path(rejected) / f"{p.key}-{n}").exists():
            n += 1
        Path(rejected).mkdir(parents=True, exist_ok=True)
        shutil.move(str(exp / p.key), str(Path(rejected) / f"{p.key}-{n}"))
        moved.append(p.knob)
    return moved


# --------------------------------------------------------------------------------------
# two GPUs: halves of one grid, merged
# --------------------------------------------------------------------------------------


def merge_parts(out: str | Path, parts: Sequence[str | Path], experiment: str = "grid") -> Path:
    """One grid folder from parts run side by side (each a side_by_side.sh folder with
    vllm_sweep/<experiment>/SERVE-*, timing.json, sweep-N.log, grid.json): the combos
    copied, the sweep logs renumbered, timing.json's calls joined (GPU minutes add up over
    GPUs; ``wall_clock_s`` is the longest part). Returns the merged experiment folder."""
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
            raise SideBySideError(f"{p}: no vllm_sweep/{experiment} (part not run?)")
        for combo in sorted(c for c in exp.iterdir() if c.name.startswith("SERVE-")):
            shutil.copytree(combo, exp_out / combo.name, dirs_exist_ok=True)
        for log in sorted(p.glob("sweep-*.log"), key=lambda f: int(re.sub(r"\D", "", f.name))):
            n_log += 1
            shutil.copy2(log, o / f"sweep-{n_log}.log")
        t = p / "timing.json"
        if t.is_file():
            tim = json.loads(t.read_text())
            calls += [{**c, "part": i, "dir": str(p)} for c in tim.get("calls", [])]
            part_walls.append(float(tim.get("wall_s") or 0.0))
        if meta is None:
            meta = read_grid_meta(p)
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
