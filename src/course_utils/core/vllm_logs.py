"""Every parser of vLLM 0.26.0 log text: start-up failures and facts, engine stats, JIT-monitor
lines, `vllm bench serve` failures and `vllm bench sweep serve` output. Each pattern quotes
the vLLM source line it matches.

Log prefix (vllm/logger.py): ``LEVEL MM-DD HH:MM:SS [file.py:N] message`` in local time,
one-second resolution, no year.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

MAX_REASON = 300
# "INFO 11-29 10:15:37 [file.py:N]" (vllm/logger.py: datefmt "%m-%d %H:%M:%S")
LOG_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d) \[")
STAMP_PARTS = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def one_line(text: str, limit: int = MAX_REASON) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def stamp_datetime(stamp: str, year: int) -> datetime:
    """A vLLM stamp ("11-29 11:45:29") as a naive local datetime of ``year``."""
    m = STAMP_PARTS.fullmatch(stamp.strip())
    if m is None:
        raise ValueError(f"not a vLLM log stamp: {stamp!r}")
    mo, d, h, mi, s = (int(x) for x in m.groups())
    return datetime(year, mo, d, h, mi, s)


def last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    matches = list(pattern.finditer(text))
    return matches[-1] if matches else None


def _kv_too_small(m: re.Match[str], text: str) -> str:
    est = f"; the estimated max_model_len that fits is {m.group(4)}" if m.group(4) else ""
    return (
        f"not enough KV cache memory for max_model_len {m.group(1)}: needs {m.group(2)} "
        f"GiB, {m.group(3)} GiB available{est} (lower --max-model-len or raise "
        "--gpu-memory-utilization)"
    )


def _oom(m: re.Match[str], text: str) -> str:
    tried = re.search(r"Tried to allocate ([\d.]+ [KMG]iB)", m.group(0))
    extra = f" (tried to allocate {tried.group(1)})" if tried else ""
    return (
        f"CUDA out of memory{extra}: lower --gpu-memory-utilization, --max-num-seqs or "
        "--max-num-batched-tokens, or --max-model-len"
    )


def _port(m: re.Match[str], text: str) -> str:
    port = last_match(re.compile(r"--port[ =](\d+)"), text)
    where = f" ({port.group(1)})" if port else ""
    return f"port in use{where}: Address already in use; pick another --port"


# start-up failures, most specific first; a reason is a function of the match and the whole
# log, or a template of the match's groups
Rule = tuple[re.Pattern[str], str | Callable[[re.Match[str], str], str]]
FAILURE_RULES: list[Rule] = [
    # v1/core/kv_cache_utils.py _check_enough_kv_cache_memory: "To serve at least one request
    # with the model's max seq len ({max_model_len}), ({needed} GiB KV cache is needed, which
    # is larger than the available KV cache memory ({available} GiB). Based on the available
    # memory, the estimated maximum model length is {n}. ..."
    (
        re.compile(
            r"To serve at least one request with the model's max seq len \((\d+)\), "
            r"\(([\d.]+) GiB KV cache is needed, which is larger than the available KV "
            r"cache memory \(([\d.]+) GiB\)\.(?: Based on the available memory, the "
            r"estimated maximum model length is (\d+)\.)?"
        ),
        _kv_too_small,
    ),
    # v1/core/kv_cache_utils.py: "No available memory for the cache blocks. Try increasing
    # `gpu_memory_utilization` when initializing the engine ..."
    (
        re.compile(r"No available memory for the cache blocks"),
        'weights do not fit: no memory left for the KV cache blocks ("No available memory for '
        'the cache blocks"); raise --gpu-memory-utilization, quantize, or use a bigger GPU',
    ),
    # v1/worker/utils.py request_memory: "Free memory on device {dev} ({free}/{total} GiB) on
    # startup is less than desired GPU memory utilization ({util}, {req} GiB). ..."
    (
        re.compile(
            r"Free memory on device \S* ?\(([\d.]+)/([\d.]+) GiB\) on startup is less "
            r"than desired GPU memory utilization \(([\d.]+), ([\d.]+) GiB\)"
        ),
        "GPU memory already in use: {0}/{1} GiB free at startup, --gpu-memory-utilization "
        "{2} asks for {3} GiB (another process holds the GPU, or lower the utilization)",
    ),
    # torch: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ..."
    (re.compile(r"CUDA out of memory\.?[^\n]*"), _oom),
    # config/scheduler.py: "max_num_batched_tokens ({a}) must be greater than or equal to
    # max_num_seqs ({b})."
    (
        re.compile(
            r"max_num_batched_tokens \((\d+)\) must be greater than or equal to "
            r"max_num_seqs \((\d+)\)"
        ),
        "invalid knob combination: max_num_batched_tokens ({0}) must be >= max_num_seqs "
        "({1}); raise --max-num-batched-tokens with it",
    ),
    # config/scheduler.py: "max_num_batched_tokens ({a}) is smaller than max_model_len ({b})."
    (
        re.compile(r"max_num_batched_tokens \((\d+)\) is smaller than max_model_len \((\d+)\)"),
        "invalid knob combination: max_num_batched_tokens ({0}) < max_model_len ({1}) with "
        "chunked prefill off",
    ),
    # entrypoints/openai/api_server.py create_server_socket: "OSError: [Errno 98] Address
    # already in use" (the port is on the command line, earlier in the log)
    (re.compile(r"Address already in use"), _port),
    # argparse (utils/argparse_utils.py FlexibleArgumentParser):
    # "vllm serve: error: unrecognized arguments: --foo 1"
    (re.compile(r"error: unrecognized arguments: ([^\n]*)"), "unknown flag for vllm 0.26.0: {0}"),
    (re.compile(r"error: (argument [^\n]*)"), "invalid argument: {0}"),
]


def classify_failure(log_text: str, returncode: int | None = None) -> str:
    """One clear line saying why `vllm serve` (0.26.0) failed, from its log."""
    text = log_text or ""
    for pattern, reason in FAILURE_RULES:
        if m := last_match(pattern, text):
            return reason(m, text) if callable(reason) else one_line(reason.format(*m.groups()))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):  # the last line that names an error, else the last line
        if re.search(r"(Error|Exception|error:|ERROR)", ln):
            return one_line(re.sub(r"^\(?[A-Za-z]*\s*pid=\d+\)?\s*", "", ln))
    if lines:
        return one_line(lines[-1])
    how = "failed with an empty log" if returncode is None else f"exited with code {returncode}"
    return f"vllm serve {how}"


def bench_failure_reason(log_text: str, returncode: int | None) -> str:
    """One line from a failed `vllm bench serve` log: its last error line, else its exit.
    The harness's own lines ("# ...") are skipped."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip() and not ln.startswith("# ")]
    for ln in reversed(lines):
        if "Error" in ln or "error:" in ln or "Exception" in ln:
            return " ".join(ln.split())[:MAX_REASON]
    last = f" (last line: {lines[-1][:200]})" if lines else ""
    return f"vllm bench serve exited with code {returncode}{last}"


