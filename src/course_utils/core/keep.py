"""The rules the course teaches for deciding from measurements, written once.

- the objective: vLLM's per-request goodput (default) or the p99 gate;
- keep or revert a value: only on valid windows, and only when the two scores lie further
  apart than the plateau and the measured run-to-run spread, both as (max - min) / mean; a
  difference inside the spread is a tie;
- the knee of an offered-rate scan, as the range its valid data supports;
- what a finished SLO loop concluded (met, past the knee, unfinished);
- lab 01's verdict for an offline sweep (the triple, the KV check, the same-batch spread).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from course_utils.core.knobs import in_effect
from course_utils.core.offline_verdict import judge as judge
from course_utils.core.offline_verdict import kv_check as kv_check
from course_utils.core.offline_verdict import kv_demand as kv_demand
from course_utils.core.offline_verdict import kv_timeline as kv_timeline
from course_utils.core.offline_verdict import point_log as point_log
from course_utils.core.offline_verdict import same_batch_gap as same_batch_gap
from course_utils.core.offline_verdict import speed_pass_seqs as speed_pass_seqs
from course_utils.core.offline_verdict import verdict as verdict
from course_utils.core.records import ServedPoint, relative_spread

OBJECTIVES = ("request_goodput", "gate")


Point = ServedPoint | Mapping[str, Any]


def as_point(rec: Point) -> ServedPoint:
    """A served point from its record (``ServedPoint.to_json()``)."""
    return rec if isinstance(rec, ServedPoint) else ServedPoint.from_json(rec)


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, not {objective!r}")
    return objective


def objective_value(rec: Point | None, objective: str = "request_goodput") -> float:
    """A point's score under ``objective``: the mean over its valid windows (0 for a failed
    point; an invalid one scores its last window, which no rule here uses to decide)."""
    if rec is None:
        return 0.0
    p = as_point(rec)
    check_objective(objective)
    if p.status != "ok":
        return 0.0
    if p.valid_windows:
        return p.objective(objective)
    sc = p.scores()
    return sc.objective(objective) if sc else 0.0


def objective_label(objective: str) -> str:
    return "gate goodput" if objective == "gate" else "request goodput"


def early_stop_reason(
    records: Iterable[Point], patience: int, min_gain: float, objective: str = "request_goodput"
) -> str | None:
    """Stop a sweep: ``patience`` points without an objective gain > ``min_gain``; with the
    gate objective also when a point breaks the SLO after an earlier one met it."""
    best = 0.0
    since = 0
    seen_meet = False
    for rec in records:
        p = as_point(rec)
        if p.valid:
            g = p.objective(objective)
            if objective == "gate":
                if p.meets_slo:
                    seen_meet = True
                elif seen_meet:
                    sc = p.scores()
                    why = "; ".join(sc.violations) if sc else ""
                    return f"SLO broke at {p.knob}={p.value} ({why})"
            if g > 0 and g > best * (1.0 + min_gain):
                best, since = g, 0
                continue
        if best > 0:
            since += 1
            if since >= patience:
                return (
                    f"{objective_label(objective)} stopped improving for {since} point(s) "
                    f"(best {best:.2f})"
                )
    return None


def best_point(
    records: Iterable[Point], *, objective: str = "request_goodput", plateau: float = 0.0
) -> ServedPoint | None:
    """The valid point with the highest ``objective`` (> 0; "gate": it meets the SLO).

    With ``plateau`` > 0, the first point in sweep order (the smallest move from the current
    value) that the best does not beat by more than ``plateau``: a further move must earn
    its keep like a kept value does. Invalid points never count.
    """
    check_objective(objective)
    ok = [
        p
        for p in map(as_point, records)
        if p.valid and (objective != "gate" or p.meets_slo) and p.objective(objective) > 0
    ]
    if not ok:
        return None
    top = max(p.objective(objective) for p in ok)
    return next(p for p in ok if top <= p.objective(objective) * (1.0 + plateau))


@dataclass
class KeepDecision:
    """What the keep rule decided for one sweep: ``decision`` is "keep", "tie" (a gain, but
    inside the run-to-run spread), "revert" (no gain beyond the plateau) or "undecided" (no
    valid point: nothing is kept or rejected)."""

    decision: str
    best: ServedPoint | None
    gain: float | None
    margin: float
    spread: float | None
    why: str
    apart: float | None = None
    """The difference on the spreads' scale ((max - min) / mean of the two scores): what
    ``margin`` is weighed against."""

    @property
    def kept(self) -> bool:
        return self.decision == "keep"


def decide(
    records: Sequence[Point],
    current: float,
    *,
    objective: str = "request_goodput",
    plateau: float = 0.02,
    current_spread: float | None = None,
) -> KeepDecision:
    """The keep rule of ``tune`` (and of replay): keep the best valid value only if it raises
    the objective by more than the plateau AND lies further from the current score than the
    run-to-run spread measured on the current point and on the best (their repeated windows),
    the difference taken on the spread's scale ((max - min) / mean, ``apart``). A gain over a
    current score of 0 is infinite."""
    best = best_point(records, objective=objective, plateau=plateau)
    points = [as_point(r) for r in records]
    if best is None:
        bad = [p for p in points if p.status == "ok" and not p.valid]
        why = (
            "no valid point: " + "; ".join(p.validity_issues[0] for p in bad if p.validity_issues)
            if bad
            else "no point scored above 0"
        )
        return KeepDecision("undecided" if bad else "revert", None, None, plateau, None, why)
    g = best.objective(objective)
    gain = math.inf if current <= 0 else (g - current) / current
    spreads = [s for s in (current_spread, best.spread(objective)) if s is not None]
    spread = max(spreads) if spreads else None
    margin = max([plateau, *spreads])
    label = best.label  # a grid combo's knob is already its name, with no value
    # the spreads are (max - min) / mean, so the difference is weighed on that scale too
    # ("apart"): a gain over the current score reads larger, by far for large differences
    apart = relative_spread([g, current]) or 0.0
    both = _pct(gain) if math.isinf(gain) else f"{_pct(gain)} ({apart:.1%} apart)"
    if g > current and (current <= 0 or apart > margin):
        why = f"{label}: {both} > margin {margin:.1%}"
        return KeepDecision("keep", best, gain, margin, spread, why, apart)
    if g > current and apart > plateau:
        why = f"{label}: {both} is inside the run-to-run spread {margin:.1%}: a tie, the current value stays"
        return KeepDecision("tie", best, gain, margin, spread, why, apart)
    why = f"{label}: {both} <= plateau {plateau:.0%}"
    return KeepDecision("revert", best, gain, margin, spread, why, apart)


def _pct(gain: float) -> str:
    return "+inf" if math.isinf(gain) else f"{gain:+.1%}"


def choose(
    records: Sequence[Point],
    current: float,
    *,
    objective: str = "request_goodput",
    plateau: float = 0.02,
    current_spread: float | None = None,
) -> tuple[ServedPoint | None, float | None, bool]:
    """``decide`` as (best point, relative gain, kept)."""
    d = decide(
        records, current, objective=objective, plateau=plateau, current_spread=current_spread
    )
    return d.best, d.gain, d.kept


def order_candidates(candidates: Sequence[Any], current: Any, move: str | None) -> list[Any]:
    """The values to try from ``current``: those in the direction of ``move``, nearest first."""
    vals = [v for v in candidates if v != current]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals)
    if numeric and current is not None and isinstance(current, int | float):
        if move == "raise":
            return sorted(v for v in vals if v > current)
        if move == "lower":
            return sorted((v for v in vals if v < current), reverse=True)
    return vals


def next_knob(
    diag: Mapping[str, Any] | None, candidates: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The knob the diagnosis names next, with its move: {"knob", "move", "has_candidates"}
    (the first named knob; None when it names none)."""
    if not diag or not diag.get("knobs"):
        return None
    k = diag["knobs"][0]
    return {
        "knob": k,
        "move": (diag.get("moves") or {}).get(k),
        "has_candidates": None if candidates is None else k in candidates,
    }


