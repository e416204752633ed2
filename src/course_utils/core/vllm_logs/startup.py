"""What vLLM 0.26.0 logs at start-up: KV cache, weights, engine init, memory profile."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from course_utils.core.vllm_logs._common import _last

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
# entrypoints/serve/utils/api_utils.py: "non-default args: %s", once per start (a
# log holding several starts is split at it)
ARGS_LINE = "non-default args: "
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
