"""What vLLM 0.26.0 logs while serving: engine stats, JIT compiles, sweep output."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from course_utils.core.vllm_logs._common import LOG_STAMP, STAMP_PARTS, stamp_datetime

_STATS = re.compile(
    r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
    r"Running: (\d+) reqs, Waiting: (\d+) reqs,.*?(?:Preemptions: (\d+), )?"
    r"GPU KV cache usage: ([\d.]+)%"
)


@dataclass(frozen=True)
class EngineStatsLine:
    """One stats line: seconds since the first line, tokens/s over the interval, requests
    running and waiting, preemptions in the interval, KV cache usage (0-1)."""

    t_s: float
    prompt_tok_s: float
    gen_tok_s: float
    running: int
    waiting: int
    preemptions: int
    kv_usage: float
    stamp: str = ""


def engine_stats(text: str) -> list[EngineStatsLine]:
    """vLLM's periodic engine stats lines in a log, in order. The stamps have no year: a
    step back in time is read as a new year (UTC arithmetic, leap-year safe)."""
    out: list[EngineStatsLine] = []
    t0 = prev = None
    for line in text.splitlines():
        m = _STATS.search(line)
        st = LOG_STAMP.search(line) or STAMP_PARTS.search(line)
        if not m or not st:
            continue
        stamp = st.group(1) if st.re is LOG_STAMP else st.group(0)
        t = stamp_datetime(stamp, 2000).timestamp()
        if prev is not None and t < prev:
            t += 366 * 86400
        t0, prev = (t if t0 is None else t0), t
        out.append(
            EngineStatsLine(
                t_s=round(t - t0),
                prompt_tok_s=float(m.group(1)),
                gen_tok_s=float(m.group(2)),
                running=int(m.group(3)),
                waiting=int(m.group(4)),
                preemptions=int(m.group(5) or 0),
                kv_usage=round(float(m.group(6)) / 100.0, 4),
                stamp=stamp,
            )
        )
    return out


# --------------------------------------------------------------------------------------
# the JIT monitor
# --------------------------------------------------------------------------------------

# vllm/utils/jit_monitor.py _handle_jit_event: "%s %s during inference: %s%s. This causes a
# latency spike; consider extending warmup ..." with the event "kernel JIT compilation"
# (Triton: "Triton kernel JIT compilation during inference: _topk_topp_kernel") or "JIT
# compilation" (CuTeDSL, TileLang); once per kernel and shape per process
JIT_LINE = "JIT compilation during inference"
_JIT = re.compile(r"JIT compilation during inference: ([^\s.,]+)")


@dataclass(frozen=True)
class JitCompile:
    """One JIT-monitor line: its stamp ("" when the line has none), the kernel, and the
    byte offset of the line in the text it was read from."""

    stamp: str
    kernel: str
    offset: int
    line: str = field(default="", compare=False)


def jit_compiles(text: str, base_offset: int = 0) -> list[JitCompile]:
    """Every JIT-monitor line in ``text``; offsets count from ``base_offset``."""
    out: list[JitCompile] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        if JIT_LINE in line:
            k = _JIT.search(line)
            st = LOG_STAMP.search(line)
            out.append(
                JitCompile(
                    stamp=st.group(1) if st else "",
                    kernel=k.group(1) if k else "?",
                    offset=base_offset + pos,
                    line=line.strip(),
                )
            )
        pos += len(line.encode("utf-8", errors="replace"))
    return out


# --------------------------------------------------------------------------------------
# `vllm bench sweep serve` output, each line prefixed with a Unix time by side_by_side.sh
# --------------------------------------------------------------------------------------

# vllm/benchmarks/sweep/serve.py: print("[BEGIN SERVER]") and the like around each step
MARKER_NAMES = (
    "BEGIN SERVER",
    "END SERVER",
    "BEGIN BENCHMARK",
    "END BENCHMARK",
    "SKIPPED BENCHMARK",
)
MARKER = re.compile(r"\[(" + "|".join(re.escape(n) for n in MARKER_NAMES) + r")\]")
# vllm/benchmarks/sweep/serve.py: print(f"Server overrides: {serve_overrides}")
OVERRIDES_LINE = "Server overrides:"
# vllm/benchmarks/serve.py benchmark(): print(f"Warming up with {num_warmups} requests...")
WARMUP_TEXT = "Warming up with"
WARMUP_LINE = re.compile(re.escape(WARMUP_TEXT) + r" (\d+) requests")
# vllm/benchmarks/serve.py benchmark(): printed after the ready check and the warm-up
MAIN_RUN_LINE = "Starting main benchmark run..."
# vllm/benchmarks/serve.py benchmark(): the result table's banner, printed after the load
# and its percentiles
RESULT_BANNER = " Serving Benchmark Result "
# the text parse_sweep_log reads: a copy that cuts a long sweep log must keep these lines
SWEEP_LOG_MARKS = (
    *(f"[{n}]" for n in MARKER_NAMES),
    OVERRIDES_LINE,
    WARMUP_TEXT,
    MAIN_RUN_LINE,
    JIT_LINE,
)


def parse_sweep_log(text: str) -> dict[str, Any]:
    """Server starts and spans from a `vllm bench sweep serve` log whose lines start with a
    Unix time. One entry per `[BEGIN SERVER]`: overrides, start, first benchmark start, end
    (None: never ended), benchmarks finished, JIT lines inside a measured window and the
    warm-up counts printed. A benchmark's measured window starts at "Starting main benchmark
    run..."; a JIT compile before it was absorbed by the warm-up (`jit_in_warmup`); a
    benchmark that never prints the line counts all its JIT lines as measured."""
    p = _SweepLogParser()
    for line in text.splitlines():
        p.feed(line)
    p.close_bench()  # a log that ends inside a benchmark (interrupted)
    for s in p.servers:
        s["ready_s"] = None if s["bench_start"] is None else round(s["bench_start"] - s["start"], 2)
        s["span_s"] = None if s["end"] is None else round(s["end"] - s["start"], 2)
        s["jit_windows"] = s.pop("_windows")
    return {
        "server_starts": len(p.servers),
        "servers": p.servers,
        "jit_in_benchmark": p.jit_in,
        "jit_in_warmup": p.jit_warm,
        "jit_outside_benchmark": p.jit_out,
        "log_span_s": None if p.first is None or p.last is None else round(p.last - p.first, 2),
    }


class _SweepLogParser:
    def __init__(self) -> None:
        self.servers: list[dict[str, Any]] = []
        self.cur: dict[str, Any] | None = None
        self.first: float | None = None
        self.last: float | None = None
        self.in_bench = self.measuring = False
        self.pending: list[str] = []  # JIT kernels of this benchmark before its window
        self.jit_in = self.jit_out = self.jit_warm = 0

    def close_bench(self) -> None:
        """Settle the JIT lines seen before a main run: warm-up if the window started."""
        n = len(self.pending)
        if self.measuring:
            self.jit_warm += n
        else:
            self.jit_in += n
        if self.cur is not None:
            self.cur["jit_in_warmup" if self.measuring else "jit_in_benchmark"] += n
            if not self.measuring and n and self.cur["_windows"]:
                self.cur["_windows"][-1]["jit"] += self.pending
        self.pending = []

    def feed(self, line: str) -> None:
        t_s, _, msg = line.partition(" ")
        try:
            t = float(t_s)
        except ValueError:
            return
        self.first = t if self.first is None else self.first
        self.last = t
        marks = MARKER.findall(msg)  # a marker may follow output without a newline
        if "BEGIN SERVER" in marks:
            self.close_bench()
            self.cur = {
                "overrides": None,
                "start": t,
                "bench_start": None,
                "end": None,
                "benchmarks_done": 0,
                "jit_in_benchmark": 0,
                "jit_in_warmup": 0,
                "warmups_logged": [],
                "_windows": [],
            }
            self.servers.append(self.cur)
            self.in_bench = self.measuring = False
        elif self.cur is not None and OVERRIDES_LINE in msg:
            self.cur["overrides"] = msg.partition(OVERRIDES_LINE)[2].strip()
        if "BEGIN BENCHMARK" in marks:
            self.in_bench, self.measuring, self.pending = True, False, []
            if self.cur is not None:
                self.cur["bench_start"] = self.cur["bench_start"] or t
                self.cur["_windows"].append(
                    {"start": t, "main_start": None, "end": None, "jit": []}
                )
        if self.in_bench and MAIN_RUN_LINE in msg:
            self.measuring = True
            if self.cur is not None and self.cur["_windows"]:
                self.cur["_windows"][-1]["main_start"] = t
        if JIT_LINE in msg:
            self._jit(msg)
        m = WARMUP_LINE.search(msg)
        if m and self.in_bench and self.cur is not None:
            self.cur["warmups_logged"].append(int(m.group(1)))
        if "END BENCHMARK" in marks or "SKIPPED BENCHMARK" in marks:
            self.close_bench()
            self.in_bench = False
            if self.cur is not None and self.cur["_windows"]:
                self.cur["_windows"][-1]["end"] = t
        if self.cur is not None and "END BENCHMARK" in marks:
            self.cur["benchmarks_done"] += 1
        if "END SERVER" in marks:
            self.close_bench()
            self.in_bench = False
            if self.cur is not None:
                self.cur["end"] = t
                self.cur = None

    def _jit(self, msg: str) -> None:
        k = _JIT.search(msg)
        kernel = k.group(1) if k else "?"
        if self.in_bench and self.measuring:
            self.jit_in += 1
            if self.cur is not None:
                self.cur["jit_in_benchmark"] += 1
                if self.cur["_windows"]:
                    self.cur["_windows"][-1]["jit"].append(kernel)
        elif self.in_bench:
            self.pending.append(kernel)
        else:
            self.jit_out += 1