@dataclass
class _Rate:
    rate: float
    met: bool | None  # True: met the SLO (and kept up) in every valid window; None: mixed
    windows: int


def _rate_verdict(p: ServedPoint, keep_up: float) -> _Rate:
    rate = float(p.rate_key or p.value)
    outcomes = []
    for w in p.valid_windows:
        assert w.score is not None
        keeps = w.score.request_throughput >= keep_up * rate
        queued = w.diagnosis.get("constraint") == "queue"
        outcomes.append(w.score.meets_slo and (keeps or not queued))
    met = True if all(outcomes) else False if not any(outcomes) else None
    return _Rate(rate, met, len(outcomes))


def pick_knee(
    records: Sequence[Point], keep_up: float = 0.8, points: Sequence[Point] = ()
) -> dict[str, Any]:
    """The knee as the range the valid data supports: between the highest rate that met
    the SLO (``knee_rate``) and the lowest rate above it that missed (``overloaded_rate``).

    A rate met the SLO if it met it (completing at least ``keep_up`` of the offered rate, or
    without a queue diagnosis) in every valid window at it, missed if it missed in every one,
    else is undecided. Invalid rates are ignored and listed. ``points`` (the loop's points,
    each on a fresh server) can supply the upper bound: a rate above the knee at which every
    valid loop point broke the SLO."""
    fin = [as_point(r) for r in records]
    fin = [p for p in fin if p.status == "ok" and str(p.rate_key) != "inf"]
    invalid: list[dict[str, Any]] = [
        {
            "rate": float(p.rate_key or 0),
            "issues": [i for w in p.windows for i in w.validity_issues],
        }
        for p in fin
        if not p.valid
    ]
    verdicts = sorted((_rate_verdict(p, keep_up) for p in fin if p.valid), key=lambda v: v.rate)
    met = [v.rate for v in verdicts if v.met is True]
    knee = max(met) if met else None
    over = next(
        (v.rate for v in verdicts if v.met is False and knee is not None and v.rate > knee), None
    )
    undecided = [v.rate for v in verdicts if v.met is None]
    over_by = "knee scan" if over is not None else None
    evidence = ""
    for rate, ps in _loop_points_by_rate(points).items():
        if (
            knee is not None
            and rate > knee
            and (over is None or rate < over)
            and not any(p.meets_slo for p in ps)
        ):
            over, over_by = rate, "loop points"
            evidence = (
                f"; {rate:g} req/s: all {len(ps)} valid loop point(s) "
                f"({', '.join(p.label for p in ps)}; fresh servers) broke the SLO"
            )
            break
    why = _knee_why(knee, over, over_by, evidence, undecided, verdicts)
    if invalid:
        first = next((str(i["issues"][0]) for i in invalid if i["issues"]), "invalid")
        names = ", ".join(f"{float(i['rate']):g}" for i in invalid)
        why += f"; ignored invalid rate(s) {names} ({first})"
    return {
        "knee_rate": knee,
        "overloaded_rate": over,
        "overloaded_by": over_by,
        "undecided": undecided,
        "invalid": invalid,
        "why": why,
        "windows": {f"{v.rate:g}": v.windows for v in verdicts},
    }


