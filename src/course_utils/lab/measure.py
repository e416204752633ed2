"""``measure()``: the one place a load is measured on a running `vllm serve`.

1. Warm-up at the load's shape and rate (a share of its prompts, its own seed), so the
   engine runs the load's batch sizes before anything is measured.
2. Windows: `vllm bench serve` with the workload (window 0: the workload's seed), /metrics
   sampled, both goodputs scored, the binding constraint diagnosed.
3. The validity gate on every window (core.validity, plus a JIT compile logged inside the
   window); an invalid window is re-measured with fresh prompts (``remeasure`` times).
4. ``repeats`` more valid windows with fresh prompts: the run-to-run spread.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from course_utils.core.diagnose import Diagnosis, busiest_engine, diagnose, diagnose_engines
from course_utils.core.metrics import MetricsSampler, engine_series, summarize
from course_utils.core.records import (
    EngineWindow,
    PointPaths,
    Scores,
    Warmup,
    Window,
    Workload,
    bench_summary,
)
from course_utils.core.slo import SLO, score
from course_utils.core.validity import (
    jit_issue,
    prefix_cache_hit_rate,
    validity_issues,
    warmed_peak,
    warmup_issue,
)
from course_utils.core.vllm_logs import jit_compiles
from course_utils.core.workload import TraceWorkload
from course_utils.lab.bench import CLI_CALL_S, BenchError, run_bench
from course_utils.lab.server import VllmServer

__all__ = [
    "MeasureConfig",
    "WINDOW_SEED_STRIDE",
    "diag_dict",
    "jit_in_log_span",
    "measure",
]

# prompts of the warm-up and of window i come from seeds no other window uses
WARMUP_SEED_OFFSET = 100_000
WINDOW_SEED_STRIDE = 1_000


@dataclass(frozen=True)
class MeasureConfig:
    """How one point is measured. ``warmup_share``: the warm-up's prompts as a share of the
    load's (at least ``warmup_min_prompts``; a load sent all at once, or capped by
    max_concurrency, is warmed with as many prompts as it has or its cap)."""

    warmup_share: float = 0.5
    warmup_min_prompts: int = 16
    repeats: int = 1
    remeasure: int = 1
    metrics_interval_s: float = 0.5
    bench_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.warmup_share <= 1.0:
            raise ValueError("warmup_share must be in [0, 1]")
        if self.repeats < 0 or self.remeasure < 0:
            raise ValueError("repeats and remeasure must be >= 0")

    def warmup_workload(self, w: Workload) -> Workload | None:
        if self.warmup_share <= 0:
            return None
        n = max(self.warmup_min_prompts, math.ceil(self.warmup_share * w.num_prompts))
        if math.isinf(w.request_rate):
            n = max(n, w.num_prompts)
        if w.max_concurrency:
            n = max(n, w.max_concurrency)
        if isinstance(w, TraceWorkload):  # the same arrivals and lengths, other tokens
            return w.warmup(n, w.seed + WARMUP_SEED_OFFSET)
        return replace(w, num_prompts=n, seed=w.seed + WARMUP_SEED_OFFSET)

    def seconds(self, w: Workload, call_s: float = CLI_CALL_S) -> float:
        """A point's bench time before it runs (its server's start not counted): the warm-up
        call and 1 + ``repeats`` windows, each ``call_s`` plus its prompts' arrival time. A
        window the validity gate rejects is measured again: a call this cannot foresee."""
        warm = self.warmup_workload(w)
        calls = ([warm] if warm is not None else []) + [w] * (1 + self.repeats)
        return sum(call_s + c.num_prompts / c.request_rate for c in calls)


def _log_size(server: VllmServer) -> int:
    try:
        return server.log_path.stat().st_size
    except OSError:
        return 0


def jit_in_log_span(log_path: Path, start: int, end: int) -> list[dict[str, Any]]:
    """The JIT-monitor lines a server logged between two byte offsets of its log."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(start)
            text = fh.read(max(0, end - start)).decode("utf-8", errors="replace")
    except OSError:
        return []
    return [
        {"stamp": c.stamp, "kernel": c.kernel, "offset": c.offset}
        for c in jit_compiles(text, start)
    ]


