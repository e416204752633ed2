"""Every parser of vLLM 0.26.0 log text: the one place that knows what vLLM prints.

- start-up failures: a table of (pattern, one-line reason), most specific first, each rule
  quoting the vLLM source line it matches (``classify_failure``);
- start-up facts: KV cache tokens and GiB, max concurrency, weights, torch.compile and
  engine-init seconds (``startup_facts``, ``engine_init_times``);
- the periodic engine stats lines (``engine_stats``);
- the JIT monitor's lines with their stamps and byte offsets (``jit_compiles``);
- ``vllm bench serve`` failures (``bench_failure_reason``) and the output of
  ``vllm bench sweep serve`` timestamped by tools/gpu/side_by_side.sh (``parse_sweep_log``).

Log prefix (vllm/logger.py): ``LEVEL MM-DD HH:MM:SS [file.py:N] message`` in local time,
one-second resolution, no year.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "EngineStatsLine",
    "JIT_LINE",
    "JitCompile",
    "MEMORY_LINE_MARKS",
    "MemoryProfile",
    "StartupFacts",
    "bench_failure_reason",
    "classify_failure",
    "engine_init_times",
    "engine_stats",
    "jit_compiles",
    "log_stamps",
    "memory_lines",
    "memory_profile",
    "one_line",
    "parse_sweep_log",
    "stamp_datetime",
    "startup_facts",
]

MAX_REASON = 300
# "INFO 11-29 10:15:37 [file.py:N]" (vllm/logger.py: datefmt "%m-%d %H:%M:%S")
LOG_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d) \[")
_STAMP_PARTS = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")


def one_line(text: str, limit: int = MAX_REASON) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def log_stamps(text: str) -> list[str]:
    """Every "MM-DD HH:MM:SS" stamp of vLLM's logger in ``text``, in order."""
    return [m.group(1) for m in LOG_STAMP.finditer(text)]


def stamp_datetime(stamp: str, year: int) -> datetime:
    """A vLLM stamp ("11-29 11:45:29") as a naive local datetime of ``year``."""
    m = _STAMP_PARTS.fullmatch(stamp.strip())
    if m is None:
        raise ValueError(f"not a vLLM log stamp: {stamp!r}")
    mo, d, h, mi, s = (int(x) for x in m.groups())
    return datetime(year, mo, d, h, mi, s)


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 - the last one wins
        pass
    return found


# --------------------------------------------------------------------------------------
# start-up failures: (pattern, reason) rules, most specific first
# --------------------------------------------------------------------------------------


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
    port = _last(re.compile(r"--port[ =](\d+)"), text)
    where = f" ({port.group(1)})" if port else ""
    return f"port in use{where}: Address already in use; pick another --port"


Rule = tuple[re.Pattern[str], Callable[[re.Match[str], str], str]]
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
        lambda m, t: (
            'weights do not fit: no memory left for the KV cache blocks ("No available '
            'memory for the cache blocks"); raise --gpu-memory-utilization, quantize, or '
            "use a bigger GPU"
        ),
    ),
    # v1/worker/utils.py request_memory: "Free memory on device {dev} ({free}/{total} GiB) on
    # startup is less than desired GPU memory utilization ({util}, {req} GiB). ..."
    (
        re.compile(
            r"Free memory on device \S* ?\(([\d.]+)/([\d.]+) GiB\) on startup is less "
            r"than desired GPU memory utilization \(([\d.]+), ([\d.]+) GiB\)"
        ),
        lambda m, t: (
            f"GPU memory already in use: {m.group(1)}/{m.group(2)} GiB free at startup, "
            f"--gpu-memory-utilization {m.group(3)} asks for {m.group(4)} GiB (another "
            "process holds the GPU, or lower the utilization)"
        ),
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
        lambda m, t: (
            f"invalid knob combination: max_num_batched_tokens ({m.group(1)}) must be >= "
            f"max_num_seqs ({m.group(2)}); raise --max-num-batched-tokens with it"
        ),
    ),
    # config/scheduler.py: "max_num_batched_tokens ({a}) is smaller than max_model_len ({b})."
    (
        re.compile(r"max_num_batched_tokens \((\d+)\) is smaller than max_model_len \((\d+)\)"),
        lambda m, t: (
            f"invalid knob combination: max_num_batched_tokens ({m.group(1)}) < "
            f"max_model_len ({m.group(2)}) with chunked prefill off"
        ),
    ),
    # entrypoints/openai/api_server.py create_server_socket: "OSError: [Errno 98] Address
    # already in use" (the port is on the command line, earlier in the log)
    (re.compile(r"Address already in use"), _port),
    # argparse (utils/argparse_utils.py FlexibleArgumentParser):
    # "vllm serve: error: unrecognized arguments: --foo 1"
    (
        re.compile(r"error: unrecognized arguments: ([^\n]*)"),
        lambda m, t: f"unknown flag for vllm 0.26.0: {m.group(1).strip()}",
    ),
    (
        re.compile(r"error: (argument [^\n]*)"),
        lambda m, t: one_line(f"invalid argument: {m.group(1)}"),
    ),
]


