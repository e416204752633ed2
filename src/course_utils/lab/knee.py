"""The knee scan (lab 02 step 0): one `vllm serve`, ``measure()`` at each offered rate, then
the rates that bracket the knee measured again, so the knee is stated as the range the
data supports (``keep.pick_knee``). One record per rate in ``knee.jsonl`` (the last record
of a rate wins: a repeat appends the rate's whole record again).

Rate i uses bench seed ``workload.seed + i`` (``knee_seed``) and its windows seeds above
that: all rates share one server and its prefix cache, so no two windows may send the same
prompts (vLLM's own ``vllm bench sweep serve`` resets the cache instead, through a route
that exists only with VLLM_SERVER_DEV_MODE=1, a development mode the course leaves off).
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from course_utils.core import knobs as knobs_mod
from course_utils.core.keep import as_point, latest_by_rate, pick_knee
from course_utils.core.records import (
    KNEE_FILE,
    PointPaths,
    ServedPoint,
    Workload,
    append_jsonl,
    read_jsonl,
)
from course_utils.core.slo import SLO
from course_utils.core.store import read_records, set_aside
from course_utils.core.workload import workload_from_dict
from course_utils.lab.measure import MeasureConfig, measure
from course_utils.lab.server import ServerStartError, VllmServer
from course_utils.lab.server import gpu_memory_gib as detected_gpu_gib

__all__ = ["BATCH1_FILE", "KNEE_FILE", "knee_scan", "knee_seed", "latest_by_rate", "rate_key"]

BATCH1_FILE = "batch1.jsonl"


def rate_key(rate: float | str) -> str:
    r = float(rate)
    return "inf" if math.isinf(r) else f"{r:g}"


def knee_seed(seed: int, rates: Sequence[float], rate: float) -> int:
    """The bench seed of ``rate`` in a knee scan: ``seed`` + its index in ``rates``."""
    keys = [rate_key(r) for r in rates]
    return int(seed) + keys.index(rate_key(rate))


def knee_scan(
    model: str,
    rates: Sequence[float],
    *,
    workload: Workload,
    slo: SLO,
    out_dir: str | Path,
    base_knobs: Mapping[str, Any] | None = None,
    server_kwargs: Mapping[str, Any] | None = None,
    bench_kwargs: Mapping[str, Any] | None = None,
    measure_config: MeasureConfig | None = None,
    warmup_prompts: int | None = None,
    metrics_interval_s: float = 0.5,
    gpu_memory_gib: float | None = None,
    batch1_prompts: int = 0,
    bracket_repeats: int = 1,
    progress: Callable[[str], None] | None = print,
    deadline: float | None = None,
    rate_estimate_s: float = 90.0,
    window_s: float | None = None,
) -> list[dict[str, Any]]:
    """Offered-rate scan on one server; returns the rates' records in ``rates`` order.

    Each rate: ``measure()`` (warm-up at that rate, one window; an invalid window is
    re-measured once). Then the two rates that bracket the knee get ``bracket_repeats``
    more windows each (fresh prompts), so ``pick_knee`` can tell a rate that met the SLO
    once from one that meets it. With ``batch1_prompts`` > 0 the same server also measures
    that many requests one at a time (``--max-concurrency 1``): the batch-1 TPOT held
    against the roofline floor (``capacity.tpot_floor_ms``), one line in ``batch1.jsonl``.

    ``window_s``: each rate sends ``ceil(rate * window_s)`` prompts, so every rate's window
    lasts about as long (None: the workload's ``num_prompts`` at every rate).
    ``deadline`` (a ``time.monotonic()`` value): no rate, repeat or batch-1 run starts that
    would not end before it (each costs about the longest rate so far, ``rate_estimate_s``
    before the first); what is left stays for the next call, which resumes.
    """
    out = Path(out_dir)
    kdir = out / "knee"
    kdir.mkdir(parents=True, exist_ok=True)
    path = out / KNEE_FILE
    # a rate scored under another SLO is measured again (its files kept under a new name)
    done = {
        rk: r
        for rk, r in latest_by_rate(read_records(path, need="rate_key", torn_ok=True)).items()
        if r.get("slo", str(slo)) == str(slo)
    }
    todo = [r for r in rates if rate_key(r) not in done]
    need_b1 = batch1_prompts > 0 and not read_jsonl(out / BATCH1_FILE)
    knobs = dict(base_knobs or {})
    gib = gpu_memory_gib if gpu_memory_gib is not None else (detected_gpu_gib() or 24.0)
    mns = int(knobs.get("max_num_seqs") or knobs_mod.default("max_num_seqs", gpu_memory_gib=gib))
    mnbt = int(
        knobs.get("max_num_batched_tokens")
        or knobs_mod.default("max_num_batched_tokens", gpu_memory_gib=gib)
    )
    warm: dict[str, Any] = {} if warmup_prompts is None else {"warmup_min_prompts": warmup_prompts}
    cfg = measure_config or MeasureConfig(
        repeats=0,
        metrics_interval_s=metrics_interval_s,
        bench_kwargs=dict(bench_kwargs or {}),
        **warm,
    )
    say = progress or (lambda _m: None)
    if not (todo or need_b1 or _brackets(done, rates, bracket_repeats)):
        return [done[rate_key(r)] for r in rates if rate_key(r) in done]
    ctx = _Scan(model, rates, workload, slo, knobs, kdir, path, cfg, (mns, mnbt), done, say)
    srv = VllmServer(model, knobs, log_path=kdir / "serve.log", **dict(server_kwargs or {}))
    try:
        with srv:
            say(f"knee: server up in {srv.startup_s:.0f} s; rates {[rate_key(r) for r in todo]}")
            cost = _scan_todo(ctx, srv, todo, deadline, rate_estimate_s, window_s)
            if cost is not None:
                cost = _repeat_brackets(ctx, srv, bracket_repeats, deadline, cost)
            if cost is not None and need_b1 and not _no_time(deadline, cost):
                b1 = (workload, rates, slo, kdir, out, cfg, (mns, mnbt), batch1_prompts, say)
                _batch1(srv, model, *b1)
    except ServerStartError as exc:
        for rate in todo:
            rk = rate_key(rate)
            if rk not in done:
                rec = _rate_point(rk, knobs, workload, slo, "failed", reason=exc.reason).to_json()
                append_jsonl(path, rec)
                done[rk] = rec
    return [done[rate_key(r)] for r in rates if rate_key(r) in done]


@dataclass
class _Scan:
    """What every rate of one knee scan shares."""

    model: str
    rates: Sequence[float]
    workload: Workload
    slo: SLO
    knobs: dict[str, Any]
    kdir: Path
    path: Path
    cfg: MeasureConfig
    limits: tuple[int, int]  # max_num_seqs, max_num_batched_tokens in effect
    done: dict[str, dict[str, Any]]
    say: Callable[[str], None]


def _scan_todo(
    c: _Scan,
    srv: VllmServer,
    todo: Sequence[float],
    deadline: float | None,
    estimate_s: float,
    window_s: float | None,
) -> float | None:
    """Measure the rates not on disk; returns a rate's cost (the longest one measured), or
    None when the deadline stopped the scan."""
    cost, longest = estimate_s, 0.0
    for rate in todo:
        if _no_time(deadline, cost):
            left = [rate_key(r) for r in todo if rate_key(r) not in c.done]
            c.say(f"knee: time budget spent; rates {left} left for the next call")
            return None
        t0 = time.monotonic()
        w = c.workload
        if window_s is not None:
            w = replace(c.workload, num_prompts=max(1, math.ceil(rate * window_s)))
        rec = _scan_rate(srv, c.model, rate, c.rates, w, c.slo, c.knobs, c.kdir, c.cfg, *c.limits)
        longest = cost = max(longest, time.monotonic() - t0)
        append_jsonl(c.path, rec)
        c.done[rate_key(rate)] = rec
        c.say(_line(as_point(rec)))
    return cost


def _repeat_brackets(
    c: _Scan, srv: VllmServer, repeats: int, deadline: float | None, cost: float
) -> float | None:
    for rk in _brackets(c.done, c.rates, repeats):
        if _no_time(deadline, cost):
            c.say("knee: time budget spent before the bracket repeats")
            return None
        rec = _repeat_rate(srv, c.model, c.done[rk], c.kdir, c.cfg, c.limits, c.slo)
        append_jsonl(c.path, rec)
        c.done[rk] = rec
        c.say("repeat " + _line(as_point(rec)))
    return cost


def _no_time(deadline: float | None, cost_s: float) -> bool:
    return deadline is not None and time.monotonic() + cost_s > deadline


def _rate_point(
    rk: str, knobs: dict[str, Any], w: Workload, slo: SLO, status: str, **kw: Any
) -> ServedPoint:
    """A knee rate as a served point (``tag`` "knee", ``rate_key`` set)."""
    return ServedPoint(
        key=f"rate-{rk}",
        knob="rate",
        value=rk,
        rate_key=rk,
        tag="knee",
        knobs=knobs,
        workload=w.to_dict(),
        slo=str(slo),
        status=status,
        time=time.strftime("%Y-%m-%dT%H:%M:%S"),
        **kw,
    )


def _scan_rate(
    srv: VllmServer,
    model: str,
    rate: float,
    rates: Sequence[float],
    workload: Workload,
    slo: SLO,
    knobs: dict[str, Any],
    kdir: Path,
    cfg: MeasureConfig,
    mns: int,
    mnbt: int,
) -> dict[str, Any]:
    rk = rate_key(rate)
    set_aside(kdir / f"rate-{rk}")  # an earlier attempt's files: never written over
    w = replace(workload, request_rate=float(rate), seed=knee_seed(workload.seed, rates, rate))
    t0 = time.monotonic()
    p = _rate_point(
        rk,
        knobs,
        w,
        slo,
        "running",
        serve_cmd=shlex.join(srv.argv),
        startup_s=round(srv.startup_s or 0.0, 2),
    )
    p.warmup, p.windows = measure(
        srv,
        model,
        w,
        slo,
        PointPaths(kdir / f"rate-{rk}"),
        cfg=cfg,
        max_num_seqs=mns,
        max_num_batched_tokens=mnbt,
    )
    p.status = "ok" if any(x.ok for x in p.windows) else "failed"
    p.reason = None if p.status == "ok" else (p.windows[-1].reason if p.windows else "no window")
    p.elapsed_s = round(time.monotonic() - t0, 2)
    return p.to_json()


def _brackets(
    done: Mapping[str, Mapping[str, Any]], rates: Sequence[float], repeats: int
) -> list[str]:
    """The rates bracketing the knee that have fewer than 1 + ``repeats`` valid windows."""
    if repeats <= 0:
        return []
    recs = [done[rate_key(r)] for r in rates if rate_key(r) in done]
    knee = pick_knee(recs)
    out = []
    for r in (
        knee["knee_rate"],
        knee["overloaded_rate"] if knee["overloaded_by"] == "knee scan" else None,
    ):
        if r is None:
            continue
        rk = rate_key(r)
        if rk in done and len(as_point(done[rk]).valid_windows) < 1 + repeats:
            out.append(rk)
    return out


def _repeat_rate(
    srv: VllmServer,
    model: str,
    rec: Mapping[str, Any],
    kdir: Path,
    cfg: MeasureConfig,
    limits: tuple[int, int],
    slo: SLO,
) -> dict[str, Any]:
    p = as_point(rec)
    w = workload_from_dict(p.workload)
    t0 = time.monotonic()
    _, more = measure(
        srv,
        model,
        w,
        slo,
        PointPaths(kdir / f"rate-{p.rate_key}"),
        cfg=replace(cfg, warmup_share=0.0, repeats=0),
        max_num_seqs=limits[0],
        max_num_batched_tokens=limits[1],
        first_index=len(p.windows),
    )
    for x in more:
        x.purpose = "repeat" if x.purpose == "measure" else x.purpose
    p.windows += more
    p.elapsed_s = round((p.elapsed_s or 0.0) + time.monotonic() - t0, 2)
    return p.to_json()


def _batch1(
    srv: VllmServer,
    model: str,
    workload: Workload,
    rates: Sequence[float],
    slo: SLO,
    kdir: Path,
    out: Path,
    cfg: MeasureConfig,
    limits: tuple[int, int],
    n: int,
    say: Callable[[str], None],
) -> None:
    w1 = replace(
        workload,
        num_prompts=n,
        request_rate=math.inf,
        max_concurrency=1,
        seed=workload.seed + len(rates),
    )
    _, wins = measure(
        srv,
        model,
        w1,
        slo,
        PointPaths(kdir / "batch1"),
        cfg=replace(cfg, warmup_share=0.0, repeats=0),
        max_num_seqs=limits[0],
        max_num_batched_tokens=limits[1],
    )
    rec: dict[str, Any] = {
        "workload": w1.to_dict(),
        "knobs": srv.knobs,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    good = next((x for x in wins if x.valid), wins[-1] if wins else None)
    if good is None or not good.ok:
        rec.update(status="failed", reason=good.reason if good else "no window")
    else:
        b = good.bench
        rec.update(
            status="ok",
            reason=None,
            valid=good.valid,
            **{
                k: b.get(k)
                for k in (
                    "median_tpot_ms",
                    "mean_tpot_ms",
                    "p99_tpot_ms",
                    "median_itl_ms",
                    "completed",
                )
            },
        )
    append_jsonl(out / BATCH1_FILE, rec)
    say(
        f"batch 1: median TPOT {rec.get('median_tpot_ms')} ms"
        if rec["status"] == "ok"
        else f"batch 1: {rec['reason']}"
    )


def _line(p: ServedPoint) -> str:
    if p.status != "ok":
        return f"knee: rate {p.rate_key}: {p.reason}"
    sc = p.scores()
    valid = "" if p.valid else f" INVALID: {'; '.join(p.validity_issues)}"
    return (
        f"knee: rate {p.rate_key} ({len(p.windows)} window(s)): "
        f"{sc.request_throughput if sc else 0:.2f} req/s done, vLLM goodput "
        f"{(sc.request_goodput or 0) if sc else 0:.2f}, "
        f"{p.diagnosis.get('constraint')}{valid}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m course_utils.lab.knee``: the same as ``python -m course_utils knee``."""
    import sys

    from course_utils.__main__ import main as course_main

    return course_main(["knee", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
