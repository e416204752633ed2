"""The knee scan (lab 02 step 0): one `vllm serve`, ``measure()`` at each offered rate, then
the rates that bracket the knee measured again (``keep.pick_knee`` states the range). One
record per rate in ``knee.jsonl`` (the last record of a rate wins).

Rate i uses bench seed ``workload.seed + i`` (``knee_seed``), its windows seeds above that:
the rates share one server and its prefix cache, so no two windows send the same prompts.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

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
from course_utils.lab.bench import CLI_CALL_S
from course_utils.lab.measure import MeasureConfig, measure
from course_utils.lab.server import ServerStartError, VllmServer, gpu_gib
from course_utils.lab.sweep import limits

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

    Each rate: ``measure()`` (warm-up at that rate, one window). The two rates that bracket
    the knee get ``bracket_repeats`` more windows each (fresh prompts). ``batch1_prompts``
    > 0: that many requests one at a time on the same server, the batch-1 TPOT, one line in
    ``batch1.jsonl``. ``window_s``: each rate sends ``ceil(rate * window_s)`` prompts (None:
    ``num_prompts``). ``deadline`` (``time.monotonic()``): nothing starts that would not end
    before it (each costs the longest rate so far, first ``rate_estimate_s``); a later call
    resumes.
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
    gib = gpu_gib(gpu_memory_gib)
    mns, mnbt = limits(knobs, gib)
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
    srv = VllmServer(model, knobs, log_path=kdir / "serve.log", **dict(server_kwargs or {}))
    c = _Scan(srv, model, rates, workload, slo, knobs, kdir, path, cfg, (mns, mnbt), done, say)
    try:
        with srv:
            say(f"knee: server up in {srv.startup_s:.0f} s; rates {[rate_key(r) for r in todo]}")
            cost = _scan_todo(c, todo, deadline, rate_estimate_s, window_s)
            if cost is not None:
                cost = _repeat_brackets(c, bracket_repeats, deadline, cost)
            if cost is not None and need_b1 and not _no_time(deadline, cost):
                _batch1(c, out, batch1_prompts)
    except ServerStartError as exc:
        for rk in (rate_key(r) for r in todo):
            if rk not in done:
                done[rk] = _rate_point(c, rk, workload, "failed", reason=exc.reason).to_json()
                append_jsonl(path, done[rk])
    return [done[rate_key(r)] for r in rates if rate_key(r) in done]


def scan_seconds(
    rates: Sequence[float],
    workload: Workload,
    *,
    startup_s: float,
    cfg: MeasureConfig | None = None,
    bracket_repeats: int = 1,
    batch1_prompts: int = 0,
    batch1_tpot_s: float = 0.015,
    call_s: float = CLI_CALL_S,
) -> float:
    """What ``knee_scan`` will cost before it runs: the server's start, each rate's warm-up
    and window (``MeasureConfig.seconds``), more windows for two rates (the slowest: an upper
    bound on the pair that brackets the knee), and batch-1 (``batch1_tpot_s``: a 7B model's
    decode step at the RTX 4090's roofline floor)."""
    if not rates:
        return 0.0
    one = replace(cfg or MeasureConfig(), repeats=0)
    total = startup_s + sum(one.seconds(replace(workload, request_rate=r), call_s) for r in rates)
    n = workload.num_prompts
    total += max(0, bracket_repeats) * sum(call_s + n / r for r in sorted(rates)[:2])
    if batch1_prompts > 0:
        total += call_s + batch1_prompts * workload.output_len * batch1_tpot_s
    return total


@dataclass
class _Scan:
    """What every rate of one knee scan shares."""

    srv: VllmServer
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
    ran: bool = False  # the server has run a load (its kernels compiled, its shapes seen)

    def measure_at(self, w: Workload, name: str, first: int = 0, warm: bool = False) -> Any:
        """``measure()`` on the scan's server into ``knee/<name>``: with warm-up when ``warm``
        or when the server has run nothing yet (a resumed scan's repeat or batch 1)."""
        warm, self.ran = warm or not self.ran, True
        cfg = self.cfg if warm else replace(self.cfg, warmup_share=0.0, repeats=0)
        mns, mnbt = self.limits
        paths = PointPaths(self.kdir / name)
        return measure(
            self.srv,
            self.model,
            w,
            self.slo,
            paths,
            cfg=cfg,
            first_index=first,
            max_num_seqs=mns,
            max_num_batched_tokens=mnbt,
        )


def _scan_todo(
    c: _Scan, todo: Sequence[float], deadline: float | None, cost: float, window_s: float | None
) -> float | None:
    """Measure the rates not on disk; a rate's cost (the longest so far), None at the deadline."""
    longest = 0.0
    for rate in todo:
        if _no_time(deadline, cost):
            left = [rate_key(r) for r in todo if rate_key(r) not in c.done]
            c.say(f"knee: time budget spent; rates {left} left for the next call")
            return None
        t0 = time.monotonic()
        w = c.workload
        if window_s is not None:
            w = replace(w, num_prompts=max(1, math.ceil(rate * window_s)))
        rec = _scan_rate(c, rate, w)
        longest = cost = max(longest, time.monotonic() - t0)
        append_jsonl(c.path, rec)
        c.done[rate_key(rate)] = rec
        c.say(_line(as_point(rec)))
    return cost


def _repeat_brackets(c: _Scan, repeats: int, deadline: float | None, cost: float) -> float | None:
    for rk in _brackets(c.done, c.rates, repeats):
        if _no_time(deadline, cost):
            c.say("knee: time budget spent before the bracket repeats")
            return None
        p = as_point(c.done[rk])
        t0 = time.monotonic()
        _, more = c.measure_at(workload_from_dict(p.workload), f"rate-{rk}", first=len(p.windows))
        for x in more:
            x.purpose = "repeat" if x.purpose == "measure" else x.purpose
        p.windows += more
        p.elapsed_s = round((p.elapsed_s or 0.0) + time.monotonic() - t0, 2)
        c.done[rk] = p.to_json()
        append_jsonl(c.path, c.done[rk])
        c.say("repeat " + _line(p))
    return cost


def _no_time(deadline: float | None, cost_s: float) -> bool:
    return deadline is not None and time.monotonic() + cost_s > deadline


def _rate_point(c: _Scan, rk: str, w: Workload, status: str, **kw: Any) -> ServedPoint:
    """A knee rate as a served point (``tag`` "knee", ``rate_key`` set)."""
    return ServedPoint(
        key=f"rate-{rk}",
        knob="rate",
        value=rk,
        rate_key=rk,
        tag="knee",
        knobs=c.knobs,
        workload=w.to_dict(),
        slo=str(c.slo),
        status=status,
        time=time.strftime("%Y-%m-%dT%H:%M:%S"),
        **kw,
    )


def _scan_rate(c: _Scan, rate: float, workload: Workload) -> dict[str, Any]:
    rk = rate_key(rate)
    set_aside(c.kdir / f"rate-{rk}")  # an earlier attempt's files: never written over
    w = replace(workload, request_rate=float(rate), seed=knee_seed(workload.seed, c.rates, rate))
    t0 = time.monotonic()
    argv, up = shlex.join(c.srv.argv), round(c.srv.startup_s or 0.0, 2)
    p = _rate_point(c, rk, w, "running", serve_cmd=argv, startup_s=up)
    p.warmup, p.windows = c.measure_at(w, f"rate-{rk}", warm=True)
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
    knee = pick_knee([done[rate_key(r)] for r in rates if rate_key(r) in done])
    high = knee["overloaded_rate"] if knee["overloaded_by"] == "knee scan" else None
    keys = [rate_key(r) for r in (knee["knee_rate"], high) if r is not None]
    return [k for k in keys if k in done and len(as_point(done[k]).valid_windows) < 1 + repeats]


_BATCH1_KEYS = ("median_tpot_ms", "mean_tpot_ms", "p99_tpot_ms", "median_itl_ms", "completed")


def _batch1(c: _Scan, out: Path, n: int) -> None:
    w = c.workload
    w1 = replace(
        w, num_prompts=n, request_rate=math.inf, max_concurrency=1, seed=w.seed + len(c.rates)
    )
    _, wins = c.measure_at(w1, "batch1")
    rec: dict[str, Any] = {
        "workload": w1.to_dict(),
        "knobs": c.srv.knobs,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    good = next((x for x in wins if x.valid), wins[-1] if wins else None)
    if good is None or not good.ok:
        rec.update(status="failed", reason=good.reason if good else "no window")
    else:
        rec.update(status="ok", reason=None, valid=good.valid)
        rec.update({k: good.bench.get(k) for k in _BATCH1_KEYS})
    append_jsonl(out / BATCH1_FILE, rec)
    ok = rec["status"] == "ok"
    c.say(
        f"batch 1: median TPOT {rec.get('median_tpot_ms')} ms"
        if ok
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