def classify_failure(log_text: str, returncode: int | None = None) -> str:
    """One clear line saying why `vllm serve` (0.26.0) failed, from its log."""
    text = log_text or ""
    for pattern, reason in FAILURE_RULES:
        if m := _last(pattern, text):
            return reason(m, text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):  # the last line that names an error, else the last line
        if re.search(r"(Error|Exception|error:|ERROR)", ln):
            return one_line(re.sub(r"^\(?[A-Za-z]*\s*pid=\d+\)?\s*", "", ln))
    if lines:
        return one_line(lines[-1])
    if returncode is not None:
        return f"vllm serve exited with code {returncode}"
    return "vllm serve failed with an empty log"


def bench_failure_reason(log_text: str, returncode: int | None) -> str:
    """One line from a failed `vllm bench serve` log: its last error line, else its exit."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error:" in ln or "Exception" in ln:
            return " ".join(ln.split())[:MAX_REASON]
    last = f" (last line: {lines[-1][:200]})" if lines else ""
    return f"vllm bench serve exited with code {returncode}{last}"


# --------------------------------------------------------------------------------------
# start-up facts
# --------------------------------------------------------------------------------------

# v1/core/kv_cache_utils.py: "GPU KV cache size: %s tokens" and "Maximum concurrency for %s
# tokens per request: %.2fx"; v1/worker/gpu_worker.py: "Available KV cache memory: %s GiB";
# v1/worker/gpu_model_runner.py: "Model loading took %s GiB memory and %.6f seconds";
# compilation/monitor.py: "torch.compile took %.2f s in total" (absent with enforce_eager)
_KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_MAX_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_KV_GIB = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_WEIGHTS = re.compile(r"Model loading took ([\d.]+) GiB")
_COMPILE = re.compile(r"torch\.compile took ([\d.]+) s in total")
# v1/engine/core.py: once per engine start; "(compilation: ...)" only when torch.compile ran
_INIT_ENGINE = re.compile(
    r"init engine \(profile, create kv cache, warmup model\) took "
    r"([\d.]+) s(?: \(compilation: ([\d.]+) s)?"
)


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
    kv, conc, gib = _last(_KV_TOKENS, text), _last(_MAX_CONC, text), _last(_KV_GIB, text)
    weights, comp = _last(_WEIGHTS, text), _last(_COMPILE, text)
    return StartupFacts(
        kv_cache_tokens=int(kv.group(1).replace(",", "")) if kv else None,
        max_concurrency=float(conc.group(2)) if conc else None,
        concurrency_len=int(conc.group(1).replace(",", "")) if conc else None,
        kv_cache_gib=float(gib.group(1)) if gib else None,
        weights_gib=float(weights.group(1)) if weights else None,
        torch_compile_s=float(comp.group(1)) if comp else None,
    )


def engine_init_times(text: str) -> list[tuple[float, float | None]]:
    """(engine init seconds, of which compilation) for each engine start logged in `text`."""
    return [
        (float(m.group(1)), float(m.group(2)) if m.group(2) else None)
        for m in _INIT_ENGINE.finditer(text)
    ]


# vllm/utils/system_utils.py _add_prefix: every line a vLLM child process writes starts with
# "(NAME pid=N) " (NAME: EngineCore, EngineCore_DP<i> with data parallelism, v1/engine/core.py;
# Worker_TP<i> with tensor parallelism, v1/executor/multiproc_executor.py; APIServer), in cyan
# on a terminal
_PROCESS = re.compile(r"^(?:\x1b\[[0-9;]*m)?\(([A-Za-z][\w.-]*) pid=\d+\)")


@dataclass(frozen=True)
class ProcessStartup:
    """What one vLLM process logged at start-up: its facts, and its engine init time (the
    engine core's "init engine ... took" line, of which compilation)."""

    process: str
    facts: StartupFacts
    init_s: float | None = None
    compile_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "process": self.process,
            **self.facts.as_dict(),
            "init_s": self.init_s,
            "compile_s": self.compile_s,
        }


