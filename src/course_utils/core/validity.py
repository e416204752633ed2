"""Is a measured window valid? The checks every window passes before it may keep or reject
a value: failed requests, achieved vs offered rate, output length, prefix-cache hits from
replayed prompts, a trace's prompts counted far from its lengths, a vLLM JIT compile inside
the window and a warm-up that did not reach the load's batch shapes. An invalid window is
re-measured, never used (lab.measure)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from course_utils.core.metrics import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES
from course_utils.core.records import Workload
from course_utils.core.workload import TraceWorkload, expected_prefix_hit_rate, scheduled_rate

# A workload without a shared prefix hits the prefix cache only by chance (block-aligned
# repeats of random tokens). Far above that, the prompts were sent before on the same server:
# `vllm bench serve --dataset-name random` draws its prompts from `--seed` (0.26.0
# vllm/benchmarks/datasets/datasets.py RandomDataset), so the course gives each window its
# own seed (vLLM's `vllm bench sweep serve` resets the caches through a dev route instead).
REPLAY_HIT_RATE = 0.5


def prefix_cache_hit_rate(samples: Sequence[Any]) -> float | None:
    """Prefix-cache hit rate during a measured load: the delta of `vllm:prefix_cache_hits`
    over the delta of `vllm:prefix_cache_queries` (both counted in tokens; 0.26.0
    vllm/v1/metrics/loggers.py) from the first to the last /metrics sample.
    None without samples, without the counters (prefix caching off) or without queries."""

    if len(samples) < 2:
        return None
    first, last = samples[0], samples[-1]
    q1, h1 = last.counter(PREFIX_CACHE_QUERIES), last.counter(PREFIX_CACHE_HITS)
    if q1 is None or h1 is None:
        return None
    dq = q1 - (first.counter(PREFIX_CACHE_QUERIES) or 0.0)
    dh = h1 - (first.counter(PREFIX_CACHE_HITS) or 0.0)
    return dh / dq if dq > 0 else None


def prefix_cache_issue(hit_rate: float | None, workload: Workload) -> str | None:
    """The validity issue of a replayed workload, or None. A trace's own shared prefixes
    hit at its expected rate e (core.workload); a replay is a rate past e plus
    REPLAY_HIT_RATE of what is left above it (without a shared prefix, e = 0)."""
    expected = expected_prefix_hit_rate(workload)
    if hit_rate is None or expected is None:
        return None
    if hit_rate <= expected + REPLAY_HIT_RATE * (1.0 - expected):
        return None
    if expected > 0:
        return (
            f"prefix cache hit rate {hit_rate:.0%} where the trace's own shared prefixes "
            f"give {expected:.0%}: prompts were replayed, results are inflated"
        )
    return (
        f"prefix cache hit rate {hit_rate:.0%} on a workload without a shared prefix: "
        "prompts were replayed, results are inflated"
    )


def validity_issues(
    raw: Mapping[str, Any], workload: Workload, *, prefix_cache_hit_rate: float | None = None
) -> list[str]:
    """Checks that a bench result measured what the workload asked for.

    - achieved vs offered request rate: the arrival rate the client really produced
      (from `start_times`, needs --save-detailed), within max(10 %, 3/sqrt(n)) for Poisson;
    - completed vs failed requests; completed + failed == num_prompts;
    - mean output tokens per completed request vs the requested output_len (>= 95 %);
    - with `prefix_cache_hit_rate` (from the /metrics samples of the run, see
      `prefix_cache_hit_rate()`): a workload without a shared prefix must not hit the
      prefix cache (> REPLAY_HIT_RATE means its prompts were replayed).
    """
    issues: list[str] = []
    n = int(workload.num_prompts)
    completed = int(raw.get("completed") or 0)
    failed = int(raw.get("failed") or 0)
    if completed == 0:
        issues.append(f"no request completed ({failed} failed)")
    elif failed:
        issues.append(f"{failed} of {completed + failed} requests failed")
    if completed + failed != n:
        issues.append(f"completed+failed = {completed + failed}, expected num_prompts {n}")
    if completed:
        mean_out = float(raw.get("total_output_tokens") or 0) / completed
        if mean_out < 0.95 * workload.output_len:
            issues.append(
                f"mean output {mean_out:.1f} tokens/request < requested {workload.output_len}"
                " (EOS hit early? pass ignore_eos)"
            )
    starts = [float(s) for s in (raw.get("start_times") or []) if s is not None]
    if (
        not math.isinf(workload.request_rate)
        and workload.max_concurrency is None
        and len(starts) >= 3
    ):
        span = max(starts) - min(starts)
        achieved = (len(starts) - 1) / span if span > 0 else math.inf
        tol = max(0.10, 3.0 / math.sqrt(len(starts)))
        asked = scheduled_rate(workload)
        if math.isfinite(asked) and abs(achieved - asked) > tol * asked:
            issues.append(
                f"offered rate {achieved:.2f} req/s vs requested {asked:g} "
                f"(tolerance {tol:.0%}): the client could not keep the schedule"
            )
    replayed = prefix_cache_issue(prefix_cache_hit_rate, workload)
    if replayed:
        issues.append(replayed)
    longer = trace_prompt_issue(raw, workload) if completed == n and not failed else None
    if longer:
        issues.append(longer)
    return issues


# timed_trace's random prompts are tokenized again by the server (0.26.0 TimedTrace.sample):
# 1.32-1.48 x on Qwen2.5 unscaled; measure() scales slices, leaving about 6 % of noise.
TRACE_PROMPT_TOLERANCE = 0.15


def trace_prompt_issue(raw: Mapping[str, Any], workload: Workload) -> str | None:
    """The issue of a trace window whose prompts the server counted far from the trace's."""
    if not isinstance(workload, TraceWorkload) or not raw.get("total_input_tokens"):
        return None
    try:
        want = sum(r.input_length for r in workload.requests())
    except (OSError, ValueError):  # a recorded workload whose trace is not here
        return None
    ratio = float(raw["total_input_tokens"]) / want
    if abs(ratio - 1.0) <= TRACE_PROMPT_TOLERANCE:
        return None
    return (
        f"the server counted {ratio:.2f} x the trace's prompt tokens (timed_trace's random "
        "prompts tokenized again): re-measure with blocks scaled to this server's tokenizer"
    )