# v1/core/kv_cache_utils.py: "GPU KV cache size: %s tokens" and "Maximum concurrency for %s
# tokens per request: %.2fx"; v1/worker/gpu_worker.py: "Available KV cache memory: %s GiB";
# v1/worker/gpu_model_runner.py: "Model loading took %s GiB memory and %.6f seconds";
# compilation/monitor.py: "torch.compile took %.2f s in total" (absent with enforce_eager)
_MAX_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_FACTS: dict[str, tuple[re.Pattern[str], int, Callable[[str], Any]]] = {
    "kv_cache_tokens": (re.compile(r"GPU KV cache size: ([\d,]+) tokens"), 1, int),
    "max_concurrency": (_MAX_CONC, 2, float),
    "concurrency_len": (_MAX_CONC, 1, int),
    "kv_cache_gib": (re.compile(r"Available KV cache memory: ([\d.]+) GiB"), 1, float),
    "weights_gib": (re.compile(r"Model loading took ([\d.]+) GiB"), 1, float),
    "torch_compile_s": (re.compile(r"torch\.compile took ([\d.]+) s in total"), 1, float),
}
# v1/engine/core.py: once per engine start; "(compilation: ...)" only when torch.compile ran
_INIT_ENGINE = re.compile(
    r"init engine \(profile, create kv cache, warmup model\) took "
    r"([\d.]+) s(?: \(compilation: ([\d.]+) s)?"
)
# vllm/utils/system_utils.py _add_prefix: every line a vLLM child process writes starts with
# "(NAME pid=N) " (EngineCore, EngineCore_DP<i>, Worker_TP<i>, APIServer), cyan on a terminal
_PROCESS = re.compile(r"^(?:\x1b\[[0-9;]*m)?\(([A-Za-z][\w.-]*) pid=\d+\)")