def startup_by_process(text: str) -> dict[str, ProcessStartup]:
    """The start-up facts of each vLLM process in a `vllm serve` log, keyed by its prefix name
    ("EngineCore_DP0", "Worker_TP1", ...), for the processes that logged any: with data
    parallelism each engine reports its own KV pool, with tensor parallelism each worker its
    own share of the weights."""
    lines: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = _PROCESS.match(line)
        if m:
            lines.setdefault(m.group(1), []).append(line)
    out: dict[str, ProcessStartup] = {}
    for name, ls in lines.items():
        part = "\n".join(ls)
        facts, init = startup_facts(part), engine_init_times(part)
        if facts != StartupFacts() or init:
            out[name] = ProcessStartup(
                name, facts, init[-1][0] if init else None, init[-1][1] if init else None
            )
    return out


# --------------------------------------------------------------------------------------
# the memory profile behind "Available KV cache memory" (v1/worker/gpu_worker.py)
# --------------------------------------------------------------------------------------

# Each (field, pattern) quotes the 0.26.0 format it reads; GiB values are format_gib (two
# decimals, vllm/utils/mem_utils.py). DEBUG lines need VLLM_LOGGING_LEVEL=DEBUG.
_F = r"(-?[\d.]+)"
_MEMORY: list[tuple[tuple[str, ...], re.Pattern[str]]] = [
    # gpu_worker.py determine_available_memory (DEBUG): "Initial free memory: %s GiB;
    # Requested memory: %f (util), %s GiB"
    (
        ("init_free_gib", "util", "requested_gib"),
        re.compile(rf"Initial free memory: {_F} GiB; Requested memory: {_F} \(util\), {_F} GiB"),
    ),
    # mem_utils.py MemoryProfilingResult.__repr__ (DEBUG, logger.debug(profile_result))
    (
        ("non_kv_gib", "torch_peak_increase_gib", "non_torch_increase_gib", "weights_memory_gib"),
        re.compile(
            rf"Total non KV cache memory: {_F}GiB; torch peak memory increase: {_F}GiB; "
            rf"non-torch forward increase memory: {_F}GiB; weights memory: {_F}GiB\."
        ),
    ),
    # gpu_worker.py compile_or_warm_up_model (INFO): "Free memory on device ({free}/{total}
    # GiB) on startup. Desired GPU memory utilization is ({util}, {requested} GiB). Actual
    # usage is {w} GiB for weight, {p} GiB for peak activation, {n} GiB for non-torch memory,
    # and {cg} GiB for CUDAGraph memory. Replace gpu_memory_utilization config with
    # `--kv-cache-memory={b}` ..., or `--kv-cache-memory={b}` ..."
    (
        (
            "init_free_gib",
            "total_gib",
            "util",
            "requested_gib",
            "weights_memory_gib",
            "torch_peak_increase_gib",
            "non_torch_increase_gib",
            "cudagraph_gib",
            "kv_bytes_to_requested",
            "kv_bytes_to_gpu",
        ),
        re.compile(
            rf"Free memory on device \({_F}/{_F} GiB\) on startup\. Desired GPU memory "
            rf"utilization is \({_F}, {_F} GiB\)\. Actual usage is {_F} GiB for weight, "
            rf"{_F} GiB for peak activation, {_F} GiB for non-torch memory, and {_F} GiB for "
            r"CUDAGraph memory\. Replace gpu_memory_utilization config with "
            r"`--kv-cache-memory=(-?\d+)`.*?`--kv-cache-memory=(-?\d+)`"
        ),
    ),
    # gpu_model_runner.py profile_cudagraph_memory (V1 runner only; V2 returns 0 silently):
    # "Estimated CUDA graph memory: %.2f GiB total"
    (("cudagraph_estimate_gib",), re.compile(rf"Estimated CUDA graph memory: {_F} GiB total")),
    # gpu/model_runner.py and gpu_model_runner.py capture_model: "Graph capturing finished in
    # %.0f secs, took %.2f GiB"
    (("cudagraph_gib",), re.compile(rf"Graph capturing finished in \d+ secs, took {_F} GiB")),
    # gpu_worker.py: "Available KV cache memory: %s GiB"
    (("available_kv_gib",), _KV_GIB),
    # config/scheduler.py: "Chunked prefill is enabled with max_num_batched_tokens=%d."
    (("max_num_batched_tokens",), re.compile(r"max_num_batched_tokens=(\d+)\.")),
]
_INTS = {"kv_bytes_to_requested", "kv_bytes_to_gpu", "max_num_batched_tokens"}
# gpu_worker.py init_device: logger.info_once("Using V2 Model Runner")
_V2 = "Using V2 Model Runner"
_MARKS = "Initial free memory:|Total non KV cache memory:|Free memory on device (|Estimated CUDA \
graph memory:|Graph capturing finished|Available KV cache memory:|GPU KV cache size:|Maximum \
concurrency for|Model loading took|max_num_batched_tokens="
MEMORY_LINE_MARKS = (*_MARKS.split("|"), _V2)