def jit_issue(kernels: Sequence[str]) -> str | None:
    """The validity issue of a window in which vLLM's JIT monitor logged these kernels'
    compiles (a one-time latency spike, not the configuration's cost)."""
    if not kernels:
        return None
    names = ", ".join(sorted(set(kernels)))
    return (
        f"vLLM JIT-compiled {len(kernels)} kernel(s) inside the measured window "
        f"({names}): a one-time latency spike, re-measure on the warm server"
    )


# A warm-up must reach this share of the window's engine peak (running requests, from
# /metrics), give or take sampling noise, to have run the window's batch sizes; a warm-up
# whose samples saw nothing running is not judged (labs/results/h200-2026-11-30/README.md).
WARMUP_COVERAGE = 0.8
WARMUP_SLACK = 2.0


def warmed_peak(covered: float | None, window_peak: float | None) -> float:
    """The engine peak the server has run after one more window (each window warms the
    next): the larger of what the warm-up and earlier windows reached and this window's."""
    return max(float(covered or 0.0), float(window_peak or 0.0))


def warmup_issue(warmup_peak: float | None, load_peak: float | None) -> str | None:
    """The validity issue of a warm-up whose engine peak fell short of the window's."""
    if not warmup_peak or not load_peak:
        return None
    if warmup_peak + WARMUP_SLACK >= WARMUP_COVERAGE * load_peak:
        return None
    return (
        f"the warm-up ran at most {warmup_peak:.0f} requests at once, the window "
        f"{load_peak:.0f}: the load's batch sizes were not warmed up"
    )
