"""What vLLM 0.26.0 logs at start-up: KV cache, weights, engine init, memory profile."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from course_utils.core.vllm_logs._common import last_match

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
    kv, conc, gib = (
        last_match(_KV_TOKENS, text),
        last_match(_MAX_CONC, text),
        last_match(_KV_GIB, text),
    )
    weights, comp = last_match(_WEIGHTS, text), last_match(_COMPILE, text)
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
# periodic engine stats
# --------------------------------------------------------------------------------------

# v1/metrics/loggers.py LoggingStatLogger.log: every VLLM_LOG_STATS_INTERVAL (10 s) while
# the engine is busy, when stats are on (LLM(disable_log_stats=False))