@dataclass(frozen=True)
class MemoryProfile:
    """vLLM's start-up memory accounting as logged (GiB unless named bytes; None: not
    logged). ``available_kv_gib = requested - weights - torch peak increase - non-torch
    increase`` (minus the CUDA graph estimate only where the V1 runner logged one)."""

    total_gib: float | None = None
    init_free_gib: float | None = None
    util: float | None = None
    requested_gib: float | None = None
    weights_memory_gib: float | None = None
    torch_peak_increase_gib: float | None = None
    non_torch_increase_gib: float | None = None
    non_kv_gib: float | None = None
    cudagraph_estimate_gib: float | None = None
    cudagraph_gib: float | None = None
    available_kv_gib: float | None = None
    kv_bytes_to_requested: int | None = None
    kv_bytes_to_gpu: int | None = None
    max_num_batched_tokens: int | None = None
    runner: str | None = None  # "v2" when the log says so

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def memory_lines(text: str) -> list[str]:
    """The lines of a log that carry start-up memory facts (kept verbatim in records)."""
    return [ln.strip() for ln in text.splitlines() if any(m in ln for m in MEMORY_LINE_MARKS)]


def memory_profile(text: str) -> MemoryProfile:
    """The last start's memory accounting from a vLLM 0.26.0 log (DEBUG lines optional)."""
    values: dict[str, Any] = {"runner": "v2" if _V2 in text else None}
    for names, pattern in _MEMORY:
        m = _last(pattern, text)
        if m is None:
            continue
        for name, raw in zip(names, m.groups(), strict=True):
            values[name] = int(raw) if name in _INTS else float(raw)
    return MemoryProfile(**values)


# --------------------------------------------------------------------------------------
# periodic engine stats
# --------------------------------------------------------------------------------------

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
    stamp: str = ""


def engine_stats(text: str) -> list[EngineStatsLine]:
    """vLLM's periodic engine stats lines in a log, in order. The stamps have no year: a
    step back in time is read as a new year (UTC arithmetic, leap-year safe)."""
    out: list[EngineStatsLine] = []
    t0 = prev = None
    for line in text.splitlines():
        m = _STATS.search(line)
        st = LOG_STAMP.search(line) or _STAMP_PARTS.search(line)
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

MARKER = re.compile(r"\[((?:BEGIN|END|SKIPPED) (?:SERVER|BENCHMARK))\]")
# vllm/benchmarks/serve.py benchmark(): print(f"Warming up with {num_warmups} requests...")
WARMUP_LINE = re.compile(r"Warming up with (\d+) requests")
# vllm/benchmarks/serve.py benchmark(): printed after the ready check and the warm-up
MAIN_RUN_LINE = "Starting main benchmark run..."


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
        elif self.cur is not None and "Server overrides:" in msg:
            self.cur["overrides"] = msg.partition("Server overrides:")[2].strip()
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