@dataclass
class _Point:
    """One point being measured on a running server."""

    server: VllmServer
    model: str
    workload: Workload
    slo: SLO | None
    paths: PointPaths
    cfg: MeasureConfig
    limits: tuple[int, int | None]  # max_num_seqs, max_num_batched_tokens in effect

    def bench(self, w: Workload, slo: SLO | None, result: Path, log: Path) -> Any:
        """`vllm bench serve` with /metrics sampled; returns (sampler, result or BenchError)."""
        sampler = MetricsSampler(self.server.metrics_url, interval_s=self.cfg.metrics_interval_s)
        ratio = trace_token_ratio(self.model)
        kw = {**self.cfg.bench_kwargs, "log_path": log, "trace_token_ratio": ratio}
        where = (self.server.base_url, self.model, w, slo, result.parent, result.name)
        try:
            with sampler:
                res = run_bench(*where, **kw)
        except BenchError as exc:
            return sampler, exc
        if isinstance(w, TraceWorkload):
            _learn_token_ratio(self.model, w.sent_requests(ratio), res.raw)
        return sampler, res


# model -> [server-counted prompt tokens, tokens timed_trace sampled] over the calls so far
_TRACE_TOKENS: dict[str, list[float]] = {}


def trace_token_ratio(model: str) -> float:
    """Server tokens per token vLLM's timed_trace sampled for ``model``'s tokenizer, from this
    process's calls so far (1.0 before the first): what the next slice is scaled by."""
    got, sent = _TRACE_TOKENS.get(model, (0.0, 0.0))
    return got / sent if sent > 0 else 1.0


def _applied_ratio(model: str, w: Workload) -> float | None:
    return round(trace_token_ratio(model), 4) if isinstance(w, TraceWorkload) else None


def _learn_token_ratio(model: str, sent: list[Any], raw: Mapping[str, Any]) -> None:
    """Add one call's completed requests: vLLM's per-request ``input_lens`` (the server's
    ``prompt_tokens``) against the lengths the slice asked for."""
    lens, errors = raw.get("input_lens") or [], raw.get("errors") or []
    if len(lens) != len(sent) or len(errors) != len(sent):
        return
    done = [i for i, e in enumerate(errors) if not e]
    acc = _TRACE_TOKENS.setdefault(model, [0.0, 0.0])
    acc[0] += sum(float(lens[i]) for i in done)
    acc[1] += sum(sent[i].input_length for i in done)


def _warm_up(p: _Point) -> Warmup | None:
    w = p.cfg.warmup_workload(p.workload)
    if w is None:
        return None
    t0, off0 = time.monotonic(), _log_size(p.server)
    warm = Warmup(seed=w.seed, num_prompts=w.num_prompts, status="ok")
    warm.trace_token_ratio = _applied_ratio(p.model, w)
    sampler, res = p.bench(w, None, p.paths.warmup_json, p.paths.warmup_log)
    if isinstance(res, BenchError):
        warm.status, warm.reason = "failed", res.reason
    else:
        warm.running_max = summarize(sampler.samples).running_max if sampler.samples else None
        warm.max_concurrent_requests = res.raw.get("max_concurrent_requests")
        warm.jit = jit_in_log_span(p.server.log_path, off0, _log_size(p.server))
        warm.load_s = res.raw.get("duration")
    warm.elapsed_s = round(time.monotonic() - t0, 2)
    return warm


