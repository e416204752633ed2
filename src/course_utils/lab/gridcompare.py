"""The loop against vLLM's grid: the loop's final goodput as a fraction of the grid's best,
restarts and GPU minutes of each, and a tie called a tie.

The grid (lab.grid.grid_points) is re-derived from its recorded per-combo results; the loop
from its recorded points with today's validity rules (lab.replay.replay_tune). The verdict
uses the keep rule of the loop itself (core.keep.decide): the grid's best "beats" the loop's
pick only if the two lie further apart, as (max - min) / mean, than the plateau and the
measured run-to-run spread (of
the pick and the best in the grid when they ran more than once, and of the loop's own final
point), and the spread between the two sides: every configuration both measured, each on its
own server (``cross_spread``: (max - min) / mean over both sides' valid measurements; with one
run per combo in the grid it is the only measured spread of the grid's numbers); a smaller
difference is a tie. The pick is measured twice: by the loop on its own servers, and by the grid on
the grid's server for the same knobs; the ratio in the grid's own measurements is the one
that compares the choices.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.keep import best_point, decide, objective_value
from course_utils.core.records import ServedPoint, relative_spread
from course_utils.core.slo import SLO
from course_utils.lab.grid import combo_label, grid_points, read_grid_meta

__all__ = ["compare", "cross_spreads", "grid_best", "same_config", "table"]


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 3)


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


def grid_best(
    points: Sequence[ServedPoint], objective: str = "request_goodput"
) -> ServedPoint | None:
    """The grid's best valid combo under ``objective`` (core.keep.best_point, no plateau)."""
    return best_point(points, objective=objective)


def _timing(grid_dir: Path) -> dict[str, Any] | None:
    for c in (grid_dir, grid_dir.parent, grid_dir.parent.parent, grid_dir.parent.parent.parent):
        f = c / "timing.json"
        if f.is_file():
            return dict(json.loads(f.read_text()))
    return None


SameConfig = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]