@dataclass(frozen=True)
class StartupFacts:
    """What vLLM logged about its last start (None: the line is not in the log)."""

    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_len: int | None = None  # the tokens per request the concurrency is for
    kv_cache_gib: float | None = None
    weights_gib: float | None = None
    torch_compile_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def startup_facts(text: str) -> StartupFacts:
    facts = {}
    for name, (pattern, group, kind) in _FACTS.items():
        m = last_match(pattern, text)
        facts[name] = kind(m.group(group).replace(",", "")) if m else None
    return StartupFacts(**facts)


def engine_init_times(text: str) -> list[tuple[float, float | None]]:
    """(engine init seconds, of which compilation) for each engine start logged in `text`."""
    return [
        (float(m.group(1)), float(m.group(2)) if m.group(2) else None)
        for m in _INIT_ENGINE.finditer(text)
    ]


@dataclass(frozen=True)
class ProcessStartup:
    """One vLLM process's start-up facts and engine init time (of which compilation)."""

    process: str
    facts: StartupFacts
    init_s: float | None = None
    compile_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        d = {"process": self.process, **self.facts.as_dict()}
        return {**d, "init_s": self.init_s, "compile_s": self.compile_s}


def startup_by_process(text: str) -> dict[str, ProcessStartup]:
    """The start-up facts of each vLLM process that logged any, keyed by its prefix name
    ("EngineCore_DP0", "Worker_TP1", ...): with data parallelism each engine reports its own
    KV pool, with tensor parallelism each worker its own share of the weights."""
    lines: dict[str, list[str]] = {}
    for line in text.splitlines():
        if m := _PROCESS.match(line):
            lines.setdefault(m.group(1), []).append(line)
    out: dict[str, ProcessStartup] = {}
    for name, ls in lines.items():
        part = "\n".join(ls)
        facts, init = startup_facts(part), engine_init_times(part)
        if facts != StartupFacts() or init:
            last = init[-1] if init else (None, None)
            out[name] = ProcessStartup(name, facts, *last)
    return out


# v1/metrics/loggers.py LoggingStatLogger.log: every VLLM_LOG_STATS_INTERVAL (10 s) while
# the engine is busy, when stats are on (LLM(disable_log_stats=False))
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


def engine_stats(text: str) -> list[EngineStatsLine]:
    """vLLM's periodic engine stats lines in a log, in order. The stamps have no year: a
    step back in time is read as a new year."""
    out: list[EngineStatsLine] = []
    t0 = prev = None
    for line in text.splitlines():
        m = _STATS.search(line)
        st = LOG_STAMP.search(line) or STAMP_PARTS.search(line)
        if not m or not st:
            continue
        t = stamp_datetime(st.group(1) if st.re is LOG_STAMP else st.group(0), 2000).timestamp()
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
            )
        )
    return out


# vllm/utils/jit_monitor.py _handle_jit_event: "%s %s during inference: %s%s. This causes a
# latency spike; consider extending warmup ..." with the event "kernel JIT compilation"
# (Triton: "Triton kernel JIT compilation during inference: _topk_topp_kernel") or "JIT
# compilation" (CuTeDSL, TileLang); once per kernel and shape per process
JIT_LINE = "JIT compilation during inference"
_JIT = re.compile(r"JIT compilation during inference: ([^\s.,]+)")


@dataclass(frozen=True)
class JitCompile:
    """One JIT-monitor line: its stamp ("" when it has none), the kernel, its byte offset."""

    stamp: str
    kernel: str
    offset: int


def _kernel(line: str) -> str:
    k = _JIT.search(line)
    return k.group(1) if k else "?"