def _window(p: _Point, index: int, purpose: str, covered_running: float | None) -> Window:
    """One measured window on the running server (never raises for a failed bench)."""
    server, slo = p.server, p.slo
    w = replace(p.workload, seed=p.workload.seed + index * WINDOW_SEED_STRIDE)
    t0, started, off0 = time.monotonic(), time.time(), _log_size(server)
    win = Window(index=index, purpose=purpose, seed=w.seed, status="failed", started_at=started)
    win.trace_token_ratio = _applied_ratio(p.model, w)
    sampler, res = p.bench(w, slo, p.paths.bench_json(index), p.paths.bench_log(index))
    sampler.save_jsonl(p.paths.metrics(index))
    off1 = _log_size(server)
    win.ended_at, win.elapsed_s = time.time(), round(time.monotonic() - t0, 2)
    win.log_span, win.jit = [off0, off1], jit_in_log_span(server.log_path, off0, off1)
    if isinstance(res, BenchError):
        win.reason = f"bench failed: {res.reason}"
    if not server.alive():
        win.reason = f"server died during the bench: {server.failure_reason()}"
    if win.reason:
        return win
    samples = sampler.samples
    load = summarize(samples)
    hit = prefix_cache_hit_rate(samples)
    issues = validity_issues(res.raw, w, prefix_cache_hit_rate=hit)
    if not samples:
        issues.append("no /metrics sample was taken during the bench")
    jit = jit_issue([j["kernel"] for j in win.jit])
    cover = warmup_issue(covered_running, load.running_max if samples else None)
    issues += [x for x in (jit, cover) if x]
    if slo is not None:
        win.score = Scores.from_json(vars(score(res, slo)))
        mns, mnbt = p.limits
        diag = diagnose(samples, res, slo, max_num_seqs=mns, max_num_batched_tokens=mnbt)
        per = diagnose_engines(samples, res, slo, max_num_seqs=mns, max_num_batched_tokens=mnbt)
        if per:  # several engines (data parallel): each one's own view; the busiest decides
            series = engine_series(samples)
            win.engines = {
                e: EngineWindow(summarize(series[e]).as_dict(), diag_dict(d))
                for e, d in per.items()
            }
            diag = per[busiest_engine(per) or next(iter(per))]
        win.diagnosis = diag_dict(diag)
    win.status, win.valid, win.validity_issues = "ok", not issues, issues
    win.prefix_cache_hit_rate, win.bench, win.load = hit, bench_summary(res.raw), load.as_dict()
    return win


def diag_dict(d: Diagnosis) -> dict[str, Any]:
    """A diagnosis as a record stores it: its fields and its reason in both languages."""
    return {**d.as_dict(), "why_en": d.why("en"), "why_zh": d.why("zh")}


def measure(
    server: VllmServer,
    model: str,
    workload: Workload,
    slo: SLO | None,
    paths: PointPaths,
    *,
    cfg: MeasureConfig | None = None,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int | None = None,
    on_window: Any = None,
    first_index: int = 0,
) -> tuple[Warmup | None, list[Window]]:
    """Warm up, then measure windows until ``1 + cfg.repeats`` are valid or ``cfg.remeasure``
    invalid ones are spent; returns the warm-up and every window in order. ``first_index``:
    the first window's index (and seed offset). ``max_num_seqs``/``max_num_batched_tokens``:
    the server's effective values, for the diagnosis."""
    cfg = cfg or MeasureConfig()
    paths.dir.mkdir(parents=True, exist_ok=True)
    p = _Point(server, model, workload, slo, paths, cfg, (max_num_seqs, max_num_batched_tokens))
    warm = _warm_up(p)
    covered = warm.running_max if warm is not None and warm.status == "ok" else None
    windows: list[Window] = []
    invalid = 0
    while sum(1 for w in windows if w.valid) < 1 + cfg.repeats:
        purpose = "measure" if not windows else "remeasure" if not windows[-1].valid else "repeat"
        win = _window(p, first_index + len(windows), purpose, covered)
        windows.append(win)
        if on_window is not None:
            on_window(win)
        if not win.ok or not server.alive():
            break
        covered = warmed_peak(covered, win.load.get("running_max"))
        if not win.valid:
            invalid += 1
            if invalid > cfg.remeasure:
                break
    return warm, windows