def _as_written(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return dict(a) == dict(b)


def same_config(meta: Mapping[str, Any]) -> SameConfig:
    """Whether two knob sets are one server for this grid. A 2-knob grid spells every value
    out (``max_num_seqs=1024, max_num_batched_tokens=8192``) where the loop leaves vLLM's
    defaults unset: with the grid's GPU size (grid.json) the knobs of its axes are compared
    with the defaults filled in; without it, as written."""
    gib = meta.get("gpu_memory_gib")
    names = [str(a[0]) for a in (meta.get("spec") or {}).get("axes") or []]
    if gib is None or not names:
        return _as_written

    def same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        def eff(k: Mapping[str, Any]) -> dict[str, Any]:
            return knobs_mod.effective(k, names, gpu_memory_gib=float(gib))

        return eff(a) == eff(b)

    return same


def cross_spreads(
    grid: Sequence[ServedPoint],
    loop: Sequence[ServedPoint],
    objective: str,
    same: SameConfig | None = None,
) -> dict[str, float]:
    """Per configuration both sides measured validly (label -> (max - min) / mean over the
    grid's and the loop's valid measurements of it): the spread between servers."""
    same_ = same or _as_written
    out: dict[str, float] = {}
    for g in grid:
        mine = next((p for p in loop if same_(p.knobs, g.knobs)), None)
        if mine is None or not g.valid_windows or not mine.valid_windows:
            continue
        spread = relative_spread(
            [w.score.objective(objective) for p in (g, mine) for w in p.valid_windows if w.score]
        )
        if spread is not None:
            out[g.knob] = round(spread, 4)
    return out


def _loop(
    tune_dir: Path, slo: SLO, objective: str, plateau: float
) -> tuple[dict[str, Any], list[ServedPoint]]:
    from course_utils.lab.replay import load_points_checked, replay_tune
    from course_utils.lab.sidebyside_evidence import load_tune_dir

    rep = replay_tune(tune_dir, plateau=plateau, objective=objective)
    side = load_tune_dir(tune_dir, slo)
    points = [ServedPoint.from_json(r) for r in load_points_checked(tune_dir)]
    final = next((p for p in points if p.valid and p.knobs == rep["knobs"]), None)
    summary = {
        "dir": str(tune_dir),
        "knobs": rep["knobs"],
        "score": rep["score"],
        "spread": final.spread(objective) if final else None,
        "server_starts": side["server_starts"],
        "gpu_minutes": side["gpu_minutes"],
        "stop_reason": (side["summary"] or {}).get("stop_reason"),
        "score_as_run": (side["summary"] or {}).get("score"),
    }
    return summary, points


def compare(
    grid_dir: str | Path,
    tune_dir: str | Path,
    slo: SLO | str,
    *,
    plateau: float = 0.02,
    objective: str = "request_goodput",
) -> dict[str, Any]:
    """Both sides on one workload and candidate set (see the module docstring)."""
    slo_ = SLO.parse(slo) if isinstance(slo, str) else slo
    gdir = Path(grid_dir)
    points = grid_points(gdir, slo_)
    meta = read_grid_meta(gdir) or {}
    best = grid_best(points, objective)
    loop, loop_points = _loop(Path(tune_dir), slo_, objective, plateau)
    same = same_config(meta)
    cross = cross_spreads(points, loop_points, objective, same)
    pick = next((p for p in points if same(p.knobs, loop["knobs"])), None)
    loop["label"] = pick.knob if pick is not None else None
    tim = _timing(gdir)
    grid_side: dict[str, Any] = {
        "dir": str(gdir),
        "combos": [_combo(p, objective) for p in points],
        "best": None if best is None else _combo(best, objective),
        "server_starts": tim["server_starts"] if tim else len(points),
        "gpu_minutes": tim.get("gpu_minutes") if tim else None,
        "wall_clock_minutes": round(tim["wall_clock_s"] / 60.0, 2)
        if tim and tim.get("wall_clock_s")
        else None,
        "warmup": meta.get("warmup"),
        "combos_planned": [combo_label(c) for c in meta.get("combos") or []],
    }
    pick_score = objective_value(pick, objective) if pick is not None and pick.valid else None
    best_score = objective_value(best, objective) if best is not None else None
    verdict = _verdict(pick, best, loop, objective, plateau, cross)
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
        "verdict": verdict,
    }


def _verdict(
    pick: ServedPoint | None,
    best: ServedPoint | None,
    loop: dict[str, Any],
    objective: str,
    plateau: float,
    cross: dict[str, float] | None = None,
) -> dict[str, Any]:
    """ "same" (the loop picked the grid's best), "tie", "grid_better" or "undecided"."""
    if best is None:
        return {"decision": "undecided", "why": "no valid combo in the grid", "gain": None}
    if pick is not None and pick.key == best.key:
        return {
            "decision": "same",
            "why": f"the loop's pick {best.knob} is the grid's best",
            "gain": 0.0,
        }
    if pick is not None and pick.valid:
        current, where = objective_value(pick, objective), "the grid's run of the loop's pick"
        spreads = [s for s in (pick.spread(objective), loop.get("spread")) if s is not None]
    else:
        current, where = float(loop["score"] or 0.0), "the loop's own measurement"
        spreads = [loop["spread"]] if loop.get("spread") is not None else []
    spreads += list((cross or {}).values())
    d = decide(
        [best],
        current,
        objective=objective,
        plateau=plateau,
        current_spread=max(spreads) if spreads else None,
    )
    decision = {"keep": "grid_better", "tie": "tie", "revert": "tie"}.get(d.decision, d.decision)
    return {
        "decision": decision,
        "why": f"against {where}: {d.why}",
        "gain": d.gain,
        "apart": d.apart,
        "margin": d.margin,
        "spread": d.spread,
    }


def table(cmp: dict[str, Any], lang: str = "en") -> str:
    """The loop-vs-grid table in the page's language (core.texts.loop_vs_grid)."""
    from course_utils.core.texts import loop_vs_grid

    return loop_vs_grid(cmp, lang)