def jit_compiles(text: str, base_offset: int = 0) -> list[JitCompile]:
    """Every JIT-monitor line in ``text``; offsets count from ``base_offset``."""
    out: list[JitCompile] = []
    pos = base_offset
    for line in text.splitlines(keepends=True):
        if JIT_LINE in line:
            st = LOG_STAMP.search(line)
            out.append(JitCompile(st.group(1) if st else "", _kernel(line), pos))
        pos += len(line.encode("utf-8", errors="replace"))
    return out


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
    p = _SweepLog()
    times: list[float] = []
    for line in text.splitlines():
        t_s, _, msg = line.partition(" ")
        try:
            times.append(float(t_s))
        except ValueError:
            continue
        p.feed(times[-1], msg)
    p.close_bench()  # a log that ends inside a benchmark (interrupted)
    for s in p.servers:
        s["ready_s"] = None if s["bench_start"] is None else round(s["bench_start"] - s["start"], 2)
        s["span_s"] = None if s["end"] is None else round(s["end"] - s["start"], 2)
        s["jit_windows"] = s.pop("_windows")
    return {
        "server_starts": len(p.servers),
        "servers": p.servers,
        **p.jit,
        "log_span_s": round(times[-1] - times[0], 2) if times else None,
    }


def _server(t: float) -> dict[str, Any]:
    return {
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


class _SweepLog:
    """parse_sweep_log's state. ``cur``: the server the lines belong to; lines outside any
    server go to one that is not reported."""

    def __init__(self) -> None:
        self.servers: list[dict[str, Any]] = []
        self.cur = _server(0.0)
        self.in_bench = self.measuring = False
        self.pending: list[str] = []  # JIT kernels of this benchmark before its window
        self.jit = {"jit_in_benchmark": 0, "jit_in_warmup": 0, "jit_outside_benchmark": 0}

    def count(self, key: str, n: int) -> None:
        self.jit[key] += n
        self.cur[key] += n

    def close_bench(self) -> None:
        """Settle the JIT lines seen before a main run: warm-up if the window started."""
        if self.pending and self.measuring:
            self.count("jit_in_warmup", len(self.pending))
        elif self.pending:
            self.count("jit_in_benchmark", len(self.pending))
            self.cur["_windows"][-1]["jit"] += self.pending
        self.pending = []

    def jit_line(self, kernel: str) -> None:
        if self.in_bench and self.measuring:
            self.count("jit_in_benchmark", 1)
            self.cur["_windows"][-1]["jit"].append(kernel)
        elif self.in_bench:
            self.pending.append(kernel)
        else:
            self.jit["jit_outside_benchmark"] += 1

    def feed(self, t: float, msg: str) -> None:
        marks = MARKER.findall(msg)  # a marker may follow output without a newline
        if "BEGIN SERVER" in marks:
            self.close_bench()
            self.cur = _server(t)
            self.servers.append(self.cur)
            self.in_bench = self.measuring = False
        elif OVERRIDES_LINE in msg:
            self.cur["overrides"] = msg.partition(OVERRIDES_LINE)[2].strip()
        windows = self.cur["_windows"]
        if "BEGIN BENCHMARK" in marks:
            self.in_bench, self.measuring, self.pending = True, False, []
            self.cur["bench_start"] = self.cur["bench_start"] or t
            windows.append({"start": t, "main_start": None, "end": None, "jit": []})
        if self.in_bench and MAIN_RUN_LINE in msg:
            self.measuring = True
            windows[-1]["main_start"] = t
        if JIT_LINE in msg:
            self.jit_line(_kernel(msg))
        if (m := WARMUP_LINE.search(msg)) and self.in_bench:
            self.cur["warmups_logged"].append(int(m.group(1)))
        if "END BENCHMARK" in marks or "SKIPPED BENCHMARK" in marks:
            self.close_bench()
            self.in_bench = False
            if windows:
                windows[-1]["end"] = t
            if "END BENCHMARK" in marks:
                self.cur["benchmarks_done"] += 1
        if "END SERVER" in marks:
            self.close_bench()
            self.in_bench = False
            self.cur["end"] = t
            self.cur = _server(t)
