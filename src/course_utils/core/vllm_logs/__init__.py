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

from course_utils.core.vllm_logs._common import (
    LOG_STAMP,
    MAX_REASON,
    log_stamps,
    one_line,
    stamp_datetime,
)
from course_utils.core.vllm_logs.failures import (
    FAILURE_RULES,
    Rule,
    bench_failure_reason,
    classify_failure,
)
from course_utils.core.vllm_logs.runtime import (
    JIT_LINE,
    MAIN_RUN_LINE,
    MARKER,
    RESULT_BANNER,
    SWEEP_LOG_MARKS,
    WARMUP_LINE,
    EngineStatsLine,
    JitCompile,
    engine_stats,
    jit_compiles,
    parse_sweep_log,
)
from course_utils.core.vllm_logs.startup import (
    ProcessStartup,
    StartupFacts,
    engine_init_times,
    startup_by_process,
    startup_facts,
)

__all__ = [
    "EngineStatsLine",
    "FAILURE_RULES",
    "JIT_LINE",
    "JitCompile",
    "LOG_STAMP",
    "MAIN_RUN_LINE",
    "MARKER",
    "RESULT_BANNER",
    "SWEEP_LOG_MARKS",
    "MAX_REASON",
    "ProcessStartup",
    "Rule",
    "StartupFacts",
    "WARMUP_LINE",
    "bench_failure_reason",
    "classify_failure",
    "engine_init_times",
    "engine_stats",
    "jit_compiles",
    "log_stamps",
    "one_line",
    "parse_sweep_log",
    "stamp_datetime",
    "startup_by_process",
    "startup_facts",
]