def latest_by_rate(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last record of each rate of a knee scan (a repeat rewrites its rate's record)."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        if "rate_key" in r:
            out[str(r["rate_key"])] = dict(r)
    return out


def _loop_points_by_rate(points: Sequence[Point]) -> dict[float, list[ServedPoint]]:
    by_rate: dict[float, list[ServedPoint]] = {}
    for p in map(as_point, points):
        rr = p.workload.get("request_rate")
        if p.valid and rr is not None and rr != "inf":
            by_rate.setdefault(float(rr), []).append(p)
    return dict(sorted(by_rate.items()))


def _knee_why(
    knee: float | None,
    over: float | None,
    over_by: str | None,
    evidence: str,
    undecided: list[float],
    verdicts: Sequence[_Rate],
) -> str:
    if knee is None:
        return "no valid tested rate met the SLO: lower the rates (or the SLO is out of reach)"
    if over is None:
        return f"every valid tested rate up to {knee:g} req/s met the SLO: the knee is higher"
    inside = [u for u in undecided if knee < u < over]
    mixed = (
        f"; {', '.join(f'{u:g}' for u in inside)} req/s met the SLO in some repeated "
        "windows and missed it in others"
        if inside
        else ""
    )
    reps = ", ".join(f"{v.rate:g}: {v.windows}" for v in verdicts if v.windows > 1)
    repeated = f" (valid windows per rate {reps})" if reps else ""
    return (
        f"knee between {knee:g} req/s (the highest valid rate that met the SLO) and "
        f"{over:g} req/s ({over_by}){evidence}{mixed}{repeated}"
    )


def swept_knobs(tune_records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The knobs a loop swept, in order, from its tune.jsonl records."""
    return list(
        dict.fromkeys(
            str(r["knob"]) for r in tune_records if r.get("kind") == "sweep" and r.get("knob")
        )
    )


def loop_outcome(
    stop_reason: str,
    meets_slo: bool | None,
    request_goodput: float | None = None,
    offered_rate: float | None = None,
    tried: Sequence[str] = (),
    named: Sequence[str] = (),
    moves: Mapping[str, str] | None = None,
    kept_knobs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What a finished loop concluded: ``meets_slo``; ``past_knee`` (still missed after a
    plateau over the knobs ``tried``, or no engine knob named); ``untested`` (a plateau with
    nothing tried); ``unfinished`` (budget or ``max_steps``); ``no_result`` (no valid
    baseline). Knobs the last diagnosis ``named`` but the loop did not sweep are untried,
    except those whose named move is already in effect in ``kept_knobs`` (``in_effect``)."""
    goodput_share = (
        request_goodput / offered_rate
        if request_goodput is not None and offered_rate and not math.isinf(offered_rate)
        else None
    )
    reason = stop_reason or ""
    kept = kept_knobs or {}
    already = [
        k
        for k in named
        if k not in tried and k in (moves or {}) and in_effect(k, (moves or {})[k], kept.get(k))
    ]
    untried = [k for k in named if k not in tried and k not in already]
    if reason.startswith(("baseline", "no valid")) or meets_slo is None:
        outcome = "no_result"
    elif meets_slo:
        outcome = "meets_slo"
    elif reason.startswith(("GPU budget", "max_steps")):
        outcome = "unfinished"
    elif reason.startswith("plateau") and not tried:
        outcome = "untested"
    else:
        outcome = "past_knee"
    share = "" if goodput_share is None else f" ({goodput_share:.0%} of the offered rate)"
    knobs, rest = ", ".join(tried) or "none", ", ".join(untried)
    also = f"; not tried: {rest}" if rest else ""
    also += f"; already on: {', '.join(already)}" if already else ""
    why = {
        "meets_slo": "the kept configuration meets the SLO at this rate",
        "past_knee": (
            f"no setting tried met the SLO{share}; knobs tried: {knobs}. With these knobs "
            "this rate is past the server's knee for this SLO: lower the rate to the knee "
            f"or add replicas{also}"
        ),
        "untested": f"the SLO is missed{share} and no knob the diagnosis named was swept "
        f"({rest or 'none'}): nothing was tried, nothing is concluded",
        "unfinished": f"stopped before a plateau with the SLO missed{share}: resume with "
        "more budget",
        "no_result": f"no result: {reason or 'the loop did not run'}",
    }[outcome]
    return {
        "outcome": outcome,
        "goodput_share": None if goodput_share is None else round(goodput_share, 4),
        "tried": list(tried),
        "untried": list(untried),
        "in_effect": already,
        "why": why,
    }


def tied(a: Point, b: Point, objective: str = "request_goodput", plateau: float = 0.02) -> bool:
    """Neither point beats the other by the keep rule (``decide``), each against the other's
    score and spread: a difference inside the run-to-run spread or the plateau."""

    def beats(x: ServedPoint, y: ServedPoint) -> bool:
        cur, spread = y.objective(objective), y.spread(objective)
        d = decide([x], cur, objective=objective, plateau=plateau, current_spread=spread)
        return d.decision == "keep"

    pa, pb = as_point(a), as_point(b)
    return not beats(pa, pb) and not beats(pb, pa)


def compare_findings(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, str]:
    """Two runs' findings (``lab.replay.run_findings``) on two workloads: for the knee, the
    binding constraint at the loop's start and the kept configuration: "same" or "differs";
    for the knee "overlaps" when the two ranges share a rate (the data do not separate
    them); for the kept configuration "tie" when they differ but each run measured the
    other's pick and found it tied with its own; "undecided" when a run has no knee
    or no loop, or one never measured the other's pick."""
    out: dict[str, str] = {}
    ka, kb = a.get("knee"), b.get("knee")
    if not ka or not kb or ka[0] is None or kb[0] is None:  # no rate met the SLO
        out["knee"] = "undecided"
    else:
        lo_a, hi_a = ka[0], ka[1] if ka[1] is not None else math.inf
        lo_b, hi_b = kb[0], kb[1] if kb[1] is not None else math.inf
        out["knee"] = "differs" if hi_a <= lo_b or hi_b <= lo_a else "overlaps"
    ca, cb = a.get("baseline_constraint"), b.get("baseline_constraint")
    out["constraint"] = "undecided" if None in (ca, cb) else "same" if ca == cb else "differs"
    if a["knobs"] is None or b["knobs"] is None:  # a run whose loop did not run
        out["kept"] = "undecided"
    elif a["knobs"] == b["knobs"]:
        out["kept"] = "same"
    else:
        a_in_b = a["knobs"] in b["tied_with"]
        b_in_a = b["knobs"] in a["tied_with"]
        measured = a["knobs"] in b["measured"] and b["knobs"] in a["measured"]
        out["kept"] = "tie" if a_in_b and b_in_a else "differs" if measured else "undecided"
    return out
